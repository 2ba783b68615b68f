//! Transaction payloads: a byte buffer plus the offsets array that tells the driver where
//! the binder objects (`flat_binder_object`, `binder_fd_object`, `binder_buffer_object`,
//! `binder_fd_array_object`) sit inside it. [`Parcel`] builds one; [`ParcelReader`] and
//! [`Object::decode`] read a received one. Pure byte handling, tested on the host.
//!
//! Objects are written field by field in the 64-bit layout of [`crate::uapi`] (sizes and
//! offsets asserted there and in the tests), never by transmuting structs.

use crate::uapi::*;
use std::fmt;

/// A binder object embedded in a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// `BINDER_TYPE_BINDER` / `BINDER_TYPE_WEAK_BINDER`: a local node (`ptr`, `cookie`).
    Binder { weak: bool, flags: u32, ptr: u64, cookie: u64 },
    /// `BINDER_TYPE_HANDLE` / `BINDER_TYPE_WEAK_HANDLE`: a reference to a remote node.
    Handle { weak: bool, flags: u32, handle: u32, cookie: u64 },
    /// `BINDER_TYPE_FD`: a file descriptor, installed in the receiver.
    Fd { fd: u32, cookie: u64 },
    /// `BINDER_TYPE_PTR`: a scatter-gather buffer (BC_TRANSACTION_SG only).
    Ptr { flags: u32, buffer: u64, length: u64, parent: u64, parent_offset: u64 },
    /// `BINDER_TYPE_FDA`: an array of fds inside a parent `Ptr` buffer.
    Fda { num_fds: u64, parent: u64, parent_offset: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectError {
    /// Fewer bytes than the object header or the object's size.
    Truncated {
        need: usize,
        have: usize,
    },
    UnknownType(u32),
}

impl fmt::Display for ObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectError::Truncated { need, have } => write!(f, "truncated binder object: need {need}, have {have}"),
            ObjectError::UnknownType(t) => write!(f, "unknown binder object type {t:#010x}"),
        }
    }
}

impl std::error::Error for ObjectError {}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Object {
    pub fn binder(ptr: u64, cookie: u64) -> Object {
        Object::Binder { weak: false, flags: 0, ptr, cookie }
    }

    pub fn handle(handle: u32) -> Object {
        Object::Handle { weak: false, flags: 0, handle, cookie: 0 }
    }

    pub fn fd(fd: i32) -> Object {
        Object::Fd { fd: fd as u32, cookie: 0 }
    }

    /// The `hdr.type` value.
    pub fn type_code(&self) -> u32 {
        match *self {
            Object::Binder { weak: false, .. } => BINDER_TYPE_BINDER,
            Object::Binder { weak: true, .. } => BINDER_TYPE_WEAK_BINDER,
            Object::Handle { weak: false, .. } => BINDER_TYPE_HANDLE,
            Object::Handle { weak: true, .. } => BINDER_TYPE_WEAK_HANDLE,
            Object::Fd { .. } => BINDER_TYPE_FD,
            Object::Ptr { .. } => BINDER_TYPE_PTR,
            Object::Fda { .. } => BINDER_TYPE_FDA,
        }
    }

    /// Encoded size in bytes (the C struct's size).
    pub fn size(&self) -> usize {
        Self::size_of_type(self.type_code()).expect("known type")
    }

    /// Size of the struct that carries objects of this type.
    pub fn size_of_type(t: u32) -> Option<usize> {
        match t {
            BINDER_TYPE_BINDER | BINDER_TYPE_WEAK_BINDER | BINDER_TYPE_HANDLE | BINDER_TYPE_WEAK_HANDLE => {
                Some(std::mem::size_of::<flat_binder_object>())
            }
            BINDER_TYPE_FD => Some(std::mem::size_of::<binder_fd_object>()),
            BINDER_TYPE_PTR => Some(std::mem::size_of::<binder_buffer_object>()),
            BINDER_TYPE_FDA => Some(std::mem::size_of::<binder_fd_array_object>()),
            _ => None,
        }
    }

