//! Reads the merged [`Node`] tree into typed config structs. Each error is caught at
//! the node (or key) that caused it, so it carries that node's origin and key path.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, Expected, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, Visitor,
};

use super::error::{ConfigError, ConfigErrorKind, Origin, nearest};
use super::tree::{Entry, Node, Value};

/// Deserializes `T` from the tree, turning serde's errors into located [`ConfigError`]s.
pub(crate) fn from_tree<T: de::DeserializeOwned>(root: &Node) -> Result<T, ConfigError> {
    T::deserialize(NodeDe {
        node: root,
        path: String::new(),
    })
    .map_err(DeError::into_config_error)
}

#[derive(Debug)]
pub(crate) struct DeError {
    kind: Kind,
    origin: Option<Origin>,
    path: Option<String>,
}

#[derive(Debug)]
enum Kind {
    UnknownField {
        field: String,
        expected: &'static [&'static str],
    },
    UnknownVariant {
        variant: String,
        expected: &'static [&'static str],
    },
    InvalidType {
        found: String,
        expected: String,
    },
    InvalidValue {
        found: String,
        expected: String,
    },
    MissingField(&'static str),
    Custom(String),
}

impl DeError {
    fn locate(mut self, origin: &Origin, path: &str) -> Self {
        if self.origin.is_none() {
            self.origin = Some(origin.clone());
            self.path = Some(path.to_string());
        }
        self
    }

    fn into_config_error(self) -> ConfigError {
        let path = self.path.unwrap_or_default();
        let shown = if path.is_empty() {
            "(top level)".to_string()
        } else {
            path.clone()
        };
        let kind = match self.kind {
            Kind::UnknownField { field, expected } => ConfigErrorKind::UnknownKey {
                suggestion: nearest(&field, expected).map(str::to_string),
                valid: expected.iter().map(|s| s.to_string()).collect(),
                path: if path == field || path.ends_with(&format!(".{field}")) {
                    path
                } else {
                    child_path(&path, &field)
                },
            },
            Kind::UnknownVariant { variant, expected } => ConfigErrorKind::UnknownValue {
                path: shown,
                suggestion: nearest(&variant, expected).map(str::to_string),
                valid: expected.iter().map(|s| s.to_string()).collect(),
                found: variant,
            },
            Kind::InvalidType { found, expected } => ConfigErrorKind::WrongType {
                path: shown,
                expected: humanize_expected(&expected),
                found,
            },
            Kind::InvalidValue { found, expected } => match integer_range(&expected) {
                Some(range) => ConfigErrorKind::OutOfRange {
                    path: shown,
                    value: found,
                    range: range.to_string(),
                },
                None => ConfigErrorKind::WrongType {
                    path: shown,
                    expected: humanize_expected(&expected),
                    found,
                },
            },
            Kind::MissingField(key) => ConfigErrorKind::MissingKey {
                path: shown,
                key: key.to_string(),
            },
            Kind::Custom(message) => ConfigErrorKind::Invalid {
                path: shown,
                message,
            },
        };
        ConfigError::new(kind).at(self.origin)
    }
}

/// serde's names for what it expected ("u32", "struct ModelConfig") in plain words.
fn humanize_expected(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            "an integer".into()
        }
        "f32" | "f64" => "a number".into(),
        "a sequence" => "a list".into(),
        "a map" => "a mapping".into(),
        e if e.starts_with("struct ") => "a mapping".into(),
        e if e.starts_with("an array of length ") => {
            format!("a list of {} items", &e["an array of length ".len()..])
        }
        e => e.into(),
    }
}

fn integer_range(expected: &str) -> Option<&'static str> {
    Some(match expected {
        "u8" => "0..=255",
        "u16" => "0..=65535",
        "u32" => "0..=4294967295",
        "u64" | "usize" => "0..=18446744073709551615",
        "i32" => "-2147483648..=2147483647",
        _ => return None,
    })
}

