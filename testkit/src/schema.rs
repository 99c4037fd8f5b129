//! The status contract (`tests/fixtures/status.schema.json`, a copy of
//! `shared/schemas/status.schema.json`) as a validator.

use std::path::PathBuf;

use serde_json::Value;

use crate::repo;

/// `tests/fixtures/status.schema.json`.
pub fn schema_path() -> PathBuf {
    repo().join("tests/fixtures/status.schema.json")
}

/// The validator, compiled once per test binary.
pub fn schema() -> &'static jsonschema::Validator {
    static V: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let path = schema_path();
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read the status schema {}: {e}", path.display()));
        let schema: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("{} does not compile: {e}", path.display()))
    })
}

/// Panics, listing every violation, when `status` does not match the schema.
pub fn assert_valid(status: &Value) {
    let errors: Vec<String> = schema()
        .iter_errors(status)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "status violates the schema: {errors:?}\n{status:#}"
    );
}