    /// Appends the object's struct bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.type_code().to_ne_bytes());
        match *self {
            // flat_binder_object: hdr, flags, union { binder | handle }, cookie
            Object::Binder { flags, ptr, cookie, .. } => {
                out.extend_from_slice(&flags.to_ne_bytes());
                out.extend_from_slice(&ptr.to_ne_bytes());
                out.extend_from_slice(&cookie.to_ne_bytes());
            }
            Object::Handle { flags, handle, cookie, .. } => {
                out.extend_from_slice(&flags.to_ne_bytes());
                // The union is 8 bytes; the handle is its low (first, little-endian) u32.
                out.extend_from_slice(&(handle as u64).to_ne_bytes());
                out.extend_from_slice(&cookie.to_ne_bytes());
            }
            // binder_fd_object: hdr, pad_flags, union { pad_binder | fd }, cookie
            Object::Fd { fd, cookie } => {
                out.extend_from_slice(&0u32.to_ne_bytes());
                out.extend_from_slice(&(fd as u64).to_ne_bytes());
                out.extend_from_slice(&cookie.to_ne_bytes());
            }
            // binder_buffer_object: hdr, flags, buffer, length, parent, parent_offset
            Object::Ptr { flags, buffer, length, parent, parent_offset } => {
                out.extend_from_slice(&flags.to_ne_bytes());
                for v in [buffer, length, parent, parent_offset] {
                    out.extend_from_slice(&v.to_ne_bytes());
                }
            }
            // binder_fd_array_object: hdr, pad, num_fds, parent, parent_offset
            Object::Fda { num_fds, parent, parent_offset } => {
                out.extend_from_slice(&0u32.to_ne_bytes());
                for v in [num_fds, parent, parent_offset] {
                    out.extend_from_slice(&v.to_ne_bytes());
                }
            }
        }
        debug_assert_eq!(out.len() - start, self.size());
    }

    /// Decodes the object at the start of `b`.
    pub fn decode(b: &[u8]) -> Result<Object, ObjectError> {
        if b.len() < 4 {
            return Err(ObjectError::Truncated { need: 4, have: b.len() });
        }
        let t = u32_at(b, 0);
        let need = Self::size_of_type(t).ok_or(ObjectError::UnknownType(t))?;
        if b.len() < need {
            return Err(ObjectError::Truncated { need, have: b.len() });
        }
        Ok(match t {
            BINDER_TYPE_BINDER | BINDER_TYPE_WEAK_BINDER => Object::Binder {
                weak: t == BINDER_TYPE_WEAK_BINDER,
                flags: u32_at(b, 4),
                ptr: u64_at(b, 8),
                cookie: u64_at(b, 16),
            },
            BINDER_TYPE_HANDLE | BINDER_TYPE_WEAK_HANDLE => Object::Handle {
                weak: t == BINDER_TYPE_WEAK_HANDLE,
                flags: u32_at(b, 4),
                handle: u32_at(b, 8),
                cookie: u64_at(b, 16),
            },
            BINDER_TYPE_FD => Object::Fd { fd: u32_at(b, 8), cookie: u64_at(b, 16) },
            BINDER_TYPE_PTR => Object::Ptr {
                flags: u32_at(b, 4),
                buffer: u64_at(b, 8),
                length: u64_at(b, 16),
                parent: u64_at(b, 24),
                parent_offset: u64_at(b, 32),
            },
            BINDER_TYPE_FDA => {
                Object::Fda { num_fds: u64_at(b, 8), parent: u64_at(b, 16), parent_offset: u64_at(b, 24) }
            }
            _ => unreachable!("size_of_type accepted it"),
        })
    }
}

/// Builds a transaction payload: data bytes and the offsets of the objects in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parcel {
    data: Vec<u8>,
    offsets: Vec<u64>,
}

impl Parcel {
    pub fn new() -> Parcel {
        Parcel::default()
    }

