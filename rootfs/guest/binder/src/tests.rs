use crate::protocol::*;
use crate::uapi::*;
use std::mem::{offset_of, size_of};

// Expected values computed by hand from binder.h with the asm-generic ioctl layout:
// dir<<30 | size<<16 | type<<8 | nr, sizes from the 64-bit structs.
#[test]
fn ioctl_codes_match_hand_computed_values() {
    let cases: &[(&str, u32, u32)] = &[
        ("BINDER_WRITE_READ", BINDER_WRITE_READ, 0xc030_6201),
        ("BINDER_SET_IDLE_TIMEOUT", BINDER_SET_IDLE_TIMEOUT, 0x4008_6203),
        ("BINDER_SET_MAX_THREADS", BINDER_SET_MAX_THREADS, 0x4004_6205),
        ("BINDER_SET_CONTEXT_MGR", BINDER_SET_CONTEXT_MGR, 0x4004_6207),
        ("BINDER_THREAD_EXIT", BINDER_THREAD_EXIT, 0x4004_6208),
        ("BINDER_VERSION", BINDER_VERSION, 0xc004_6209),
        ("BINDER_GET_NODE_DEBUG_INFO", BINDER_GET_NODE_DEBUG_INFO, 0xc018_620b),
        ("BINDER_SET_CONTEXT_MGR_EXT", BINDER_SET_CONTEXT_MGR_EXT, 0x4018_620d),
        ("BINDER_FREEZE", BINDER_FREEZE, 0x400c_620e),
        ("BINDER_GET_EXTENDED_ERROR", BINDER_GET_EXTENDED_ERROR, 0xc00c_6211),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}: {got:#010x} != {want:#010x}");
    }
}

#[test]
fn command_codes_match_hand_computed_values() {
    let cases: &[(&str, u32, u32)] = &[
        ("BC_TRANSACTION", BC_TRANSACTION, 0x4040_6300),
        ("BC_REPLY", BC_REPLY, 0x4040_6301),
        ("BC_ACQUIRE_RESULT", BC_ACQUIRE_RESULT, 0x4004_6302),
        ("BC_FREE_BUFFER", BC_FREE_BUFFER, 0x4008_6303),
        ("BC_INCREFS", BC_INCREFS, 0x4004_6304),
        ("BC_DECREFS", BC_DECREFS, 0x4004_6307),
        ("BC_INCREFS_DONE", BC_INCREFS_DONE, 0x4010_6308),
        ("BC_ACQUIRE_DONE", BC_ACQUIRE_DONE, 0x4010_6309),
        ("BC_ATTEMPT_ACQUIRE", BC_ATTEMPT_ACQUIRE, 0x4008_630a),
        ("BC_REGISTER_LOOPER", BC_REGISTER_LOOPER, 0x0000_630b),
        ("BC_ENTER_LOOPER", BC_ENTER_LOOPER, 0x0000_630c),
        ("BC_EXIT_LOOPER", BC_EXIT_LOOPER, 0x0000_630d),
        // binder_handle_cookie is packed: 12 bytes.
        ("BC_REQUEST_DEATH_NOTIFICATION", BC_REQUEST_DEATH_NOTIFICATION, 0x400c_630e),
        ("BC_DEAD_BINDER_DONE", BC_DEAD_BINDER_DONE, 0x4008_6310),
        ("BC_TRANSACTION_SG", BC_TRANSACTION_SG, 0x4048_6311),
        ("BC_REPLY_SG", BC_REPLY_SG, 0x4048_6312),
        ("BC_FREEZE_NOTIFICATION_DONE", BC_FREEZE_NOTIFICATION_DONE, 0x4008_6315),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}: {got:#010x} != {want:#010x}");
    }
}

