//! Scalars and flow lists as YAML 1.1 writes them, for the YAML lavender writes by
//! hand (the run's `config.yaml`, `lavenderd resolve`), which PyYAML reads back.

/// A float as YAML 1.1 (PyYAML, which bergson reads configs with) parses back to
/// the same float: a `.` in the mantissa and a signed exponent (`1.0e-05`, not
/// `1e-5`, which PyYAML takes for a string).
pub fn yaml_float(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            ".nan".into()
        } else if x > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    // Debug is the shortest text that reads back as the same f64.
    let d = format!("{x:?}");
    match d.split_once('e') {
        None => d,
        Some((mantissa, exp)) => {
            let mantissa = if mantissa.contains('.') {
                mantissa.to_string()
            } else {
                format!("{mantissa}.0")
            };
            let exp = if exp.starts_with('-') {
                exp.to_string()
            } else {
                format!("+{exp}")
            };
            format!("{mantissa}e{exp}")
        }
    }
}

/// A string as a YAML scalar: double-quoted JSON, which YAML reads as the same string.
pub(crate) fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

pub(crate) fn yaml_list<T>(items: &[T], f: impl Fn(&T) -> String) -> String {
    let inner: Vec<String> = items.iter().map(f).collect();
    format!("[{}]", inner.join(", "))
}
