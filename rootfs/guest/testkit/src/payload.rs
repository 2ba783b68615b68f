//! Self-checking payloads: a header (magic, length, seed), a body generated from the seed,
//! and an FNV-1a checksum at the end. A payload whose bytes were lost, zeroed, moved or
//! mixed with another's fails [`verify`].

use crate::rng::Rng;

const MAGIC: u32 = 0x3150_4c42; // "BLP1"
/// Header (magic u32, len u32, seed u64) plus trailing checksum u64.
pub const OVERHEAD: usize = 24;

pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The body bytes for `seed` (also used alone for payloads below [`OVERHEAD`]).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    Rng::new(seed).bytes(len)
}

/// A payload of exactly `len` bytes. Below [`OVERHEAD`] bytes it is just the pattern
/// (check it with [`pattern`]).
pub fn make(seed: u64, len: usize) -> Vec<u8> {
    if len < OVERHEAD {
        return pattern(seed, len);
    }
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&MAGIC.to_ne_bytes());
    v.extend_from_slice(&(len as u32).to_ne_bytes());
    v.extend_from_slice(&seed.to_ne_bytes());
    v.extend_from_slice(&pattern(seed, len - OVERHEAD));
    let sum = fnv1a(&v);
    v.extend_from_slice(&sum.to_ne_bytes());
    v
}

/// Checks a payload made by [`make`]; returns its seed.
pub fn verify(b: &[u8]) -> Result<u64, String> {
    if b.len() < OVERHEAD {
        return Err(format!("payload of {} bytes is shorter than its header", b.len()));
    }
    let magic = u32::from_ne_bytes(b[0..4].try_into().unwrap());
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}"));
    }
    let len = u32::from_ne_bytes(b[4..8].try_into().unwrap()) as usize;
    if len != b.len() {
        return Err(format!("length field {len} but {} bytes arrived", b.len()));
    }
    let seed = u64::from_ne_bytes(b[8..16].try_into().unwrap());
    let (body, sum) = b.split_at(b.len() - 8);
    let want = u64::from_ne_bytes(sum.try_into().unwrap());
    if fnv1a(body) != want {
        let expect = make(seed, len);
        let first_bad = expect.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!("checksum mismatch (first differing byte at offset {first_bad} of {len})"));
    }
    if body[16..] != pattern(seed, len - OVERHEAD)[..] {
        return Err("body does not match its seed".into());
    }
    Ok(seed)
}

/// Checks a payload of any length against `make(seed, len)`.
pub fn check(seed: u64, b: &[u8]) -> Result<(), String> {
    if b.len() >= OVERHEAD {
        let s = verify(b)?;
        if s != seed {
            return Err(format!("payload carries seed {s:#x}, expected {seed:#x}"));
        }
        Ok(())
    } else if b == pattern(seed, b.len()) {
        Ok(())
    } else {
        Err(format!("{}-byte payload does not match its pattern", b.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn make_verify_and_detect_damage() {
        for len in [0, 1, 23, 24, 25, 4095, 4096, 4097, 65536] {
            let p = make(len as u64 * 31, len);
            assert_eq!(p.len(), len);
            check(len as u64 * 31, &p).unwrap();
        }
        let mut p = make(9, 10_000);
        assert_eq!(verify(&p), Ok(9));
        // A zeroed page (what a wrongly reclaimed page would look like) is caught.
        for b in &mut p[4096..8192] {
            *b = 0;
        }
        assert!(verify(&p).unwrap_err().contains("checksum"));
        assert!(verify(&make(9, 100)[..99]).is_err());
        assert!(check(10, &make(9, 100)).is_err());
        assert!(check(10, &make(9, 5)).is_err());
    }
}
