//! Milestone texts in the seed's formats (`[lavender] checkpoint saved:
//! pretrain-04-30-11-0002, epoch 2/3, CE 1.234, ETA 3.2h`) and the number
//! formatting alerts share. Tolerant: a field that is missing or of an unexpected
//! type falls back to the event's own `message`.

use lavender::events::{Event, kind};
use serde_json::Value;

use super::message::Notification;

/// `1123456` → `1,123,456`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `1288490188` → `1.2 GiB`; MiB below one GiB.
pub(crate) fn bytes(n: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = n as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

/// A whole count: an integer, an integral float, or a list (its length).
fn count(event: &Event, key: &str) -> Option<u64> {
    match event.field(key)? {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64)
                .map(|f| f as u64)
        }),
        Value::Array(items) => Some(items.len() as u64),
        _ => None,
    }
}

fn float(event: &Event, key: &str) -> Option<f64> {
    event.field(key)?.as_f64().filter(|f| f.is_finite())
}

fn text(event: &Event, key: &str) -> Option<String> {
    match event.field(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The checkpoint's name: `name`, else the last component of `path`.
fn checkpoint_name(event: &Event) -> Option<String> {
    text(event, "name").or_else(|| {
        let path = text(event, "path")?;
        let trimmed = path.trim_end_matches('/');
        Some(trimmed.rsplit('/').next().unwrap_or(trimmed).to_string())
    })
}

/// `2` → `2`, `1.5` → `1.50`.
fn plain(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f:.2}")
    }
}

/// The epoch a save belongs to, counted from 1 as the seed writes it (`epoch 2/3`).
/// The worker reports progress in epochs (`"epoch": 0.287` of `"epochs": 3`, so the
/// first epoch is under way): its ceiling, at least 1 and at most `epochs`. A whole
/// number (the seed's own events: the epoch just finished) stays as it is.
fn epoch_number(epoch: f64, epochs: Option<f64>) -> u64 {
    // A hair above a whole number is float noise in the progress, not a new epoch.
    let n = (epoch - 1e-9).ceil().max(1.0);
    let n = match epochs {
        Some(total) if total >= 1.0 => n.min(total.floor()),
        _ => n,
    };
    n as u64
}

/// `, epoch 2/3, CE 1.234, ETA 3.2h` for the extras the event carries.
fn extras(event: &Event) -> String {
    let mut parts = Vec::new();
    if let Some(epoch) = float(event, "epoch") {
        let epochs = float(event, "epochs");
        let n = epoch_number(epoch, epochs);
        match epochs {
            Some(total) => parts.push(format!("epoch {n}/{}", plain(total))),
            None => parts.push(format!("epoch {n}")),
        }
    }
    for (key, label) in [("ce_loss", "CE"), ("sft_loss", "SFT"), ("dpo_loss", "DPO")] {
        if let Some(loss) = float(event, key) {
            parts.push(format!("{label} {loss:.3}"));
        }
    }
    if let Some(hours) = float(event, "remaining_hours") {
        parts.push(format!("ETA {hours:.1}h"));
    }
    parts.iter().map(|p| format!(", {p}")).collect()
}

fn dataset_built(event: &Event) -> Option<String> {
    let n = thousands(count(event, "count")?);
    let dataset = text(event, "dataset")?;
    Some(match dataset.as_str() {
        "pretrain" => format!("pretrain tokenisation done: {n} chunks"),
        "sft" => format!("SFT tokenisation done: {n} samples"),
        "dpo" => format!("DPO tokenisation done: {n} pairs"),
        other => format!("{other} tokenisation done: {n} examples"),
    })
}

/// The push text of a milestone event, with `prefix` in front; `None` for events
/// that are not pushed (`retention`, which accompanies every save) and for events
/// with neither the expected fields nor a message.
pub fn milestone_text(event: &Event, prefix: &str) -> Option<String> {
    let formatted = match event.kind.as_str() {
        kind::RETENTION => return None,
        kind::RUN_STARTED => Some(match text(event, "device") {
            Some(device) => format!("run started (device={device})"),
            None => "run started".to_string(),
        }),
        kind::DATA_LOADED => count(event, "documents").map(|docs| {
            let docs = thousands(docs);
            match count(event, "sources") {
                Some(sources) => format!("data loaded: {docs} docs from {sources} sources"),
                None => format!("data loaded: {docs} docs"),
            }
        }),
        kind::TOKENIZER_READY => {
            count(event, "vocab_size").map(|v| format!("tokenizer ready ({} vocab)", thousands(v)))
        }
        kind::DATASET_BUILT => dataset_built(event),
        kind::STAGE_STARTED => text(event, "stage").map(|s| format!("{s} stage started")),
        kind::STAGE_FINISHED => {
            text(event, "stage").map(|s| format!("{s} stage finished{}", extras(event)))
        }
        kind::CHECKPOINT_SAVED => {
            checkpoint_name(event).map(|n| format!("checkpoint saved: {n}{}", extras(event)))
        }
        kind::CHECKPOINT_LOADED => {
            checkpoint_name(event).map(|n| format!("checkpoint loaded: {n}"))
        }
        kind::FINAL_SAVED => {
            checkpoint_name(event).map(|n| format!("final checkpoint: {n}{}", extras(event)))
        }
        kind::ERROR if !event.message.trim().is_empty() => {
            Some(format!("error: {}", event.message.trim()))
        }
        _ => None,
    };
    let line = formatted.or_else(|| {
        let message = event.message.trim();
        (!message.is_empty()).then(|| message.to_string())
    })?;
    Some(format!("{prefix}{line}"))
}

