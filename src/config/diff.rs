//! Which keys differ between two configs, as dotted key paths (`data.filter.min_chars`,
//! `data.sources[1].path`): what `lavenderd start` and a reload say changed.

use serde_json::Value;

use super::Config;

/// The leaf keys whose values differ between `before` and `after`, in key order. A list
/// of a different length is one key (`data.sources`); lists of the same length are
/// compared item by item. Secrets, which are never serialized, are not compared.
pub fn changed_keys(before: &Config, after: &Config) -> Vec<String> {
    let a = serde_json::to_value(before).unwrap_or(Value::Null);
    let b = serde_json::to_value(after).unwrap_or(Value::Null);
    let mut out = Vec::new();
    walk(&a, &b, String::new(), &mut out);
    out
}

fn walk(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    child,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(p, q, format!("{path}[{i}]"), out);
            }
        }
        _ => out.push(if path.is_empty() {
            "(top level)".into()
        } else {
            path
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_changed_leaf_is_named_once() {
        let a = Config::default();
        assert!(changed_keys(&a, &a).is_empty());
        let mut b = a.clone();
        b.data.filter.min_chars += 1;
        b.training.stages[1].lr *= 2.0;
        b.worker.command.push("--x".into());
        assert_eq!(
            changed_keys(&a, &b),
            [
                "data.filter.min_chars",
                "training.stages[1].lr",
                "worker.command"
            ]
        );
    }
}
