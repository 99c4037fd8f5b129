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

/// An RFC 3339 time read back as UTC; `None` when `s` is not one. The one reader
/// of the times records carry (heartbeats, step heartbeats, events).
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
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

/// Serde for a `DateTime<Utc>` held as [`rfc3339_z`] text, as state files hold it:
/// `#[serde(with = "lavender::time::rfc3339")]`.
pub mod rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339_z(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| D::Error::custom(format!("{text:?} is not an RFC 3339 time: {e}")))
    }
}

/// [`rfc3339`] for an optional time (`null` when absent):
/// `#[serde(default, with = "lavender::time::rfc3339_opt")]`.
pub mod rfc3339_opt {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::rfc3339::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super::rfc3339")] DateTime<Utc>);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
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
    fn a_time_round_trips_through_its_rfc3339_text() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct At {
            #[serde(with = "rfc3339")]
            at: DateTime<Utc>,
        }
        let at = At {
            at: Utc.with_ymd_and_hms(2026, 4, 24, 16, 8, 45).unwrap(),
        };
        let text = serde_json::to_string(&at).unwrap();
        assert_eq!(text, r#"{"at":"2026-04-24T16:08:45.000Z"}"#);
        assert_eq!(serde_json::from_str::<At>(&text).unwrap(), at);
        let err = serde_json::from_str::<At>(r#"{"at":"yesterday"}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"yesterday\" is not an RFC 3339 time"),
            "{err}"
        );
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