#[test]
fn return_codes_match_hand_computed_values() {
    let cases: &[(&str, u32, u32)] = &[
        ("BR_ERROR", BR_ERROR, 0x8004_7200),
        ("BR_OK", BR_OK, 0x0000_7201),
        ("BR_TRANSACTION_SEC_CTX", BR_TRANSACTION_SEC_CTX, 0x8048_7202),
        ("BR_TRANSACTION", BR_TRANSACTION, 0x8040_7202),
        ("BR_REPLY", BR_REPLY, 0x8040_7203),
        ("BR_DEAD_REPLY", BR_DEAD_REPLY, 0x0000_7205),
        ("BR_TRANSACTION_COMPLETE", BR_TRANSACTION_COMPLETE, 0x0000_7206),
        ("BR_INCREFS", BR_INCREFS, 0x8010_7207),
        ("BR_ATTEMPT_ACQUIRE", BR_ATTEMPT_ACQUIRE, 0x8018_720b),
        ("BR_NOOP", BR_NOOP, 0x0000_720c),
        ("BR_SPAWN_LOOPER", BR_SPAWN_LOOPER, 0x0000_720d),
        ("BR_DEAD_BINDER", BR_DEAD_BINDER, 0x8008_720f),
        ("BR_FAILED_REPLY", BR_FAILED_REPLY, 0x0000_7211),
        ("BR_FROZEN_REPLY", BR_FROZEN_REPLY, 0x0000_7212),
        ("BR_FROZEN_BINDER", BR_FROZEN_BINDER, 0x8010_7215),
        ("BR_CLEAR_FREEZE_NOTIFICATION_DONE", BR_CLEAR_FREEZE_NOTIFICATION_DONE, 0x8008_7216),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}: {got:#010x} != {want:#010x}");
    }
}

#[test]
fn object_types() {
    assert_eq!(BINDER_TYPE_BINDER, 0x7362_2a85);
    assert_eq!(BINDER_TYPE_HANDLE, 0x7368_2a85);
    assert_eq!(BINDER_TYPE_FD, 0x6664_2a85);
    assert_eq!(BINDER_TYPE_FDA, 0x6664_6185);
    assert_eq!(BINDER_TYPE_PTR, 0x7074_2a85);
}

// The codec writes fields in declaration order; check that matches the C layout.
#[test]
fn transaction_data_layout() {
    assert_eq!(size_of::<binder_transaction_data>(), TransactionData::SIZE);
    assert_eq!(offset_of!(binder_transaction_data, target), 0);
    assert_eq!(offset_of!(binder_transaction_data, cookie), 8);
    assert_eq!(offset_of!(binder_transaction_data, code), 16);
    assert_eq!(offset_of!(binder_transaction_data, flags), 20);
    assert_eq!(offset_of!(binder_transaction_data, sender_pid), 24);
    assert_eq!(offset_of!(binder_transaction_data, sender_euid), 28);
    assert_eq!(offset_of!(binder_transaction_data, data_size), 32);
    assert_eq!(offset_of!(binder_transaction_data, offsets_size), 40);
    assert_eq!(offset_of!(binder_transaction_data, data), 48);
    assert_eq!(offset_of!(binder_handle_cookie, cookie), 4);
    assert_eq!(offset_of!(binder_pri_ptr_cookie, ptr), 8);
}

#[test]
fn encoded_transaction_matches_struct_bytes() {
    let t = TransactionData {
        target: 7,
        cookie: 0x1122_3344_5566_7788,
        code: 42,
        flags: TF_ONE_WAY,
        sender_pid: -1,
        sender_euid: 1000,
        data_size: 16,
        offsets_size: 8,
        buffer: 0xdead_beef_0000,
        offsets: 0xcafe_0000,
    };
    let mut out = Vec::new();
    Command::Transaction(t).encode(&mut out);
    let c = binder_transaction_data {
        target: binder_transaction_data_target { ptr: 7 },
        cookie: t.cookie,
        code: 42,
        flags: TF_ONE_WAY,
        sender_pid: -1,
        sender_euid: 1000,
        data_size: 16,
        offsets_size: 8,
        data: binder_transaction_data_data {
            ptr: binder_transaction_data_ptr { buffer: t.buffer, offsets: t.offsets },
        },
    };
    // SAFETY: binder_transaction_data has no padding (64 bytes of 8/4-byte fields, size
    // asserted in uapi), so all its bytes are initialized.
    let c_bytes =
        unsafe { std::slice::from_raw_parts(&c as *const _ as *const u8, size_of::<binder_transaction_data>()) };
    assert_eq!(&out[..4], &BC_TRANSACTION.to_ne_bytes());
    assert_eq!(&out[4..], c_bytes);
    assert_eq!(t.handle(), 7);
}

