//! The status contract (tests/fixtures/status.schema.json) as a validator.

use std::path::Path;

use serde_json::Value;

pub fn schema() -> &'static jsonschema::Validator {
    static V: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        // Both packages that use this (daemon/, worker/) sit beside tests/.
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/status.schema.json");
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        jsonschema::validator_for(&schema).unwrap()
    })
}

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
