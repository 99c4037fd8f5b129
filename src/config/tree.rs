//! The layered config as a YAML tree whose every key and value remembers where it came
//! from, so that errors found after merging (wrong type, out of range) still point at
//! the file line, environment variable or override that set the value.

use std::fmt;
use std::sync::Arc;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::error::{ConfigError, ConfigErrorKind, Origin};

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub value: Value,
    pub origin: Origin,
}

#[derive(Debug, Clone)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    pub key_origin: Origin,
    pub value: Node,
}

impl Node {
    /// How the value reads in an error message: `"sixteen"`, `7`, `a mapping`.
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Null => "null".into(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::UInt(u) => u.to_string(),
            Value::Float(f) => format!("{f:?}"),
            Value::Str(s) => format!("{s:?}"),
            Value::Seq(_) => "a list".into(),
            Value::Map(_) => "a mapping".into(),
        }
    }
}

/// Parses a YAML document; `name` is how errors refer to it (usually the file path).
/// An empty document is an empty mapping.
pub(crate) fn parse_document(text: &str, name: &str) -> Result<Node, ConfigError> {
    let name: Arc<str> = Arc::from(name);
    let at = |line: u32, column: u32| Origin::File {
        name: name.clone(),
        line,
        column,
    };
    let node = parse_with(text, &at).map_err(|e| syntax_error(&e, &at))?;
    Ok(node.unwrap_or(Node {
        value: Value::Map(Vec::new()),
        origin: at(1, 1),
    }))
}

/// Parses the value of an environment variable or override as YAML (so `8` is an
/// integer and `[10, 30]` a list); every node's origin is `origin`.
pub(crate) fn parse_value(text: &str, origin: &Origin) -> Result<Node, ConfigError> {
    let node = parse_with(text, &|_, _| origin.clone()).map_err(|e| {
        ConfigError::new(ConfigErrorKind::Syntax {
            message: plain_message(&e),
        })
        .at(Some(origin.clone()))
    })?;
    Ok(node.unwrap_or(Node {
        value: Value::Null,
        origin: origin.clone(),
    }))
}

fn syntax_error(e: &serde_saphyr::Error, at: &dyn Fn(u32, u32) -> Origin) -> ConfigError {
    let origin = e
        .location()
        .filter(|loc| loc.line() > 0)
        .map(|loc| at(clamp(loc.line()), clamp(loc.column())));
    ConfigError::new(ConfigErrorKind::Syntax {
        message: plain_message(e),
    })
    .at(origin)
}

/// The parser's message without its snippet and `line N column M:` prefix (we print
/// the location ourselves, in `file:line:col` form).
fn plain_message(e: &serde_saphyr::Error) -> String {
    let text = e.without_snippet().to_string();
    let mut msg = text.lines().next().unwrap_or_default().trim();
    msg = msg.strip_prefix("error:").unwrap_or(msg).trim_start();
    if let Some(rest) = msg.strip_prefix("line ")
        && let Some((_, after)) = rest.split_once(": ")
        && rest
            .split_once(": ")
            .is_some_and(|(pos, _)| pos.contains("column"))
    {
        msg = after;
    }
    // The position is printed in front already.
    if let Some(i) = msg.rfind(" at line ") {
        msg = &msg[..i];
    }
    match msg.split_once(", set DuplicateKeyPolicy") {
        Some((head, _)) => format!("{head}; remove one of the two"),
        None => msg.to_string(),
    }
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn parse_with(
    text: &str,
    origin_of: &dyn Fn(u32, u32) -> Origin,
) -> Result<Option<Node>, serde_saphyr::Error> {
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Ok(None);
    }
    let raw: Spanned<Raw> = serde_saphyr::from_str(text)?;
    Ok(Some(convert(raw, origin_of)))
}

fn convert(raw: Spanned<Raw>, origin_of: &dyn Fn(u32, u32) -> Origin) -> Node {
    let origin = origin_of(clamp(raw.referenced.line()), clamp(raw.referenced.column()));
    let value = match raw.value {
        Raw::Null => Value::Null,
        Raw::Bool(b) => Value::Bool(b),
        Raw::Int(i) => Value::Int(i),
        Raw::UInt(u) => Value::UInt(u),
        Raw::Float(f) => Value::Float(f),
        Raw::Str(s) => Value::Str(s),
        Raw::Seq(items) => Value::Seq(items.into_iter().map(|i| convert(i, origin_of)).collect()),
        Raw::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| Entry {
                    key_origin: origin_of(clamp(k.referenced.line()), clamp(k.referenced.column())),
                    key: k.value,
                    value: convert(v, origin_of),
                })
                .collect(),
        ),
    };
    Node { value, origin }
}

