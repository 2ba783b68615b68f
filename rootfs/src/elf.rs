//! Just enough ELF parsing to catch a wrong binary before it boots: 64-bit,
//! little-endian, aarch64, and no program interpreter (statically linked).

use anyhow::{bail, Context, Result};
use std::path::Path;

const EM_AARCH64: u16 = 183;
const PT_INTERP: u32 = 3;

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// Checks an in-memory ELF image; `what` names it in errors.
pub fn check_static_aarch64_bytes(b: &[u8], what: &str) -> Result<()> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        bail!("{what} is not an ELF file");
    }
    if b[4] != 2 || b[5] != 1 {
        bail!("{what} is not a 64-bit little-endian ELF");
    }
    let machine = u16_at(b, 18).unwrap_or(0);
    if machine != EM_AARCH64 {
        bail!("{what} is for ELF machine {machine}, not aarch64 ({EM_AARCH64})");
    }
    let phoff = u64_at(b, 32).unwrap_or(0) as usize;
    let phentsize = u16_at(b, 54).unwrap_or(0) as usize;
    let phnum = u16_at(b, 56).unwrap_or(0) as usize;
    for i in 0..phnum {
        let off = phoff + i * phentsize;
        match u32_at(b, off) {
            Some(PT_INTERP) => {
                bail!("{what} is dynamically linked (has PT_INTERP); the guest has no libc")
            }
            Some(_) => {}
            None => bail!("{what}: program header {i} is outside the file"),
        }
    }
    Ok(())
}

pub fn check_static_aarch64(path: &Path) -> Result<()> {
    let b = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    check_static_aarch64_bytes(&b, &path.display().to_string())
}

/// A minimal header that passes the check (tests only).
#[cfg(test)]
pub fn fake_static_aarch64() -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[18..20].copy_from_slice(&EM_AARCH64.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_static_and_rejects_others() {
        let ok = fake_static_aarch64();
        check_static_aarch64_bytes(&ok, "x").unwrap();

        let mut x86 = ok.clone();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(check_static_aarch64_bytes(&x86, "x").unwrap_err().to_string().contains("not aarch64"));

        // One PT_INTERP program header right after the ELF header.
        let mut dynamic = ok.clone();
        dynamic[32..40].copy_from_slice(&64u64.to_le_bytes());
        dynamic[54..56].copy_from_slice(&56u16.to_le_bytes());
        dynamic[56..58].copy_from_slice(&1u16.to_le_bytes());
        dynamic.extend_from_slice(&[0; 56]);
        dynamic[64..68].copy_from_slice(&PT_INTERP.to_le_bytes());
        assert!(check_static_aarch64_bytes(&dynamic, "x").unwrap_err().to_string().contains("dynamically"));

        assert!(check_static_aarch64_bytes(b"#!/bin/sh\n", "x").is_err());
    }
}
