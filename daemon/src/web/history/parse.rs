//! Reading history entries into series. Entries use Hugging Face's keys:
//! training steps `{step, epoch, learning_rate, loss, grad_norm, stage}`,
//! evaluations `{step, epoch, eval_loss, stage}`. Unknown keys are ignored,
//! unreadable lines skipped and counted.

use std::borrow::Cow;

use serde::Deserialize;

use lavender_api::{Point, StageMark};

/// Weight of the newest loss in the smoothed curve: the worker's own `loss_smooth`
/// (an exponential moving average with this weight), so curve and heartbeat agree.
pub const SMOOTHING: f64 = 0.1;

#[derive(Deserialize)]
struct Entry<'a> {
    step: Option<f64>,
    loss: Option<f64>,
    learning_rate: Option<f64>,
    grad_norm: Option<f64>,
    eval_loss: Option<f64>,
    #[serde(borrow)]
    stage: Option<Cow<'a, str>>,
}

#[derive(Debug, Clone, Default)]
pub struct Series {
    pub loss: Vec<Point>,
    pub loss_smooth: Vec<Point>,
    pub learning_rate: Vec<Point>,
    pub grad_norm: Vec<Point>,
    pub eval_loss: Vec<Point>,
    pub stages: Vec<StageMark>,
    /// Entries read (lines or array elements).
    pub entries: u64,
    /// Lines that were not a history entry.
    pub skipped: u64,
    smooth: Option<f64>,
}

impl Series {
    fn push(&mut self, e: Entry<'_>) {
        self.entries += 1;
        let Some(step) = e.step.filter(|s| s.is_finite()) else {
            self.skipped += 1;
            return;
        };
        if let Some(stage) = e.stage
            && self.stages.last().is_none_or(|m| m.name != stage)
        {
            self.stages.push(StageMark {
                name: stage.into_owned(),
                step,
            });
        }
        let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
        if let Some(loss) = finite(e.loss) {
            self.loss.push([step, loss]);
            let s = match self.smooth {
                Some(s) => s + SMOOTHING * (loss - s),
                None => loss,
            };
            self.smooth = Some(s);
            self.loss_smooth.push([step, s]);
        }
        if let Some(lr) = finite(e.learning_rate) {
            self.learning_rate.push([step, lr]);
        }
        if let Some(g) = finite(e.grad_norm) {
            self.grad_norm.push([step, g]);
        }
        if let Some(v) = finite(e.eval_loss) {
            self.eval_loss.push([step, v]);
        }
    }

    /// Appends the complete lines of a JSONL chunk; returns the bytes consumed
    /// (through the last newline: a line still being written waits for next time).
    pub fn extend_lines(&mut self, chunk: &[u8]) -> usize {
        let Some(last_newline) = chunk.iter().rposition(|&b| b == b'\n') else {
            return 0;
        };
        for line in chunk[..last_newline].split(|&b| b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Entry>(line) {
                Ok(e) => self.push(e),
                Err(_) => {
                    self.entries += 1;
                    self.skipped += 1;
                }
            }
        }
        last_newline + 1
    }

    /// A whole `log_history.json` array.
    pub fn from_array(bytes: &[u8]) -> Result<Series, serde_json::Error> {
        let entries: Vec<Entry> = serde_json::from_slice(bytes)?;
        let mut series = Series::default();
        for e in entries {
            series.push(e);
        }
        Ok(series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_series_and_a_partial_line_waits() {
        let mut s = Series::default();
        let text = b"{\"step\":1,\"epoch\":0.1,\"learning_rate\":0.001,\"loss\":4.0,\"grad_norm\":1.5,\"stage\":\"pretrain\"}\n\
{\"step\":2,\"learning_rate\":0.002,\"loss\":2.0,\"stage\":\"pretrain\"}\n\
not json\n\
{\"step\":2,\"epoch\":0.2,\"eval_loss\":3.5,\"stage\":\"pretrain\"}\n\
{\"step\":3,\"loss\":1.0,\"stage\":\"sft\"}\n\
{\"step\":4,\"lo";
        let used = s.extend_lines(text);
        assert_eq!(&text[used..], b"{\"step\":4,\"lo");
        assert_eq!(s.loss, vec![[1.0, 4.0], [2.0, 2.0], [3.0, 1.0]]);
        // EMA with the worker's weight.
        assert_eq!(s.loss_smooth[0], [1.0, 4.0]);
        assert!((s.loss_smooth[1][1] - 3.8).abs() < 1e-12);
        assert_eq!(s.learning_rate, vec![[1.0, 0.001], [2.0, 0.002]]);
        assert_eq!(s.grad_norm, vec![[1.0, 1.5]]);
        assert_eq!(s.eval_loss, vec![[2.0, 3.5]]);
        assert_eq!(
            s.stages,
            vec![
                StageMark {
                    name: "pretrain".into(),
                    step: 1.0
                },
                StageMark {
                    name: "sft".into(),
                    step: 3.0
                }
            ]
        );
        assert_eq!((s.entries, s.skipped), (5, 1));

        // The rest of the line arrives.
        let used = s.extend_lines(b"{\"step\":4,\"loss\":0.5}\n");
        assert_eq!(used, 22);
        assert_eq!(s.loss.last(), Some(&[4.0, 0.5]));
    }

    #[test]
    fn an_array_parses_and_garbage_is_an_error() {
        let s =
            Series::from_array(br#"[{"step":1,"loss":2.0},{"step":1,"eval_loss":2.5}]"#).unwrap();
        assert_eq!(s.loss, vec![[1.0, 2.0]]);
        assert_eq!(s.eval_loss, vec![[1.0, 2.5]]);
        assert!(Series::from_array(b"[{").is_err());
    }
}
