//! JSONL: one JSON object a line, the document in one of its string fields. Lines are
//! read as bytes, so a line that is not UTF-8 is a bad record like any other; blank
//! lines are not records.

use std::cell::Cell;
use std::fmt;
use std::io::BufRead;
use std::rc::Rc;

use anyhow::{Context, Result};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::{Place, Record, RecordFile, compressed, list_names};

pub(super) fn read(
    file: &RecordFile,
    read_bytes: &Rc<Cell<u64>>,
    on_record: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let r = compressed::open(&file.path, file.compression, read_bytes.clone())?;
    let mut r = std::io::BufReader::with_capacity(1 << 20, r);
    let mut line = Vec::new();
    let mut lineno = 0u64;
    loop {
        line.clear();
        let n = r
            .read_until(b'\n', &mut line)
            .with_context(|| format!("could not read {}", file.path.display()))?;
        if n == 0 {
            return Ok(());
        }
        lineno += 1;
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        if body.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let at = Place::Line(lineno);
        match parse(body, &file.key) {
            Ok(text) => on_record(Record::Text(&text))?,
            Err(reason) => on_record(Record::Bad { at, reason })?,
        }
    }
}

/// The string at `key` of the JSON object `line`, or what was wrong with the line.
fn parse(line: &[u8], key: &str) -> Result<String, String> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let found = (FieldOf { key })
        .deserialize(&mut de)
        .and_then(|found| de.end().map(|()| found))
        .map_err(|e| {
            // A line is one line: its column is the whole position.
            let e = e.to_string().replace(" at line 1 column ", " at column ");
            let e = match e.rsplit_once(" at column ") {
                Some((what, _)) if what.starts_with(NOT_OBJECT) => what.to_string(),
                _ => e,
            };
            match e.strip_prefix(NOT_OBJECT) {
                Some(what) => format!("{what}; expected a JSON object"),
                None => format!("not a JSON object: {e}"),
            }
        })?;
    match found {
        Found::Text(text) => Ok(text),
        Found::Other(what) => Err(format!("field {key:?} is {what}; expected a string")),
        Found::Missing(keys) => Err(format!(
            "no field {key:?} (the object has {}); set the source's `field:` to the one holding the text",
            list_names(keys.iter().map(String::as_str))
        )),
    }
}

const NOT_OBJECT: &str = "not an object: ";

enum Found {
    Text(String),
    /// The field holds something other than a string: what, in words.
    Other(&'static str),
    /// The object has no such field: the keys it has.
    Missing(Vec<String>),
}

/// Reads one field of an object, skipping the others without building them.
struct FieldOf<'k> {
    key: &'k str,
}

impl<'de> DeserializeSeed<'de> for FieldOf<'_> {
    type Value = Found;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let mut found = None;
        let mut keys = Vec::new();
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if found.is_none() && k == self.key {
                found = Some(match map.next_value::<serde_json::Value>()? {
                    serde_json::Value::String(s) => Found::Text(s),
                    serde_json::Value::Null => Found::Other("null"),
                    serde_json::Value::Bool(_) => Found::Other("a boolean"),
                    serde_json::Value::Number(_) => Found::Other("a number"),
                    serde_json::Value::Array(_) => Found::Other("an array"),
                    serde_json::Value::Object(_) => Found::Other("an object"),
                });
            } else {
                map.next_value::<IgnoredAny>()?;
                if keys.len() < 21 {
                    keys.push(k.into_owned());
                }
            }
        }
        Ok(found.unwrap_or(Found::Missing(keys)))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Found, A::Error> {
        Err(de::Error::custom(format!("{NOT_OBJECT}an array")))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Found, E> {
        Err(de::Error::custom(format!("{NOT_OBJECT}a string")))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Found, E> {
        Err(de::Error::custom(format!("{NOT_OBJECT}a number")))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Found, E> {
        Err(de::Error::custom(format!("{NOT_OBJECT}a number")))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Found, E> {
        Err(de::Error::custom(format!("{NOT_OBJECT}a number")))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Found, E> {
        Err(de::Error::custom(format!("{NOT_OBJECT}a boolean")))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Found, E> {
        Err(de::Error::custom(format!("{NOT_OBJECT}null")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_gives_its_field_or_says_what_was_wrong() {
        assert_eq!(
            parse(br#"{"id": 1, "text": "a\nb"}"#, "text").unwrap(),
            "a\nb"
        );
        assert_eq!(
            parse(br#"{"meta": {"text": 1}, "body": "x"}"#, "body").unwrap(),
            "x"
        );
        let e = parse(br#"{"id": 1, "content": "x"}"#, "text").unwrap_err();
        assert!(
            e.contains(r#"no field "text" (the object has id, content)"#),
            "{e}"
        );
        let e = parse(br#"{"text": null}"#, "text").unwrap_err();
        assert_eq!(e, r#"field "text" is null; expected a string"#);
        let e = parse(br#"{"text": ["a"]}"#, "text").unwrap_err();
        assert!(e.contains("is an array; expected a string"), "{e}");
        let e = parse(br#"["text"]"#, "text").unwrap_err();
        assert!(e.starts_with("an array; expected a JSON object"), "{e}");
        let e = parse(br#"{"text": "cut"#, "text").unwrap_err();
        assert!(e.starts_with("not a JSON object: EOF while parsing"), "{e}");
        let e = parse(b"{\"text\": \"\xff\"}", "text").unwrap_err();
        assert!(e.contains("not a JSON object"), "{e}");
        let e = parse(br#"{"text": "a"} trailing"#, "text").unwrap_err();
        assert!(e.contains("trailing characters"), "{e}");
    }
}