fn unexpected_text(u: &Unexpected) -> String {
    match u {
        Unexpected::Bool(b) => b.to_string(),
        Unexpected::Unsigned(n) => n.to_string(),
        Unexpected::Signed(n) => n.to_string(),
        Unexpected::Float(f) => format!("{f:?}"),
        Unexpected::Char(c) => format!("{c:?}"),
        Unexpected::Str(s) => format!("{s:?}"),
        Unexpected::Unit | Unexpected::Option => "null".into(),
        Unexpected::Seq => "a list".into(),
        Unexpected::Map => "a mapping".into(),
        other => other.to_string(),
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.kind)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError::from(Kind::Custom(msg.to_string()))
    }
    fn invalid_type(unexp: Unexpected, exp: &dyn Expected) -> Self {
        DeError::from(Kind::InvalidType {
            found: unexpected_text(&unexp),
            expected: exp.to_string(),
        })
    }
    fn invalid_value(unexp: Unexpected, exp: &dyn Expected) -> Self {
        DeError::from(Kind::InvalidValue {
            found: unexpected_text(&unexp),
            expected: exp.to_string(),
        })
    }
    fn invalid_length(len: usize, exp: &dyn Expected) -> Self {
        DeError::from(Kind::InvalidType {
            found: format!("a list of {len} items"),
            expected: exp.to_string(),
        })
    }
    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        DeError::from(Kind::UnknownVariant {
            variant: variant.to_string(),
            expected,
        })
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        DeError::from(Kind::UnknownField {
            field: field.to_string(),
            expected,
        })
    }
    fn missing_field(field: &'static str) -> Self {
        DeError::from(Kind::MissingField(field))
    }
}

impl From<Kind> for DeError {
    fn from(kind: Kind) -> Self {
        DeError {
            kind,
            origin: None,
            path: None,
        }
    }
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

struct NodeDe<'a> {
    node: &'a Node,
    path: String,
}

impl<'a> NodeDe<'a> {
    fn located<T>(&self, result: Result<T, DeError>) -> Result<T, DeError> {
        result.map_err(|e| e.locate(&self.node.origin, &self.path))
    }

    fn unexpected(&self) -> Unexpected<'a> {
        match &self.node.value {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Int(i) => Unexpected::Signed(*i),
            Value::UInt(u) => Unexpected::Unsigned(*u),
            Value::Float(f) => Unexpected::Float(*f),
            Value::Str(s) => Unexpected::Str(s),
            Value::Seq(_) => Unexpected::Seq,
            Value::Map(_) => Unexpected::Map,
        }
    }
}

impl<'de> Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::UInt(u) => visitor.visit_u64(*u),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Str(s) => visitor.visit_str(s),
            Value::Seq(items) => visitor.visit_seq(SeqDe {
                items: items.iter(),
                index: 0,
                path: &self.path,
            }),
            Value::Map(entries) => visitor.visit_map(MapDe {
                entries: entries.iter(),
                value: None,
                path: &self.path,
            }),
        };
        self.located(result)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.value {
            Value::Null => self.located(visitor.visit_none()),
            _ => visitor.visit_some(self),
        }
    }

    // Numbers are accepted where text is expected (`OMP_NUM_THREADS: 4`, a stage named 1).
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let text = match &self.node.value {
            Value::Int(i) => i.to_string(),
            Value::UInt(u) => u.to_string(),
            Value::Float(f) => f.to_string(),
            _ => return self.deserialize_any(visitor),
        };
        self.located(visitor.visit_str(&text))
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if let Value::Seq(items) = &self.node.value
            && items.len() != len
        {
            let expected = format!("a list of {len} items");
            return self.located(Err(de::Error::invalid_length(
                items.len(),
                &expected.as_str(),
            )));
        }
        self.deserialize_any(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = match &self.node.value {
            Value::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => {
                let expected = format!(
                    "one of {}",
                    variants
                        .iter()
                        .map(|v| format!("`{v}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                Err(de::Error::invalid_type(
                    self.unexpected(),
                    &expected.as_str(),
                ))
            }
        };
        self.located(result)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf
        unit unit_struct seq tuple_struct map struct identifier
    }
}

struct SeqDe<'a, 'p> {
    items: std::slice::Iter<'a, Node>,
    index: usize,
    path: &'p str,
}

impl<'de> SeqAccess<'de> for SeqDe<'_, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        let path = format!("{}[{}]", self.path, self.index);
        self.index += 1;
        seed.deserialize(NodeDe {
            node,
            path: path.clone(),
        })
        .map(Some)
        .map_err(|e| e.locate(&node.origin, &path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a, 'p> {
    entries: std::slice::Iter<'a, Entry>,
    value: Option<&'a Entry>,
    path: &'p str,
}

impl<'de> MapAccess<'de> for MapDe<'_, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(entry);
        let path = child_path(self.path, &entry.key);
        seed.deserialize(entry.key.as_str().into_deserializer())
            .map(Some)
            .map_err(|e: DeError| e.locate(&entry.key_origin, &path))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let entry = self
            .value
            .take()
            .ok_or_else(|| <DeError as de::Error>::custom("value requested before key"))?;
        let path = child_path(self.path, &entry.key);
        // Errors raised after the value was read (`deserialize_with` checks) still
        // belong to this value.
        seed.deserialize(NodeDe {
            node: &entry.value,
            path: path.clone(),
        })
        .map_err(|e| e.locate(&entry.value.origin, &path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}
