//! The library's error type: what the driver or the peer answered instead of success.

use crate::parcel::{self, ObjectError};
use crate::protocol::DecodeError;
use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    /// BR_DEAD_REPLY: the target is gone (or no context manager yet for handle 0).
    DeadReply,
    /// BR_FAILED_REPLY: the driver rejected the transaction.
    FailedReply,
    /// BR_FROZEN_REPLY: the target process is frozen.
    FrozenReply,
    /// BR_ERROR with its error code.
    Driver(i32),
    /// The peer replied with TF_STATUS_CODE and this status.
    Status(i32),
    Decode(DecodeError),
    Object(ObjectError),
    Protocol(String),
    /// Nothing arrived within the caller's timeout.
    Timeout,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "binder I/O: {e}"),
            Error::DeadReply => f.write_str("BR_DEAD_REPLY"),
            Error::FailedReply => f.write_str("BR_FAILED_REPLY"),
            Error::FrozenReply => f.write_str("BR_FROZEN_REPLY"),
            Error::Driver(e) => write!(f, "BR_ERROR {e}"),
            Error::Status(s) => write!(f, "status reply {s}"),
            Error::Decode(e) => write!(f, "{e}"),
            Error::Object(e) => write!(f, "{e}"),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
            Error::Timeout => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error::Decode(e)
    }
}

impl From<ObjectError> for Error {
    fn from(e: ObjectError) -> Self {
        Error::Object(e)
    }
}

impl From<parcel::ShortRead> for Error {
    fn from(e: parcel::ShortRead) -> Self {
        Error::Protocol(e.to_string())
    }
}

impl Error {
    /// The errno of an I/O error (ioctl failure), if that is what this is.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
