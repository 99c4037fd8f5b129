//! The Prometheus text exposition format: `# HELP`, `# TYPE`, then samples.

use std::fmt::Write as _;

#[derive(Debug, Clone, Copy)]
pub enum MetricType {
    Gauge,
    Counter,
}

pub struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(String, f64)>,
}

impl Family {
    pub fn new(name: &'static str, help: &'static str, kind: MetricType) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    pub fn sample(mut self, labels: &[(&str, &str)], value: f64) -> Family {
        let labels = if labels.is_empty() {
            String::new()
        } else {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        };
        self.samples.push((labels, value));
        self
    }

    pub fn sample_opt(self, labels: &[(&str, &str)], value: Option<f64>) -> Family {
        match value {
            Some(v) => self.sample(labels, v),
            None => self,
        }
    }

    pub fn write(&self, out: &mut String) {
        let kind = match self.kind {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
        };
        let _ = writeln!(
            out,
            "# HELP {} {}",
            self.name,
            self.help.replace('\\', "\\\\").replace('\n', "\\n")
        );
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
        for (labels, value) in &self.samples {
            let _ = writeln!(out, "{}{labels} {}", self.name, number(*value));
        }
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_with_help_type_labels_and_special_values() {
        let mut out = String::new();
        Family::new("x_total", "Things.\nCounted", MetricType::Counter)
            .sample(&[("channel", "a\"b\\c")], 3.0)
            .write(&mut out);
        Family::new("y", "Y.", MetricType::Gauge)
            .sample(&[], f64::NAN)
            .sample_opt(&[], None)
            .sample(&[("k", "v")], f64::NEG_INFINITY)
            .sample(&[("k", "w")], 1e-5)
            .write(&mut out);
        assert_eq!(
            out,
            "# HELP x_total Things.\\nCounted\n# TYPE x_total counter\nx_total{channel=\"a\\\"b\\\\c\"} 3\n\
             # HELP y Y.\n# TYPE y gauge\ny NaN\ny{k=\"v\"} -Inf\ny{k=\"w\"} 0.00001\n"
        );
    }
}
