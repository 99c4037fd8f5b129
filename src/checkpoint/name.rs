//! `<stage>-<HH-MM-SS>-<NNNN>`: the stage, the save clock (UTC) and a counter that is
//! monotonic within a run, so names sort and never collide within a second.

use std::fmt;
use std::str::FromStr;

use chrono::{NaiveTime, Timelike};

use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckpointName {
    pub stage: String,
    pub time: NaiveTime,
    pub counter: u32,
}

const EXPECTED: &str = "<stage>-<HH-MM-SS>-<NNNN>, stage of [a-z0-9_]";

/// Stage names are `[a-z0-9_]+`, so a `-` always separates fields.
pub fn valid_stage_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl CheckpointName {
    pub fn new(stage: &str, time: NaiveTime, counter: u32) -> Result<Self, Error> {
        if !valid_stage_name(stage) {
            return Err(Error::BadName {
                kind: "stage",
                name: stage.to_string(),
                expected: "[a-z0-9_]+",
            });
        }
        let time = time.with_nanosecond(0).unwrap_or(time);
        Ok(CheckpointName {
            stage: stage.to_string(),
            time,
            counter,
        })
    }
}

impl fmt::Display for CheckpointName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{}-{:04}",
            self.stage,
            self.time.format("%H-%M-%S"),
            self.counter
        )
    }
}

impl FromStr for CheckpointName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::BadName {
            kind: "checkpoint",
            name: s.to_string(),
            expected: EXPECTED,
        };
        let parts: Vec<&str> = s.split('-').collect();
        let [stage, h, m, sec, counter] = parts[..] else {
            return Err(bad());
        };
        let two_digits = |p: &str| p.len() == 2 && p.bytes().all(|b| b.is_ascii_digit());
        if !valid_stage_name(stage) || ![h, m, sec].iter().all(|p| two_digits(p)) {
            return Err(bad());
        }
        if counter.len() < 4 || !counter.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let time = NaiveTime::from_hms_opt(
            h.parse().map_err(|_| bad())?,
            m.parse().map_err(|_| bad())?,
            sec.parse().map_err(|_| bad())?,
        )
        .ok_or_else(bad)?;
        Ok(CheckpointName {
            stage: stage.to_string(),
            time,
            counter: counter.parse().map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_parse() {
        let t = NaiveTime::from_hms_opt(16, 8, 47).unwrap();
        let n = CheckpointName::new("pretrain", t, 3).unwrap();
        assert_eq!(n.to_string(), "pretrain-16-08-47-0003");
        assert_eq!(
            "pretrain-16-08-47-0003".parse::<CheckpointName>().unwrap(),
            n
        );
        let big: CheckpointName = "final-23-59-59-12345".parse().unwrap();
        assert_eq!(big.counter, 12345);
        assert_eq!(big.to_string(), "final-23-59-59-12345");
        let custom: CheckpointName = "stage_2b-00-00-00-0001".parse().unwrap();
        assert_eq!(custom.stage, "stage_2b");
    }

    #[test]
    fn rejects_other_names() {
        for bad in [
            "pretrain-16-08-47-003",
            "pretrain-16-08-47",
            "Pretrain-16-08-47-0003",
            "pre-train-16-08-47-0003",
            "pretrain-25-08-47-0003",
            "pretrain-16-8-47-0003",
            "step_0001000",
            "checkpoint-100",
            ".tmp-pretrain-16-08-47-0003",
            "",
        ] {
            assert!(bad.parse::<CheckpointName>().is_err(), "{bad}");
        }
        let t = NaiveTime::from_hms_opt(1, 2, 3).unwrap();
        assert!(CheckpointName::new("Pre-train", t, 1).is_err());
    }
}