fn sample_tr(n: u64) -> TransactionData {
    TransactionData {
        target: n,
        cookie: n * 3,
        code: n as u32 + 1,
        flags: TF_ACCEPT_FDS,
        sender_pid: 123,
        sender_euid: 0,
        data_size: 4,
        offsets_size: 0,
        buffer: 0x7f00_0000_1000 + n,
        offsets: 0,
    }
}

#[test]
fn commands_round_trip() {
    let pc = PtrCookie { ptr: 0x10, cookie: 0x20 };
    let cmds = vec![
        Command::Transaction(sample_tr(1)),
        Command::Reply(sample_tr(2)),
        Command::AcquireResult(-3),
        Command::FreeBuffer(0x7f00_0000_2000),
        Command::IncRefs(1),
        Command::Acquire(2),
        Command::Release(3),
        Command::DecRefs(4),
        Command::IncRefsDone(pc),
        Command::AcquireDone(pc),
        Command::AttemptAcquire { priority: -5, desc: 6 },
        Command::RegisterLooper,
        Command::EnterLooper,
        Command::ExitLooper,
        Command::RequestDeathNotification { handle: 9, cookie: 0xabcdef },
        Command::ClearDeathNotification { handle: 9, cookie: 0xabcdef },
        Command::DeadBinderDone(0xabcdef),
        Command::TransactionSg { data: sample_tr(3), buffers_size: 64 },
        Command::ReplySg { data: sample_tr(4), buffers_size: 128 },
        Command::RequestFreezeNotification { handle: 1, cookie: 2 },
        Command::ClearFreezeNotification { handle: 1, cookie: 2 },
        Command::FreezeNotificationDone(2),
    ];
    let mut wb = WriteBuf::new();
    for c in &cmds {
        wb.push(*c);
    }
    let mut rest = wb.as_bytes();
    let mut back = Vec::new();
    while !rest.is_empty() {
        let (c, r) = Command::decode(rest).unwrap();
        back.push(c);
        rest = r;
    }
    assert_eq!(back, cmds);
}

#[test]
fn returns_round_trip() {
    let pc = PtrCookie { ptr: 0x30, cookie: 0x40 };
    let rets = vec![
        Return::Noop,
        Return::Error(-22),
        Return::Ok,
        Return::TransactionSecCtx { data: sample_tr(5), secctx: 0x99 },
        Return::Transaction(sample_tr(6)),
        Return::Reply(sample_tr(7)),
        Return::AcquireResult(1),
        Return::DeadReply,
        Return::TransactionComplete,
        Return::IncRefs(pc),
        Return::Acquire(pc),
        Return::Release(pc),
        Return::DecRefs(pc),
        Return::AttemptAcquire { priority: 3, ptr: 4, cookie: 5 },
        Return::SpawnLooper,
        Return::Finished,
        Return::DeadBinder(6),
        Return::ClearDeathNotificationDone(7),
        Return::FailedReply,
        Return::FrozenReply,
        Return::OnewaySpamSuspect,
        Return::TransactionPendingFrozen,
        Return::FrozenBinder { cookie: 8, is_frozen: 1 },
        Return::ClearFreezeNotificationDone(9),
    ];
    let mut buf = Vec::new();
    for r in &rets {
        r.encode(&mut buf);
    }
    let back: Vec<Return> = ReturnReader::new(&buf).map(|r| r.unwrap()).collect();
    assert_eq!(back, rets);
}

