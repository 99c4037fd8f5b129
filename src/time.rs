//! Clock formats used in names, logs and JSON. All lavender times are UTC so runs
//! sort and compare the same on every machine and across daylight-saving changes.

use chrono::{DateTime, SecondsFormat, Utc};

pub fn now_utc() -> DateTime<Utc> {
    Utc::now()
}

/// RFC 3339 with a `Z` suffix and millisecond precision, as the status contract wants.
pub fn rfc3339_z(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A span as people say it, in its two largest units: `45s`, `6m 12s`, `3h 12m`,
/// `2d 3h`. The one duration format of pushes, status views and progress lines.
pub fn duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let (days, hours, mins, secs) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match () {
        _ if days > 0 => format!("{days}d {hours}h"),
        _ if hours > 0 => format!("{hours}h {mins}m"),
        _ if mins > 0 => format!("{mins}m {secs}s"),
        _ => format!("{secs}s"),
    }
}

/// `HH:MM:SS`, the clock shown in `train.log` SAVE lines.
pub fn clock(t: DateTime<Utc>) -> String {
    t.format("%H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn formats() {
        let t = Utc.with_ymd_and_hms(2026, 4, 24, 16, 8, 45).unwrap();
        assert_eq!(rfc3339_z(t), "2026-04-24T16:08:45.000Z");
        assert_eq!(clock(t), "16:08:45");
    }

    #[test]
    fn durations_in_their_two_largest_units() {
        let d = std::time::Duration::from_secs;
        assert_eq!(duration(d(0)), "0s");
        assert_eq!(duration(d(45)), "45s");
        assert_eq!(duration(d(372)), "6m 12s");
        assert_eq!(duration(d(3 * 3600 + 12 * 60 + 5)), "3h 12m");
        assert_eq!(duration(d(2 * 86_400 + 3 * 3600 + 59)), "2d 3h");
    }
}
