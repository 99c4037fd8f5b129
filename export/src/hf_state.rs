//! `trainer_state.json` in Hugging Face's shape, which attribution tools scrape for
//! `global_step` and the per-step `learning_rate` in `log_history`.
//!
//! Only the fields of `transformers.TrainerState` are written: its
//! `load_from_json` passes every key to the constructor, so one unknown key would
//! make the file unreadable there. lavender's own state goes to `lavender_export.json`.

use serde_json::{Map, Value, json};

/// What the Hugging Face state is built from.
pub struct HfState<'a> {
    pub global_step: u64,
    pub epoch: f64,
    pub max_steps: u64,
    pub num_train_epochs: u64,
    pub train_batch_size: u64,
    pub eval_steps: u64,
    pub save_steps: u64,
    pub best_metric: Option<f64>,
    pub log_history: &'a [Map<String, Value>],
}

impl HfState<'_> {
    /// The JSON object, keys sorted at every level (Hugging Face writes
    /// `sort_keys=True`).
    pub fn to_json(&self) -> Value {
        let v = json!({
            "best_metric": self.best_metric,
            "best_model_checkpoint": null,
            "epoch": self.epoch,
            "eval_steps": self.eval_steps,
            "global_step": self.global_step,
            "is_hyper_param_search": false,
            "is_local_process_zero": true,
            "is_world_process_zero": true,
            // Every step is logged: the history is dense.
            "logging_steps": 1,
            "log_history": self.log_history,
            "max_steps": self.max_steps,
            "num_input_tokens_seen": 0,
            "num_train_epochs": self.num_train_epochs,
            "save_steps": self.save_steps,
            "stateful_callbacks": {},
            "total_flos": 0,
            "train_batch_size": self.train_batch_size,
            "trial_name": null,
            "trial_params": null,
        });
        sorted(v)
    }
}

/// `v` with the keys of every object in sorted order, whatever map type serde_json
/// was built with.
pub fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_at_every_level() {
        let entry: Map<String, Value> =
            serde_json::from_str(r#"{"step": 1, "loss": 2.0, "learning_rate": 0.1, "epoch": 0.0}"#)
                .unwrap();
        let st = HfState {
            global_step: 1,
            epoch: 0.0,
            max_steps: 10,
            num_train_epochs: 1,
            train_batch_size: 4,
            eval_steps: 5,
            save_steps: 5,
            best_metric: None,
            log_history: &[entry],
        };
        let text = serde_json::to_string(&st.to_json()).unwrap();
        let top: Vec<&str> = [
            "best_metric",
            "best_model_checkpoint",
            "epoch",
            "eval_steps",
            "global_step",
        ]
        .to_vec();
        let mut last = 0;
        for k in top {
            let at = text.find(&format!("\"{k}\"")).unwrap();
            assert!(at >= last, "{k} out of order in {text}");
            last = at;
        }
        let inner = text.find("\"epoch\":0.0,\"learning_rate\":0.1,\"loss\":2.0,\"step\":1");
        assert!(inner.is_some(), "{text}");
    }
}