#[test]
fn decode_errors() {
    let mut buf = Vec::new();
    Return::Reply(sample_tr(1)).encode(&mut buf);
    buf.truncate(40);
    assert_eq!(Return::decode(&buf).unwrap_err(), DecodeError::Truncated { code: BR_REPLY, need: 64, have: 36 });
    assert!(matches!(Return::decode(&[1, 2]), Err(DecodeError::Truncated { .. })));
    let bogus = io(b'r', 200).to_ne_bytes();
    assert_eq!(Return::decode(&bogus).unwrap_err(), DecodeError::UnknownCode(io(b'r', 200)));
    // A command code is not a return code.
    assert!(matches!(Return::decode(&BC_ENTER_LOOPER.to_ne_bytes()), Err(DecodeError::UnknownCode(_))));
    // The reader stops after an error.
    let mut two = Vec::new();
    Return::Noop.encode(&mut two);
    two.extend_from_slice(&bogus);
    let items: Vec<_> = ReturnReader::new(&two).collect();
    assert_eq!(items.len(), 2);
    assert!(items[1].is_err());
}

#[test]
fn write_buf_consume() {
    let mut wb = WriteBuf::new();
    wb.push(Command::EnterLooper).push(Command::FreeBuffer(5));
    assert_eq!(wb.len(), 4 + 12);
    wb.consume(4);
    assert_eq!(Command::decode(wb.as_bytes()).unwrap().0, Command::FreeBuffer(5));
    wb.consume(100);
    assert!(wb.is_empty());
}

// ---- parcel / objects ----

use crate::parcel::*;

#[test]
fn object_encodings_match_the_c_structs() {
    // flat_binder_object: type, flags, binder (u64), cookie.
    let mut b = Vec::new();
    Object::Binder { weak: false, flags: FLAT_BINDER_FLAG_ACCEPTS_FDS | 7, ptr: 0x1122, cookie: 0x3344 }.encode(&mut b);
    let c = flat_binder_object {
        hdr: binder_object_header { type_: BINDER_TYPE_BINDER },
        flags: FLAT_BINDER_FLAG_ACCEPTS_FDS | 7,
        u: flat_binder_object_u { binder: 0x1122 },
        cookie: 0x3344,
    };
    // SAFETY: flat_binder_object is 24 bytes of initialized fields (no padding: 4+4+8+8).
    let cb = unsafe { std::slice::from_raw_parts(&c as *const _ as *const u8, 24) };
    assert_eq!(b, cb);

    // A handle lives in the low 32 bits of the union; the high half is zero.
    let mut h = Vec::new();
    Object::Handle { weak: true, flags: 0, handle: 9, cookie: 0 }.encode(&mut h);
    assert_eq!(&h[..4], &BINDER_TYPE_WEAK_HANDLE.to_ne_bytes());
    assert_eq!(&h[8..16], &9u64.to_ne_bytes());

    let mut f = Vec::new();
    Object::Fd { fd: 5, cookie: 77 }.encode(&mut f);
    let cf = binder_fd_object {
        hdr: binder_object_header { type_: BINDER_TYPE_FD },
        pad_flags: 0,
        u: binder_fd_object_u { pad_binder: 5 },
        cookie: 77,
    };
    // SAFETY: binder_fd_object is 24 bytes of initialized fields.
    let cfb = unsafe { std::slice::from_raw_parts(&cf as *const _ as *const u8, 24) };
    assert_eq!(f, cfb);

    let mut p = Vec::new();
    Object::Ptr { flags: BINDER_BUFFER_FLAG_HAS_PARENT, buffer: 1, length: 2, parent: 3, parent_offset: 4 }
        .encode(&mut p);
    assert_eq!(p.len(), size_of::<binder_buffer_object>());
    let mut a = Vec::new();
    Object::Fda { num_fds: 2, parent: 0, parent_offset: 8 }.encode(&mut a);
    assert_eq!(a.len(), size_of::<binder_fd_array_object>());
    assert_eq!(offset_of!(binder_buffer_object, buffer), 8);
    assert_eq!(offset_of!(binder_fd_array_object, num_fds), 8);
    assert_eq!(offset_of!(flat_binder_object, cookie), 16);
}