/// The push for a milestone event: silent, except a worker-reported `error`,
/// which is an alert.
pub fn milestone(event: &Event, prefix: &str) -> Option<Notification> {
    let text = milestone_text(event, prefix)?;
    Some(if event.kind == kind::ERROR {
        Notification::alert(&event.kind, text, String::new())
    } else {
        Notification::milestone(&event.kind, text)
    })
}

#[cfg(test)]
mod tests {
    use super::super::message::Level;
    use super::*;
    use serde_json::json;

    fn ev(kind: &str, fields: Value) -> Event {
        let mut e = Event::new(kind, format!("{kind} message"));
        if let Value::Object(map) = fields {
            e.fields = map;
        }
        e
    }

    const P: &str = "[lavender] ";

    #[test]
    fn seed_formats() {
        let cases = [
            (
                ev("run_started", json!({"device": "cpu"})),
                "run started (device=cpu)",
            ),
            (
                ev("data_loaded", json!({"documents": 1123456, "sources": 12})),
                "data loaded: 1,123,456 docs from 12 sources",
            ),
            (
                ev("tokenizer_ready", json!({"vocab_size": 2048})),
                "tokenizer ready (2,048 vocab)",
            ),
            (
                ev(
                    "dataset_built",
                    json!({"dataset": "pretrain", "count": 9876543}),
                ),
                "pretrain tokenisation done: 9,876,543 chunks",
            ),
            (
                ev("dataset_built", json!({"dataset": "sft", "count": 1234567})),
                "SFT tokenisation done: 1,234,567 samples",
            ),
            (
                ev("dataset_built", json!({"dataset": "dpo", "count": 12})),
                "DPO tokenisation done: 12 pairs",
            ),
            (
                ev(
                    "checkpoint_saved",
                    json!({"name": "pretrain-04-30-11-0002", "epoch": 2, "epochs": 3,
                           "ce_loss": 1.2341, "remaining_hours": 3.21}),
                ),
                "checkpoint saved: pretrain-04-30-11-0002, epoch 2/3, CE 1.234, ETA 3.2h",
            ),
            (
                ev(
                    "checkpoint_loaded",
                    json!({"name": "pretrain-04-30-11-0002"}),
                ),
                "checkpoint loaded: pretrain-04-30-11-0002",
            ),
            (
                ev("final_saved", json!({"name": "final-05-12-22-0007"})),
                "final checkpoint: final-05-12-22-0007",
            ),
        ];
        for (event, want) in cases {
            assert_eq!(
                milestone_text(&event, P).as_deref(),
                Some(&*format!("{P}{want}"))
            );
        }
    }

    /// `checkpoint_saved` events as the real `lavender-worker` wrote them (a tiny run:
    /// 27 pretrain steps over 37 samples, 3 epochs, a save every 3 steps, recorded
    /// into the fixture): the epoch is fractional progress (`0.324`), the push reads
    /// as the seed writes it (`epoch 1/3`), the same epoch the worker's own message names.
    #[test]
    fn a_real_workers_checkpoint_saved_reads_epoch_n_of_m() {
        let recorded = include_str!("../../tests/fixtures/worker-checkpoint-saved.jsonl");
        let events: Vec<Event> = recorded
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(!events.is_empty());
        for e in &events {
            assert_eq!(e.kind, "checkpoint_saved");
            let epoch = e.field("epoch").and_then(Value::as_f64).unwrap();
            assert!(
                epoch.fract() != 0.0,
                "the worker reports fractional epochs: {epoch}"
            );
            let epochs = e.field("epochs").and_then(Value::as_u64).unwrap();
            let text = milestone_text(e, P).unwrap();
            let name = e.field("name").and_then(Value::as_str).unwrap();
            let want = format!(
                "{P}checkpoint saved: {name}, epoch {}/{epochs}, ",
                (epoch.floor() as u64 + 1).min(epochs)
            );
            assert!(
                text.starts_with(&want),
                "{text:?} should start with {want:?}"
            );
            assert!(!text.contains(&format!("{epoch}")), "no raw epoch: {text}");
            let worker_says = e.message.split(", ").find(|p| p.starts_with("epoch "));
            assert!(
                worker_says.is_some_and(|w| text.contains(&format!(", {w},"))),
                "{text:?} names the epoch as the worker's message does: {:?}",
                e.message
            );
        }
        let first = milestone_text(&events[0], P).unwrap();
        assert!(first.contains(", epoch 1/3, CE "), "{first}");
    }

