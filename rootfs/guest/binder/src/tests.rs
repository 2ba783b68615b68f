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