    /// A payload of plain bytes (no objects).
    pub fn from_bytes(b: &[u8]) -> Parcel {
        Parcel { data: b.to_vec(), offsets: Vec::new() }
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Pads with zeros to a multiple of `n`.
    pub fn align(&mut self, n: usize) -> &mut Self {
        while !self.data.len().is_multiple_of(n) {
            self.data.push(0);
        }
        self
    }

    pub fn write_bytes(&mut self, b: &[u8]) -> &mut Self {
        self.data.extend_from_slice(b);
        self
    }

    pub fn write_u32(&mut self, v: u32) -> &mut Self {
        self.write_bytes(&v.to_ne_bytes())
    }

    pub fn write_i32(&mut self, v: i32) -> &mut Self {
        self.write_bytes(&v.to_ne_bytes())
    }

    pub fn write_u64(&mut self, v: u64) -> &mut Self {
        self.write_bytes(&v.to_ne_bytes())
    }

    /// A length-prefixed (u32) byte string, padded to 4 bytes.
    pub fn write_blob(&mut self, b: &[u8]) -> &mut Self {
        self.write_u32(b.len() as u32).write_bytes(b).align(4)
    }

    pub fn write_str(&mut self, s: &str) -> &mut Self {
        self.write_blob(s.as_bytes())
    }

    /// Android's `Parcel::writeString16`: the length in UTF-16 units, the units, a NUL unit,
    /// padding to 4 bytes.
    pub fn write_string16(&mut self, s: &str) -> &mut Self {
        let units: Vec<u16> = s.encode_utf16().collect();
        self.write_i32(units.len() as i32);
        for u in units.iter().chain(std::iter::once(&0)) {
            self.write_bytes(&u.to_ne_bytes());
        }
        self.align(4)
    }

    /// Appends an object (aligning the data to 8 bytes first) and records its offset.
    pub fn write_object(&mut self, obj: Object) -> &mut Self {
        self.align(8);
        self.offsets.push(self.data.len() as u64);
        obj.encode(&mut self.data);
        self
    }

    /// Records an arbitrary offset (for malformed payloads in tests and the fuzzer).
    pub fn push_raw_offset(&mut self, off: u64) -> &mut Self {
        self.offsets.push(off);
        self
    }
}

/// Reads a received payload front to back.
#[derive(Clone, Debug)]
pub struct ParcelReader<'a> {
    data: &'a [u8],
    pos: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShortRead {
    pub at: usize,
    pub need: usize,
}

impl fmt::Display for ShortRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "payload too short: need {} bytes at offset {}", self.need, self.at)
    }
}

impl std::error::Error for ShortRead {}

impl<'a> ParcelReader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        ParcelReader { data, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn read_bytes(&mut self, n: usize) -> Result<&'a [u8], ShortRead> {
        if self.remaining() < n {
            return Err(ShortRead { at: self.pos, need: n });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn align(&mut self, n: usize) {
        self.pos = (self.pos.div_ceil(n) * n).min(self.data.len());
    }

    pub fn read_u32(&mut self) -> Result<u32, ShortRead> {
        Ok(u32::from_ne_bytes(self.read_bytes(4)?.try_into().unwrap()))
    }

    pub fn read_i32(&mut self) -> Result<i32, ShortRead> {
        Ok(self.read_u32()? as i32)
    }

    pub fn read_u64(&mut self) -> Result<u64, ShortRead> {
        Ok(u64::from_ne_bytes(self.read_bytes(8)?.try_into().unwrap()))
    }

    pub fn read_blob(&mut self) -> Result<&'a [u8], ShortRead> {
        let n = self.read_u32()? as usize;
        let b = self.read_bytes(n)?;
        self.align(4);
        Ok(b)
    }

    pub fn read_str(&mut self) -> Result<String, ShortRead> {
        Ok(String::from_utf8_lossy(self.read_blob()?).into_owned())
    }

    /// The object at the (8-aligned) current position.
    pub fn read_object(&mut self) -> Result<Object, ObjectError> {
        self.align(8);
        let obj = Object::decode(&self.data[self.pos..])?;
        self.pos += obj.size();
        Ok(obj)
    }
}

/// Decodes a received offsets array (native-endian u64s).
pub fn decode_offsets(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// The objects of a received payload, at the offsets the driver reported.
pub fn objects_at(data: &[u8], offsets: &[u64]) -> Vec<Result<(u64, Object), ObjectError>> {
    offsets
        .iter()
        .map(|&off| {
            let at = usize::try_from(off).unwrap_or(usize::MAX);
            if at > data.len() {
                return Err(ObjectError::Truncated { need: at, have: data.len() });
            }
            Object::decode(&data[at..]).map(|o| (off, o))
        })
        .collect()
}