    #[test]
    fn epoch_numbers() {
        assert_eq!(epoch_number(0.287, Some(3.0)), 1);
        assert_eq!(epoch_number(0.0, Some(3.0)), 1);
        assert_eq!(epoch_number(1.0, Some(3.0)), 1);
        assert_eq!(epoch_number(1.5, Some(3.0)), 2);
        assert_eq!(epoch_number(2.0, Some(3.0)), 2);
        assert_eq!(epoch_number(3.2, Some(3.0)), 3);
        assert_eq!(epoch_number(4.5, None), 5);
    }

    #[test]
    fn only_the_extras_an_event_carries() {
        let e = ev(
            "checkpoint_saved",
            json!({"name": "sft-01-02-03-0004", "sft_loss": 0.5}),
        );
        assert_eq!(
            milestone_text(&e, "").unwrap(),
            "checkpoint saved: sft-01-02-03-0004, SFT 0.500"
        );
        let e = ev(
            "checkpoint_saved",
            json!({"path": "/d/run-1/dpo-01-02-03-0009/", "epoch": 1.5, "dpo_loss": 0.25}),
        );
        assert_eq!(
            milestone_text(&e, "").unwrap(),
            "checkpoint saved: dpo-01-02-03-0009, epoch 2, DPO 0.250"
        );
        let e = ev(
            "checkpoint_saved",
            json!({"name": "x", "remaining_hours": 0.04}),
        );
        assert_eq!(
            milestone_text(&e, "").unwrap(),
            "checkpoint saved: x, ETA 0.0h"
        );
    }

    #[test]
    fn a_shards_short_milestone_is_its_one_line_pushed_silently() {
        let short =
            lavender::config::ShardShortfall::check(lavender::config::Scale::Small, 21, 1).unwrap();
        let e = Event::new(kind::SHARDS_SHORT, short.to_string()).with("shards_wanted", 21);
        let n = milestone(&e, P).unwrap();
        assert_eq!(n.level, Level::Milestone);
        assert_eq!(
            milestone_text(&e, P).unwrap(),
            format!(
                "{P}scale small wants 21 shards but the data fills only 1, so training repeats it; add corpus under data.sources"
            )
        );
    }

    #[test]
    fn tolerant_fallbacks() {
        // Missing or mistyped fields: the event's message.
        let e = ev("data_loaded", json!({"documents": "many"}));
        assert_eq!(
            milestone_text(&e, P).unwrap(),
            "[lavender] data_loaded message"
        );
        let e = ev("checkpoint_saved", json!({}));
        assert_eq!(milestone_text(&e, "").unwrap(), "checkpoint_saved message");
        // Unknown kinds: the message; nothing at all: no push.
        let e = ev("compiled_kernels", json!({"n": 3}));
        assert_eq!(milestone_text(&e, "").unwrap(), "compiled_kernels message");
        let mut e = ev("compiled_kernels", json!({}));
        e.message = "  ".into();
        assert_eq!(milestone_text(&e, ""), None);
        // Partial extras, float counts, lists as counts.
        let e = ev(
            "data_loaded",
            json!({"documents": 1000.0, "sources": ["a", "b"]}),
        );
        assert_eq!(
            milestone_text(&e, "").unwrap(),
            "data loaded: 1,000 docs from 2 sources"
        );
        let e = ev("run_started", json!({}));
        assert_eq!(milestone_text(&e, "").unwrap(), "run started");
        // Retention accompanies every save: not pushed.
        assert_eq!(
            milestone_text(&ev("retention", json!({"dropped": 2})), ""),
            None
        );
    }

    #[test]
    fn levels() {
        let m = milestone(&ev("run_started", json!({"device": "mps"})), P).unwrap();
        assert_eq!(m.level, Level::Milestone);
        assert_eq!(m.kind, "run_started");
        assert_eq!(m.body, "[lavender] run started (device=mps)");
        assert!(m.title.is_empty());
        let mut e = ev("error", json!({}));
        e.message = "loss is NaN at step 120".into();
        let a = milestone(&e, P).unwrap();
        assert_eq!(a.level, Level::Alert);
        assert_eq!(a.title, "[lavender] error: loss is NaN at step 120");
    }

    #[test]
    fn number_helpers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1123456), "1,123,456");
        assert_eq!(bytes(1288490189), "1.2 GiB");
        assert_eq!(bytes(300 * 1024 * 1024), "300 MiB");
    }
}
