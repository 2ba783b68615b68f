//! Host side of the binder-lab guest: cross-builds the guest programs
//! ([`build_guest`]), unpacks busybox ([`extract_busybox`]) and packs a deterministic
//! initramfs ([`pack_initramfs`]) whose SHA-256 ([`content_key`]) is a cache key.
//!
//! The guest programs themselves live in the separate cargo workspace `rootfs/guest`
//! (init, topology, binder-smoke and the `binder` library).

mod busybox;
mod elf;
mod guest;
mod initramfs;

pub use busybox::{busybox_deb_path, extract_busybox, BUSYBOX_APPLETS};
pub use elf::check_static_aarch64;
pub use guest::{
    build_guest, build_user_crate, check_prerequisites, guest_build_command, guest_dir, GuestBins, GuestBuildOpts,
    GUEST_LINKER, GUEST_MULTICALL, GUEST_PROGRAMS, GUEST_RUSTFLAGS, GUEST_TARGET, STATIC_LIBC,
};
pub use initramfs::{content_key, list_entries, pack_initramfs, write_initramfs, EntryInfo, InitramfsSpec, BASE_DIRS};
