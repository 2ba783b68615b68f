//! The binder uapi, transcribed from `include/uapi/linux/android/binder.h` (Linux 7.2),
//! 64-bit layout (`BINDER_IPC_32BIT` unset: `binder_size_t`/`binder_uintptr_t` are u64).
//!
//! Names follow the header so the two can be compared line by line.

#![allow(non_camel_case_types)]

use core::mem::size_of;

pub type binder_size_t = u64;
pub type binder_uintptr_t = u64;

// ---- asm-generic/ioctl.h (arm64 and x86_64 both use the generic layout) ----

const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_SIZEBITS: u32 = 14;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

pub const IOC_NONE: u32 = 0;
pub const IOC_WRITE: u32 = 1;
pub const IOC_READ: u32 = 2;

pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    // The size field is 14 bits: a bigger struct would silently corrupt the code.
    assert!(size < (1 << IOC_SIZEBITS));
    (dir << IOC_DIRSHIFT)
        | ((ty as u32) << IOC_TYPESHIFT)
        | ((nr as u32) << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}
pub const fn io(ty: u8, nr: u8) -> u32 {
    ioc(IOC_NONE, ty, nr, 0)
}
pub const fn ior<T>(ty: u8, nr: u8) -> u32 {
    ioc(IOC_READ, ty, nr, size_of::<T>())
}
pub const fn iow<T>(ty: u8, nr: u8) -> u32 {
    ioc(IOC_WRITE, ty, nr, size_of::<T>())
}
pub const fn iowr<T>(ty: u8, nr: u8) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size_of::<T>())
}
/// `_IOC_SIZE`: payload size encoded in a command or return code.
pub const fn ioc_size(code: u32) -> usize {
    ((code >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

// ---- object types ----

const fn b_pack_chars(c1: u8, c2: u8, c3: u8, c4: u8) -> u32 {
    ((c1 as u32) << 24) | ((c2 as u32) << 16) | ((c3 as u32) << 8) | (c4 as u32)
}
pub const B_TYPE_LARGE: u8 = 0x85;
pub const BINDER_TYPE_BINDER: u32 = b_pack_chars(b's', b'b', b'*', B_TYPE_LARGE);
pub const BINDER_TYPE_WEAK_BINDER: u32 = b_pack_chars(b'w', b'b', b'*', B_TYPE_LARGE);
pub const BINDER_TYPE_HANDLE: u32 = b_pack_chars(b's', b'h', b'*', B_TYPE_LARGE);
pub const BINDER_TYPE_WEAK_HANDLE: u32 = b_pack_chars(b'w', b'h', b'*', B_TYPE_LARGE);
pub const BINDER_TYPE_FD: u32 = b_pack_chars(b'f', b'd', b'*', B_TYPE_LARGE);
pub const BINDER_TYPE_FDA: u32 = b_pack_chars(b'f', b'd', b'a', B_TYPE_LARGE);
pub const BINDER_TYPE_PTR: u32 = b_pack_chars(b'p', b't', b'*', B_TYPE_LARGE);

pub const FLAT_BINDER_FLAG_PRIORITY_MASK: u32 = 0xff;
pub const FLAT_BINDER_FLAG_ACCEPTS_FDS: u32 = 0x100;
pub const FLAT_BINDER_FLAG_TXN_SECURITY_CTX: u32 = 0x1000;
/// Android's (the Android Common Kernel's uapi, not mainline's): a node's minimum scheduling
/// policy (bits 9-10; the low byte is its priority) and whether it inherits real-time callers.
pub const FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT: u32 = 9;
pub const FLAT_BINDER_FLAG_SCHED_POLICY_MASK: u32 = 3 << FLAT_BINDER_FLAG_SCHED_POLICY_SHIFT;
pub const FLAT_BINDER_FLAG_INHERIT_RT: u32 = 0x800;

pub const BINDER_BUFFER_FLAG_HAS_PARENT: u32 = 0x01;

// ---- structs ----

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_object_header {
    pub type_: u32,
}

/// The 8-byte union of `flat_binder_object`: `binder` (local object) or `handle`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union flat_binder_object_u {
    pub binder: binder_uintptr_t,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct flat_binder_object {
    pub hdr: binder_object_header,
    pub flags: u32,
    pub u: flat_binder_object_u,
    pub cookie: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union binder_fd_object_u {
    pub pad_binder: binder_uintptr_t,
    pub fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct binder_fd_object {
    pub hdr: binder_object_header,
    pub pad_flags: u32,
    pub u: binder_fd_object_u,
    pub cookie: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_buffer_object {
    pub hdr: binder_object_header,
    pub flags: u32,
    pub buffer: binder_uintptr_t,
    pub length: binder_size_t,
    pub parent: binder_size_t,
    pub parent_offset: binder_size_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_fd_array_object {
    pub hdr: binder_object_header,
    pub pad: u32,
    pub num_fds: binder_size_t,
    pub parent: binder_size_t,
    pub parent_offset: binder_size_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_write_read {
    pub write_size: binder_size_t,
    pub write_consumed: binder_size_t,
    pub write_buffer: binder_uintptr_t,
    pub read_size: binder_size_t,
    pub read_consumed: binder_size_t,
    pub read_buffer: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_version {
    pub protocol_version: i32,
}

pub const BINDER_CURRENT_PROTOCOL_VERSION: i32 = 8;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_node_debug_info {
    pub ptr: binder_uintptr_t,
    pub cookie: binder_uintptr_t,
    pub has_strong_ref: u32,
    pub has_weak_ref: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_node_info_for_ref {
    pub handle: u32,
    pub strong_count: u32,
    pub weak_count: u32,
    pub reserved1: u32,
    pub reserved2: u32,
    pub reserved3: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_freeze_info {
    pub pid: u32,
    pub enable: u32,
    pub timeout_ms: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_frozen_status_info {
    pub pid: u32,
    pub sync_recv: u32,
    pub async_recv: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_frozen_state_info {
    pub cookie: binder_uintptr_t,
    pub is_frozen: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_extended_error {
    pub id: u32,
    pub command: u32,
    pub param: i32,
}

pub const BINDER_WRITE_READ: u32 = iowr::<binder_write_read>(b'b', 1);
pub const BINDER_SET_IDLE_TIMEOUT: u32 = iow::<i64>(b'b', 3);
pub const BINDER_SET_MAX_THREADS: u32 = iow::<u32>(b'b', 5);
pub const BINDER_SET_IDLE_PRIORITY: u32 = iow::<i32>(b'b', 6);
pub const BINDER_SET_CONTEXT_MGR: u32 = iow::<i32>(b'b', 7);
pub const BINDER_THREAD_EXIT: u32 = iow::<i32>(b'b', 8);
pub const BINDER_VERSION: u32 = iowr::<binder_version>(b'b', 9);
pub const BINDER_GET_NODE_DEBUG_INFO: u32 = iowr::<binder_node_debug_info>(b'b', 11);
pub const BINDER_GET_NODE_INFO_FOR_REF: u32 = iowr::<binder_node_info_for_ref>(b'b', 12);
pub const BINDER_SET_CONTEXT_MGR_EXT: u32 = iow::<flat_binder_object>(b'b', 13);
pub const BINDER_FREEZE: u32 = iow::<binder_freeze_info>(b'b', 14);
pub const BINDER_GET_FROZEN_INFO: u32 = iowr::<binder_frozen_status_info>(b'b', 15);
pub const BINDER_ENABLE_ONEWAY_SPAM_DETECTION: u32 = iow::<u32>(b'b', 16);
pub const BINDER_GET_EXTENDED_ERROR: u32 = iowr::<binder_extended_error>(b'b', 17);

pub const TF_ONE_WAY: u32 = 0x01;
pub const TF_ROOT_OBJECT: u32 = 0x04;
pub const TF_STATUS_CODE: u32 = 0x08;
pub const TF_ACCEPT_FDS: u32 = 0x10;
pub const TF_CLEAR_BUF: u32 = 0x20;
pub const TF_UPDATE_TXN: u32 = 0x40;

#[repr(C)]
#[derive(Clone, Copy)]
pub union binder_transaction_data_target {
    pub handle: u32,
    pub ptr: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_transaction_data_ptr {
    pub buffer: binder_uintptr_t,
    pub offsets: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union binder_transaction_data_data {
    pub ptr: binder_transaction_data_ptr,
    pub buf: [u8; 8],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct binder_transaction_data {
    pub target: binder_transaction_data_target,
    pub cookie: binder_uintptr_t,
    pub code: u32,
    pub flags: u32,
    /// `__kernel_pid_t`
    pub sender_pid: i32,
    /// `__kernel_uid32_t`
    pub sender_euid: u32,
    pub data_size: binder_size_t,
    pub offsets_size: binder_size_t,
    pub data: binder_transaction_data_data,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct binder_transaction_data_secctx {
    pub transaction_data: binder_transaction_data,
    pub secctx: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct binder_transaction_data_sg {
    pub transaction_data: binder_transaction_data,
    pub buffers_size: binder_size_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_ptr_cookie {
    pub ptr: binder_uintptr_t,
    pub cookie: binder_uintptr_t,
}

/// `__packed` in the header: 12 bytes, the cookie is unaligned.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_handle_cookie {
    pub handle: u32,
    pub cookie: binder_uintptr_t,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_pri_desc {
    pub priority: i32,
    pub desc: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct binder_pri_ptr_cookie {
    pub priority: i32,
    pub ptr: binder_uintptr_t,
    pub cookie: binder_uintptr_t,
}

// ---- enum binder_driver_return_protocol ----

pub const BR_ERROR: u32 = ior::<i32>(b'r', 0);
pub const BR_OK: u32 = io(b'r', 1);
pub const BR_TRANSACTION_SEC_CTX: u32 = ior::<binder_transaction_data_secctx>(b'r', 2);
pub const BR_TRANSACTION: u32 = ior::<binder_transaction_data>(b'r', 2);
pub const BR_REPLY: u32 = ior::<binder_transaction_data>(b'r', 3);
pub const BR_ACQUIRE_RESULT: u32 = ior::<i32>(b'r', 4);
pub const BR_DEAD_REPLY: u32 = io(b'r', 5);
pub const BR_TRANSACTION_COMPLETE: u32 = io(b'r', 6);
pub const BR_INCREFS: u32 = ior::<binder_ptr_cookie>(b'r', 7);
pub const BR_ACQUIRE: u32 = ior::<binder_ptr_cookie>(b'r', 8);
pub const BR_RELEASE: u32 = ior::<binder_ptr_cookie>(b'r', 9);
pub const BR_DECREFS: u32 = ior::<binder_ptr_cookie>(b'r', 10);
pub const BR_ATTEMPT_ACQUIRE: u32 = ior::<binder_pri_ptr_cookie>(b'r', 11);
pub const BR_NOOP: u32 = io(b'r', 12);
pub const BR_SPAWN_LOOPER: u32 = io(b'r', 13);
pub const BR_FINISHED: u32 = io(b'r', 14);
pub const BR_DEAD_BINDER: u32 = ior::<binder_uintptr_t>(b'r', 15);
pub const BR_CLEAR_DEATH_NOTIFICATION_DONE: u32 = ior::<binder_uintptr_t>(b'r', 16);
pub const BR_FAILED_REPLY: u32 = io(b'r', 17);
pub const BR_FROZEN_REPLY: u32 = io(b'r', 18);
pub const BR_ONEWAY_SPAM_SUSPECT: u32 = io(b'r', 19);
pub const BR_TRANSACTION_PENDING_FROZEN: u32 = io(b'r', 20);
pub const BR_FROZEN_BINDER: u32 = ior::<binder_frozen_state_info>(b'r', 21);
pub const BR_CLEAR_FREEZE_NOTIFICATION_DONE: u32 = ior::<binder_uintptr_t>(b'r', 22);

// ---- enum binder_driver_command_protocol ----

pub const BC_TRANSACTION: u32 = iow::<binder_transaction_data>(b'c', 0);
pub const BC_REPLY: u32 = iow::<binder_transaction_data>(b'c', 1);
pub const BC_ACQUIRE_RESULT: u32 = iow::<i32>(b'c', 2);
pub const BC_FREE_BUFFER: u32 = iow::<binder_uintptr_t>(b'c', 3);
pub const BC_INCREFS: u32 = iow::<u32>(b'c', 4);
pub const BC_ACQUIRE: u32 = iow::<u32>(b'c', 5);
pub const BC_RELEASE: u32 = iow::<u32>(b'c', 6);
pub const BC_DECREFS: u32 = iow::<u32>(b'c', 7);
pub const BC_INCREFS_DONE: u32 = iow::<binder_ptr_cookie>(b'c', 8);
pub const BC_ACQUIRE_DONE: u32 = iow::<binder_ptr_cookie>(b'c', 9);
pub const BC_ATTEMPT_ACQUIRE: u32 = iow::<binder_pri_desc>(b'c', 10);
pub const BC_REGISTER_LOOPER: u32 = io(b'c', 11);
pub const BC_ENTER_LOOPER: u32 = io(b'c', 12);
pub const BC_EXIT_LOOPER: u32 = io(b'c', 13);
pub const BC_REQUEST_DEATH_NOTIFICATION: u32 = iow::<binder_handle_cookie>(b'c', 14);
pub const BC_CLEAR_DEATH_NOTIFICATION: u32 = iow::<binder_handle_cookie>(b'c', 15);
pub const BC_DEAD_BINDER_DONE: u32 = iow::<binder_uintptr_t>(b'c', 16);
pub const BC_TRANSACTION_SG: u32 = iow::<binder_transaction_data_sg>(b'c', 17);
pub const BC_REPLY_SG: u32 = iow::<binder_transaction_data_sg>(b'c', 18);
pub const BC_REQUEST_FREEZE_NOTIFICATION: u32 = iow::<binder_handle_cookie>(b'c', 19);
pub const BC_CLEAR_FREEZE_NOTIFICATION: u32 = iow::<binder_handle_cookie>(b'c', 20);
pub const BC_FREEZE_NOTIFICATION_DONE: u32 = iow::<binder_uintptr_t>(b'c', 21);

// The wire codec writes these structs field by field; pin the layout it assumes.
const _: () = {
    assert!(size_of::<binder_write_read>() == 48);
    assert!(size_of::<binder_transaction_data>() == 64);
    assert!(size_of::<binder_transaction_data_secctx>() == 72);
    assert!(size_of::<binder_transaction_data_sg>() == 72);
    assert!(size_of::<flat_binder_object>() == 24);
    assert!(size_of::<binder_fd_object>() == 24);
    assert!(size_of::<binder_buffer_object>() == 40);
    assert!(size_of::<binder_fd_array_object>() == 32);
    assert!(size_of::<binder_handle_cookie>() == 12);
    assert!(size_of::<binder_ptr_cookie>() == 16);
    assert!(size_of::<binder_pri_ptr_cookie>() == 24);
    assert!(size_of::<binder_frozen_state_info>() == 16);
};
