//! The guest's init and step programs in one static binary, busybox-style: the initramfs
//! holds it once as /bin/guestbox, with /init and /bin/NAME symlinks to it, and it runs the
//! program its argv[0] names. Each static program carried its own copy of std and glibc
//! (about 1 MB each); the kernel unpacks the initramfs at every boot, so one copy saves
//! unpack time on every boot.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// Every program by its installed name (`rootfs::GUEST_PROGRAMS` plus init; a host test
/// checks the two lists agree).
const PROGRAMS: &[(&str, fn())] = &[
    ("init", init::main),
    ("topology", topology::main),
    ("binder-smoke", binder_smoke::main),
    ("binder-conformance", binder_conformance::main),
    ("binder-fuzz", binder_fuzz::main),
    ("ctabs-check", ctabs_check::main),
    ("binder-throughput", binder_throughput::main),
    ("binder-tiers", binder_tiers::main),
    ("binder-sendvec", binder_sendvec::main),
    ("binder-inversion", binder_inversion::main),
    ("binder-kprof", binder_kprof::main),
    ("cpu-loops", cpu_loops::main),
    ("wake-latency", cpu_loops::wake::main),
    ("sched-sync", sched_sync::main),
];

fn find(name: &OsStr) -> Option<fn()> {
    PROGRAMS.iter().find(|(n, _)| OsStr::new(n) == name).map(|(_, f)| *f)
}

fn main() {
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_default();
    let name = Path::new(&arg0).file_name().unwrap_or_default();
    if let Some(run) = find(name) {
        return run();
    }
    // `guestbox NAME ARGS...` (also under another name, e.g. a copy in an overlay): run NAME
    // as if invoked by that name. Re-exec rather than call, so the program parses the argv
    // it always sees.
    if let Some(prog) = args.next().filter(|p| find(p).is_some()) {
        let err = std::process::Command::new("/proc/self/exe").arg0(&prog).args(args).exec();
        eprintln!("guestbox: cannot re-exec /proc/self/exe as {}: {err}", prog.to_string_lossy());
        std::process::exit(127);
    }
    let names: Vec<&str> = PROGRAMS.iter().map(|(n, _)| *n).collect();
    eprintln!(
        "guestbox: no program named {:?}: run it as one of {} (a symlink to it), or as `guestbox NAME [ARGS...]`",
        name.to_string_lossy(),
        names.join(", ")
    );
    std::process::exit(127);
}