/// What serde-saphyr hands us: the YAML tree with a location on every node and key.
enum Raw {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<String>, Spanned<Raw>)>),
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = Raw;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_none<E>(self) -> Result<Raw, E> {
                Ok(Raw::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
                Raw::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
                Ok(Raw::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
                Ok(Raw::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
                Ok(Raw::UInt(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
                Ok(Raw::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
                Ok(Raw::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Raw, E> {
                Ok(Raw::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Raw, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(Raw::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Raw, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = a.next_key()? {
                    entries.push((key, a.next_value()?));
                }
                Ok(Raw::Map(entries))
            }
        }
        d.deserialize_any(RawVisitor)
    }
}

/// Lays `overlay` over `base`: mappings merge key by key, anything else replaces.
pub(crate) fn merge(base: &mut Node, overlay: Node) {
    match (&mut base.value, overlay.value) {
        (Value::Map(base_entries), Value::Map(entries)) => {
            for entry in entries {
                match base_entries.iter_mut().find(|e| e.key == entry.key) {
                    Some(existing) => {
                        existing.key_origin = entry.key_origin;
                        merge(&mut existing.value, entry.value);
                    }
                    None => base_entries.push(entry),
                }
            }
        }
        (_, value) => {
            base.value = value;
            base.origin = overlay.origin;
        }
    }
}

/// One step of a key path: `training`, `stages`, `[1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// Parses `training.stages[1].lr` (also `training.stages.1.lr`) into segments.
pub(crate) fn parse_key_path(path: &str) -> Option<Vec<Segment>> {
    let mut segments = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if key.is_empty() && rest.is_empty() {
            return None;
        }
        if !key.is_empty() {
            segments.push(Segment::Key(key.to_string()));
        }
        while !rest.is_empty() {
            let close = rest.find(']')?;
            let index = rest.get(1..close)?.parse().ok()?;
            segments.push(Segment::Index(index));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return None;
            }
        }
    }
    Some(segments)
}

pub(crate) fn render_key_path(segments: &[Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Key(k) if out.is_empty() => out.push_str(k),
            Segment::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Sets the value at `path`, creating mappings for missing keys (an unknown key is
/// reported later, when the tree is read into [`super::Config`], with `origin`).
pub(crate) fn set_path(root: &mut Node, path: &[Segment], value: Node) -> Result<(), ConfigError> {
    let origin = value.origin.clone();
    let bad = |done: &[Segment], message: String| {
        ConfigError::new(ConfigErrorKind::BadKeyPath {
            path: render_key_path(done),
            message,
        })
        .at(Some(origin.clone()))
    };
    let mut node = root;
    for (i, segment) in path.iter().enumerate() {
        let done = &path[..=i];
        if matches!(node.value, Value::Null) {
            node.value = Value::Map(Vec::new());
        }
        node = match (&mut node.value, segment) {
            (Value::Map(entries), Segment::Key(key)) => {
                let pos = match entries.iter().position(|e| &e.key == key) {
                    Some(pos) => pos,
                    None => {
                        entries.push(Entry {
                            key: key.clone(),
                            key_origin: origin.clone(),
                            value: Node {
                                value: Value::Null,
                                origin: origin.clone(),
                            },
                        });
                        entries.len() - 1
                    }
                };
                &mut entries[pos].value
            }
            (Value::Seq(items), Segment::Index(index)) => {
                let len = items.len();
                items.get_mut(*index).ok_or_else(|| {
                    bad(done, format!("the list has {len} items (indexes 0..{len})"))
                })?
            }
            (Value::Seq(items), Segment::Key(key)) if key.parse::<usize>().is_ok() => {
                let len = items.len();
                let index: usize = key.parse().unwrap_or(usize::MAX);
                items.get_mut(index).ok_or_else(|| {
                    bad(done, format!("the list has {len} items (indexes 0..{len})"))
                })?
            }
            (Value::Seq(_), Segment::Key(_)) => {
                return Err(bad(
                    done,
                    "the parent is a list; use an index like `[0]`".into(),
                ));
            }
            (Value::Map(_), Segment::Index(_)) => {
                return Err(bad(done, "the parent is a mapping, not a list".into()));
            }
            _ => {
                return Err(bad(
                    done,
                    format!(
                        "`{}` is a single value, not a section",
                        render_key_path(&path[..i])
                    ),
                ));
            }
        };
    }
    merge(node, value);
    Ok(())
}

/// Where the value at a rendered key path came from (the nearest existing ancestor if
/// the path does not exist).
pub(crate) fn locate(root: &Node, path: &str) -> Option<Origin> {
    let segments = parse_key_path(path)?;
    let mut node = root;
    for segment in &segments {
        let next = match (&node.value, segment) {
            (Value::Map(entries), Segment::Key(key)) => {
                entries.iter().find(|e| &e.key == key).map(|e| &e.value)
            }
            (Value::Seq(items), Segment::Index(i)) => items.get(*i),
            _ => None,
        };
        match next {
            Some(next) => node = next,
            None => break,
        }
    }
    Some(node.origin.clone())
}
