//! Kconfig fragments: parse, merge (later fragments win, like merge_config.sh), and check
//! the resulting .config, because kconfig silently drops symbols whose dependencies fail.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Symbol -> value as written in a fragment (`y`, `n`, `8`, `"str"`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fragment {
    pub values: BTreeMap<String, String>,
    /// Which file set each symbol last, for error messages.
    pub origin: BTreeMap<String, String>,
}

impl Fragment {
    pub fn parse(text: &str, origin: &str) -> Result<Fragment> {
        let mut f = Fragment::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# CONFIG_") {
                if let Some(sym) = rest.strip_suffix(" is not set") {
                    f.set(&format!("CONFIG_{sym}"), "n", origin);
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                bail!("{origin}:{}: expected CONFIG_FOO=value, got {raw:?}", i + 1);
            };
            if !k.starts_with("CONFIG_") || k.contains(char::is_whitespace) || v.is_empty() {
                bail!("{origin}:{}: expected CONFIG_FOO=value, got {raw:?}", i + 1);
            }
            f.set(k, v, origin);
        }
        Ok(f)
    }

    fn set(&mut self, k: &str, v: &str, origin: &str) {
        self.values.insert(k.to_string(), v.to_string());
        self.origin.insert(k.to_string(), origin.to_string());
    }

    /// Later fragments override earlier ones.
    pub fn merge(parts: &[Fragment]) -> Fragment {
        let mut out = Fragment::default();
        for p in parts {
            for (k, v) in &p.values {
                out.set(k, v, &p.origin[k]);
            }
        }
        out
    }

    pub fn load(path: &Path) -> Result<Fragment> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Fragment::parse(&text, &format!("kernel-config/{name}"))
    }

    /// The merged fragment as a KCONFIG_ALLCONFIG file.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.values {
            if v == "n" {
                s.push_str(&format!("# {k} is not set\n"));
            } else {
                s.push_str(&format!("{k}={v}\n"));
            }
        }
        s
    }

    /// Compares with a generated .config; returns one message per symbol that did not
    /// keep its value.
    pub fn check(&self, dotconfig: &str) -> Vec<String> {
        let got = Fragment::parse(dotconfig, ".config").map(|f| f.values).unwrap_or_default();
        let mut bad = vec![];
        for (k, want) in &self.values {
            let have = got.get(k).map(String::as_str).unwrap_or("n");
            if have != want {
                let shown = if got.contains_key(k) {
                    have.to_string()
                } else {
                    "absent (unmet dependency or no such symbol)".into()
                };
                bad.push(format!("{k}: {} asks for {want}, .config has {shown}", self.origin[k]));
            }
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_merge_override() {
        let a = Fragment::parse("# c\nCONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\nCONFIG_S=\"x\"\n", "a").unwrap();
        let b = Fragment::parse("CONFIG_B=n\nCONFIG_N=8\n", "b").unwrap();
        let m = Fragment::merge(&[a, b]);
        assert_eq!(m.values["CONFIG_B"], "n");
        assert_eq!(m.origin["CONFIG_B"], "b");
        assert_eq!(m.values["CONFIG_C"], "n");
        assert_eq!(
            m.render(),
            "CONFIG_A=y\n# CONFIG_B is not set\n# CONFIG_C is not set\nCONFIG_N=8\nCONFIG_S=\"x\"\n"
        );
    }

    #[test]
    fn rejects_garbage() {
        let e = Fragment::parse("CONFIG_A=y\nRUST=y\n", "kernel-config/x.config").unwrap_err();
        assert!(e.to_string().contains("kernel-config/x.config:2"), "{e}");
    }

    #[test]
    fn check_names_dropped_symbols() {
        let want = Fragment::parse("CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=n\nCONFIG_N=8\n", "base.config").unwrap();
        let dot = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_N=4\n";
        let bad = want.check(dot);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].starts_with("CONFIG_B: base.config asks for y, .config has n"));
        assert!(bad[1].contains("CONFIG_N") && bad[1].contains("has 4"));
        let missing = Fragment::parse("CONFIG_Z=y\n", "f").unwrap().check("");
        assert!(missing[0].contains("absent"));
    }

    #[test]
    fn shipped_fragments_parse() {
        let dir = crate::support::paths::kernel_config_dir();
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "config") {
                Fragment::load(&e.path()).unwrap_or_else(|err| panic!("{}: {err:#}", e.path().display()));
                n += 1;
            }
        }
        // base, perf, debug, cbinder at least.
        assert!(n >= 4, "only {n} fragments in {}", dir.display());
    }
}