#[test]
fn objects_round_trip_and_errors() {
    let objs = [
        Object::binder(0x10, 0x20),
        Object::Binder { weak: true, flags: 0x100, ptr: 1, cookie: 2 },
        Object::handle(3),
        Object::Handle { weak: true, flags: 0, handle: u32::MAX, cookie: 4 },
        Object::fd(42),
        Object::Ptr { flags: 1, buffer: 0xdead, length: 64, parent: 0, parent_offset: 8 },
        Object::Fda { num_fds: 3, parent: 0, parent_offset: 16 },
    ];
    for o in objs {
        let mut b = Vec::new();
        o.encode(&mut b);
        assert_eq!(b.len(), o.size());
        assert_eq!(Object::decode(&b), Ok(o));
        assert_eq!(Object::decode(&b[..b.len() - 1]), Err(ObjectError::Truncated { need: b.len(), have: b.len() - 1 }));
    }
    assert_eq!(Object::decode(&0x1234u32.to_ne_bytes()), Err(ObjectError::UnknownType(0x1234)));
    assert!(matches!(Object::decode(&[1, 2]), Err(ObjectError::Truncated { need: 4, .. })));
}

#[test]
fn parcel_layout_and_reader() {
    let mut p = Parcel::new();
    p.write_u32(7).write_str("abc").write_object(Object::binder(1, 2)).write_u64(9).write_object(Object::fd(3));
    // u32 (4) + len (4) + "abc" padded to 4 → 12, object aligned to 8 → at 16.
    assert_eq!(p.offsets(), &[16, 48]);
    assert_eq!(p.len(), 48 + 24);
    let mut r = ParcelReader::new(p.data());
    assert_eq!(r.read_u32(), Ok(7));
    assert_eq!(r.read_str().unwrap(), "abc");
    assert_eq!(r.read_object(), Ok(Object::binder(1, 2)));
    assert_eq!(r.read_u64(), Ok(9));
    assert_eq!(r.read_object(), Ok(Object::fd(3)));
    assert_eq!(r.remaining(), 0);
    assert_eq!(r.read_u32(), Err(ShortRead { at: p.len(), need: 4 }));
    let offs: Vec<u8> = p.offsets().iter().flat_map(|o| o.to_ne_bytes()).collect();
    assert_eq!(decode_offsets(&offs), p.offsets());
    let found: Vec<Object> = objects_at(p.data(), p.offsets()).into_iter().map(|r| r.unwrap().1).collect();
    assert_eq!(found, [Object::binder(1, 2), Object::fd(3)]);
    assert!(objects_at(p.data(), &[1000])[0].is_err());
}

// ---- the uapi against the pinned kernel header ----

/// The pinned kernel source's binder.h (kernel-config/kernel.lock, unpacked by
/// `cargo make setup`/`kernel` into the lab cache), if present.
fn pinned_header() -> Option<std::path::PathBuf> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let lock = std::fs::read_to_string(repo.join("kernel-config/kernel.lock")).ok()?;
    let version = lock.lines().find_map(|l| l.trim().strip_prefix("version = "))?.trim_matches('"').to_string();
    let safe: String =
        version.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    let cache = std::env::var_os("BINDER_LAB_CACHE").map(std::path::PathBuf::from).unwrap_or_else(|| {
        let base = std::env::var_os("XDG_CACHE_HOME").map(std::path::PathBuf::from).unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache")
        });
        base.join("binder-lab")
    });
    let h = cache.join(format!("kernel/src/linux-{safe}/include/uapi/linux/android/binder.h"));
    h.is_file().then_some(h)
}

