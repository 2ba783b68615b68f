//! The profile plugin (qemu/plugins/profile) and `lab profile`'s symbolization: one short
//! icount boot of the default plan (binder-smoke makes real binder calls) on the perf kernel.

use lab::harness::opts::RunOpts;
use lab::harness::qemu::Tcg;
use lab::measure::profile::{self, profiled_run, Profile};
use lab_tests::assert_ok;

#[test]
fn kernel_profile_names_the_binder_ioctl_and_adds_up() {
    let opts = RunOpts { plan: "default".into(), tcg: Tcg::Icount, ..Default::default() };
    let (o, p) = profiled_run(&opts).unwrap();
    assert_ok(&o);
    // The Rust driver's ioctl entry ran for binder-smoke's calls.
    let ioctl = p.functions.get("rust_binder::rust_binder_ioctl").copied().unwrap_or(0);
    assert!(ioctl > 0, "no instructions in rust_binder_ioctl:\n{}", profile::table(&p, 30));
    // A boot to power-off executes about 160M kernel instructions (157,044,754 on perf):
    // within 50M..1G, every one attributed, and the user programs' share below the kernel's.
    assert!((50_000_000..1_000_000_000).contains(&p.kernel), "kernel instructions {}", p.kernel);
    assert_eq!(p.kernel, p.functions.values().sum::<u64>() + p.unresolved);
    assert!(p.unresolved == 0, "{} instructions outside System.map's text", p.unresolved);
    assert!(p.user > 0 && p.user < p.kernel, "user {} kernel {}", p.user, p.kernel);
    // The run directory keeps what `lab profile --from` needs, and gives the same profile.
    let again: Profile = profile::load(&o.dir).unwrap();
    assert_eq!(again, p);
}
