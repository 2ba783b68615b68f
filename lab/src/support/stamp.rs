//! Wall-clock time stamps for run directories, manifests and reports.

/// UTC time as `20261130T041308Z`, for run directory names and manifests.
pub fn utc_stamp() -> String {
    jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// UTC time as RFC 3339 (`2026-11-30T04:13:08Z`), for reports other tools read.
pub fn rfc3339_now() -> String {
    jiff::Timestamp::now().round(jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_stamp_shape() {
        let s = super::utc_stamp();
        assert_eq!(s.len(), 16, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'));
        let r = super::rfc3339_now();
        assert!(r.parse::<jiff::Timestamp>().is_ok() && r.ends_with('Z') && r.len() == 20, "{r}");
    }
}