// Compiles a C program against the pinned header with the host compiler (the 64-bit
// layout is the same on x86_64 and arm64, and both use the generic ioctl encoding) and
// compares every constant, struct size and field offset the crate relies on.
#[test]
fn uapi_matches_the_pinned_kernel_header() {
    let Some(header) = pinned_header() else {
        eprintln!("pinned kernel source not unpacked (cargo make setup): header check skipped");
        return;
    };
    let consts: &[(&str, u64)] = &[
        ("BINDER_WRITE_READ", BINDER_WRITE_READ as u64),
        ("BINDER_SET_IDLE_TIMEOUT", BINDER_SET_IDLE_TIMEOUT as u64),
        ("BINDER_SET_MAX_THREADS", BINDER_SET_MAX_THREADS as u64),
        ("BINDER_SET_IDLE_PRIORITY", BINDER_SET_IDLE_PRIORITY as u64),
        ("BINDER_SET_CONTEXT_MGR", BINDER_SET_CONTEXT_MGR as u64),
        ("BINDER_THREAD_EXIT", BINDER_THREAD_EXIT as u64),
        ("BINDER_VERSION", BINDER_VERSION as u64),
        ("BINDER_GET_NODE_DEBUG_INFO", BINDER_GET_NODE_DEBUG_INFO as u64),
        ("BINDER_GET_NODE_INFO_FOR_REF", BINDER_GET_NODE_INFO_FOR_REF as u64),
        ("BINDER_SET_CONTEXT_MGR_EXT", BINDER_SET_CONTEXT_MGR_EXT as u64),
        ("BINDER_FREEZE", BINDER_FREEZE as u64),
        ("BINDER_GET_FROZEN_INFO", BINDER_GET_FROZEN_INFO as u64),
        ("BINDER_ENABLE_ONEWAY_SPAM_DETECTION", BINDER_ENABLE_ONEWAY_SPAM_DETECTION as u64),
        ("BINDER_GET_EXTENDED_ERROR", BINDER_GET_EXTENDED_ERROR as u64),
        ("BINDER_CURRENT_PROTOCOL_VERSION", BINDER_CURRENT_PROTOCOL_VERSION as u64),
        ("BINDER_TYPE_BINDER", BINDER_TYPE_BINDER as u64),
        ("BINDER_TYPE_WEAK_BINDER", BINDER_TYPE_WEAK_BINDER as u64),
        ("BINDER_TYPE_HANDLE", BINDER_TYPE_HANDLE as u64),
        ("BINDER_TYPE_WEAK_HANDLE", BINDER_TYPE_WEAK_HANDLE as u64),
        ("BINDER_TYPE_FD", BINDER_TYPE_FD as u64),
        ("BINDER_TYPE_FDA", BINDER_TYPE_FDA as u64),
        ("BINDER_TYPE_PTR", BINDER_TYPE_PTR as u64),
        ("FLAT_BINDER_FLAG_PRIORITY_MASK", FLAT_BINDER_FLAG_PRIORITY_MASK as u64),
        ("FLAT_BINDER_FLAG_ACCEPTS_FDS", FLAT_BINDER_FLAG_ACCEPTS_FDS as u64),
        ("FLAT_BINDER_FLAG_TXN_SECURITY_CTX", FLAT_BINDER_FLAG_TXN_SECURITY_CTX as u64),
        ("BINDER_BUFFER_FLAG_HAS_PARENT", BINDER_BUFFER_FLAG_HAS_PARENT as u64),
        ("TF_ONE_WAY", TF_ONE_WAY as u64),
        ("TF_ROOT_OBJECT", TF_ROOT_OBJECT as u64),
        ("TF_STATUS_CODE", TF_STATUS_CODE as u64),
        ("TF_ACCEPT_FDS", TF_ACCEPT_FDS as u64),
        ("TF_CLEAR_BUF", TF_CLEAR_BUF as u64),
        ("TF_UPDATE_TXN", TF_UPDATE_TXN as u64),
        ("BR_ERROR", BR_ERROR as u64),
        ("BR_OK", BR_OK as u64),
        ("BR_TRANSACTION_SEC_CTX", BR_TRANSACTION_SEC_CTX as u64),
        ("BR_TRANSACTION", BR_TRANSACTION as u64),
        ("BR_REPLY", BR_REPLY as u64),
        ("BR_ACQUIRE_RESULT", BR_ACQUIRE_RESULT as u64),
        ("BR_DEAD_REPLY", BR_DEAD_REPLY as u64),
        ("BR_TRANSACTION_COMPLETE", BR_TRANSACTION_COMPLETE as u64),
        ("BR_INCREFS", BR_INCREFS as u64),
        ("BR_ACQUIRE", BR_ACQUIRE as u64),
        ("BR_RELEASE", BR_RELEASE as u64),
        ("BR_DECREFS", BR_DECREFS as u64),
        ("BR_ATTEMPT_ACQUIRE", BR_ATTEMPT_ACQUIRE as u64),
        ("BR_NOOP", BR_NOOP as u64),
        ("BR_SPAWN_LOOPER", BR_SPAWN_LOOPER as u64),
        ("BR_FINISHED", BR_FINISHED as u64),
        ("BR_DEAD_BINDER", BR_DEAD_BINDER as u64),
        ("BR_CLEAR_DEATH_NOTIFICATION_DONE", BR_CLEAR_DEATH_NOTIFICATION_DONE as u64),
        ("BR_FAILED_REPLY", BR_FAILED_REPLY as u64),
        ("BR_FROZEN_REPLY", BR_FROZEN_REPLY as u64),
        ("BR_ONEWAY_SPAM_SUSPECT", BR_ONEWAY_SPAM_SUSPECT as u64),
        ("BR_TRANSACTION_PENDING_FROZEN", BR_TRANSACTION_PENDING_FROZEN as u64),
        ("BR_FROZEN_BINDER", BR_FROZEN_BINDER as u64),
        ("BR_CLEAR_FREEZE_NOTIFICATION_DONE", BR_CLEAR_FREEZE_NOTIFICATION_DONE as u64),
        ("BC_TRANSACTION", BC_TRANSACTION as u64),
        ("BC_REPLY", BC_REPLY as u64),
        ("BC_ACQUIRE_RESULT", BC_ACQUIRE_RESULT as u64),
        ("BC_FREE_BUFFER", BC_FREE_BUFFER as u64),
        ("BC_INCREFS", BC_INCREFS as u64),
        ("BC_ACQUIRE", BC_ACQUIRE as u64),
        ("BC_RELEASE", BC_RELEASE as u64),
        ("BC_DECREFS", BC_DECREFS as u64),
        ("BC_INCREFS_DONE", BC_INCREFS_DONE as u64),
        ("BC_ACQUIRE_DONE", BC_ACQUIRE_DONE as u64),
        ("BC_ATTEMPT_ACQUIRE", BC_ATTEMPT_ACQUIRE as u64),
        ("BC_REGISTER_LOOPER", BC_REGISTER_LOOPER as u64),
        ("BC_ENTER_LOOPER", BC_ENTER_LOOPER as u64),
        ("BC_EXIT_LOOPER", BC_EXIT_LOOPER as u64),
        ("BC_REQUEST_DEATH_NOTIFICATION", BC_REQUEST_DEATH_NOTIFICATION as u64),
        ("BC_CLEAR_DEATH_NOTIFICATION", BC_CLEAR_DEATH_NOTIFICATION as u64),
        ("BC_DEAD_BINDER_DONE", BC_DEAD_BINDER_DONE as u64),
        ("BC_TRANSACTION_SG", BC_TRANSACTION_SG as u64),
        ("BC_REPLY_SG", BC_REPLY_SG as u64),
        ("BC_REQUEST_FREEZE_NOTIFICATION", BC_REQUEST_FREEZE_NOTIFICATION as u64),
        ("BC_CLEAR_FREEZE_NOTIFICATION", BC_CLEAR_FREEZE_NOTIFICATION as u64),
        ("BC_FREEZE_NOTIFICATION_DONE", BC_FREEZE_NOTIFICATION_DONE as u64),
    ];
    let layouts: &[(&str, usize)] = &[
        ("sizeof(struct binder_write_read)", size_of::<binder_write_read>()),
        ("offsetof(struct binder_write_read, read_buffer)", offset_of!(binder_write_read, read_buffer)),
        ("sizeof(struct binder_transaction_data)", size_of::<binder_transaction_data>()),
        ("offsetof(struct binder_transaction_data, code)", offset_of!(binder_transaction_data, code)),
        ("offsetof(struct binder_transaction_data, sender_pid)", offset_of!(binder_transaction_data, sender_pid)),
        ("offsetof(struct binder_transaction_data, data_size)", offset_of!(binder_transaction_data, data_size)),
        ("offsetof(struct binder_transaction_data, offsets_size)", offset_of!(binder_transaction_data, offsets_size)),
        ("offsetof(struct binder_transaction_data, data)", offset_of!(binder_transaction_data, data)),
        ("sizeof(struct binder_transaction_data_secctx)", size_of::<binder_transaction_data_secctx>()),
        ("sizeof(struct binder_transaction_data_sg)", size_of::<binder_transaction_data_sg>()),
        ("sizeof(struct flat_binder_object)", size_of::<flat_binder_object>()),
        ("offsetof(struct flat_binder_object, cookie)", offset_of!(flat_binder_object, cookie)),
        ("sizeof(struct binder_fd_object)", size_of::<binder_fd_object>()),
        ("sizeof(struct binder_buffer_object)", size_of::<binder_buffer_object>()),
        ("offsetof(struct binder_buffer_object, parent_offset)", offset_of!(binder_buffer_object, parent_offset)),
        ("sizeof(struct binder_fd_array_object)", size_of::<binder_fd_array_object>()),
        ("sizeof(struct binder_handle_cookie)", size_of::<binder_handle_cookie>()),
        ("sizeof(struct binder_ptr_cookie)", size_of::<binder_ptr_cookie>()),
        ("sizeof(struct binder_pri_desc)", size_of::<binder_pri_desc>()),
        ("sizeof(struct binder_pri_ptr_cookie)", size_of::<binder_pri_ptr_cookie>()),
        ("sizeof(struct binder_node_debug_info)", size_of::<binder_node_debug_info>()),
        ("sizeof(struct binder_node_info_for_ref)", size_of::<binder_node_info_for_ref>()),
        ("sizeof(struct binder_freeze_info)", size_of::<binder_freeze_info>()),
        ("sizeof(struct binder_frozen_status_info)", size_of::<binder_frozen_status_info>()),
        ("sizeof(struct binder_frozen_state_info)", size_of::<binder_frozen_state_info>()),
        ("sizeof(struct binder_extended_error)", size_of::<binder_extended_error>()),
        ("sizeof(struct binder_version)", size_of::<binder_version>()),
    ];
    let dir = std::env::temp_dir().join(format!("binder-uapi-check-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("linux/android")).unwrap();
    // What scripts/headers_install.sh does for userspace: the kernel's `__packed` macro
    // becomes the attribute (compiled raw it would declare a variable instead).
    let text = std::fs::read_to_string(&header).unwrap().replace("} __packed;", "} __attribute__((packed));");
    std::fs::write(dir.join("linux/android/binder.h"), text).unwrap();
    let mut c =
        String::from("#include <stdio.h>\n#include <stddef.h>\n#include <linux/android/binder.h>\nint main(void) {\n");
    for (name, _) in consts {
        c.push_str(&format!("  printf(\"%llu\\n\", (unsigned long long)({name}));\n"));
    }
    for (expr, _) in layouts {
        c.push_str(&format!("  printf(\"%llu\\n\", (unsigned long long)({expr}));\n"));
    }
    c.push_str("  return 0;\n}\n");
    std::fs::write(dir.join("check.c"), c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .arg("-I")
        .arg(&dir)
        .arg(dir.join("check.c"))
        .arg("-o")
        .arg(dir.join("check"))
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("no C compiler ({cc}: {e}): header check skipped");
            return;
        }
    };
    assert!(out.status.success(), "compiling against {}: {}", header.display(), String::from_utf8_lossy(&out.stderr));
    let run = std::process::Command::new(dir.join("check")).output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let got: Vec<u64> = String::from_utf8_lossy(&run.stdout).lines().map(|l| l.parse().unwrap()).collect();
    let want: Vec<(&str, u64)> = consts.iter().copied().chain(layouts.iter().map(|&(n, v)| (n, v as u64))).collect();
    assert_eq!(got.len(), want.len());
    let bad: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|((_, w), g)| w != *g)
        .map(|((n, w), g)| format!("{n}: crate {w:#x}, header {g:#x}"))
        .collect();
    assert!(bad.is_empty(), "uapi differs from {}:\n{}", header.display(), bad.join("\n"));
}
