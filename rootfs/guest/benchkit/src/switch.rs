//! A driver switch in debugfs that a benchmark sets for its run ("0" or "1").

/// One switch: its file, the option that sets it, and why a kernel without it cannot.
pub struct Switch {
    pub file: &'static str,
    pub option: &'static str,
    pub missing: &'static str,
}

impl Switch {
    /// Checks a value: 0 or 1.
    pub fn check(&self, v: u32) -> Result<u32, String> {
        match v {
            0 | 1 => Ok(v),
            _ => Err(format!("--{} takes 0 or 1, not {v}", self.option)),
        }
    }

    /// Sets the switch and returns the value it reads back; an error when the file is absent.
    pub fn set(&self, v: u32) -> Result<u32, String> {
        if !crate::write_switch(self.file, self.check(v)?)? {
            return Err(self.missing.into());
        }
        self.current().ok_or_else(|| format!("{}: unreadable after writing {v}", self.file))
    }

    /// The switch's value, None when the file is absent or unreadable.
    pub fn current(&self) -> Option<u32> {
        crate::read_switch(self.file)
    }
}

/// Puts a switch back to the value it had when dropped, so that the next step of a plan
/// finds the kernel as the boot left it.
pub struct Restore {
    file: &'static str,
    value: u32,
}

impl Restore {
    /// Sets `s` to `v` and returns the value read back with a guard for the previous one.
    pub fn set(s: &Switch, v: u32) -> Result<(u32, Restore), String> {
        let before = s.current().ok_or_else(|| s.missing.to_string())?;
        let now = s.set(v)?;
        Ok((now, Restore { file: s.file, value: before }))
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = crate::write_switch(self.file, self.value) {
            eprintln!("could not restore {} to {}: {e}", self.file, self.value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Switch = Switch { file: "/nonexistent/lab-switch", option: "some-switch", missing: "no such switch" };

    #[test]
    fn values_and_a_missing_file() {
        assert_eq!(S.check(0), Ok(0));
        assert_eq!(S.check(1), Ok(1));
        assert_eq!(S.check(2).unwrap_err(), "--some-switch takes 0 or 1, not 2");
        assert_eq!(S.current(), None);
        assert_eq!(S.set(1).unwrap_err(), "no such switch");
        assert_eq!(Restore::set(&S, 1).err().as_deref(), Some("no such switch"));
    }

    #[test]
    fn restores_the_value_it_found() {
        let path = std::env::temp_dir().join(format!("benchkit-switch-{}", std::process::id()));
        let f: &'static str = Box::leak(path.display().to_string().into_boxed_str());
        std::fs::write(f, "0\n").unwrap();
        let s = Switch { file: f, option: "sw", missing: "absent" };
        {
            let (now, _guard) = Restore::set(&s, 1).unwrap();
            assert_eq!((now, s.current()), (1, Some(1)));
        }
        assert_eq!(s.current(), Some(0));
        std::fs::remove_file(f).unwrap();
    }
}
