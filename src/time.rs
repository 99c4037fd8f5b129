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
}
