//! The MLflow tracking server, through its REST API (`/api/2.0/mlflow/…`): the
//! experiment by name (made when missing), a run made once per lineage, batches of
//! metrics, params and tags (at most 1000 metrics and 100 params and tags a request,
//! as the server takes them), the run's status. Credentials come from the daemon's
//! environment as MLflow's own clients read them: `MLFLOW_TRACKING_TOKEN` (a bearer
//! token), else `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// What one request may take before the tracker counts as unreachable.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Mlflow {
    http: reqwest::Client,
    uri: String,
    auth: Auth,
}

#[derive(Clone)]
enum Auth {
    None,
    Bearer(String),
    Basic(String, String),
}

pub struct Metric<'a> {
    pub key: &'a str,
    pub value: f64,
    pub step: u64,
    pub timestamp_ms: i64,
}

impl Mlflow {
    pub fn new(uri: &str) -> Result<Mlflow> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .context("build the MLflow client")?;
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let auth = match (
            var("MLFLOW_TRACKING_TOKEN"),
            var("MLFLOW_TRACKING_USERNAME"),
            var("MLFLOW_TRACKING_PASSWORD"),
        ) {
            (Some(t), _, _) => Auth::Bearer(t),
            (None, Some(u), Some(p)) => Auth::Basic(u, p),
            _ => Auth::None,
        };
        Ok(Mlflow {
            http,
            uri: uri.trim_end_matches('/').to_string(),
            auth,
        })
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn request(&self, method: reqwest::Method, api: &str) -> reqwest::RequestBuilder {
        let r = self
            .http
            .request(method, format!("{}/api/2.0/mlflow/{api}", self.uri));
        match &self.auth {
            Auth::None => r,
            Auth::Bearer(t) => r.bearer_auth(t),
            Auth::Basic(u, p) => r.basic_auth(u, Some(p)),
        }
    }

    /// The answer's JSON, or an error naming the call and what the server said.
    async fn send(&self, api: &str, r: reqwest::RequestBuilder) -> Result<Value> {
        let answer = r
            .send()
            .await
            .with_context(|| format!("MLflow {api} at {}", self.uri))?;
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        if !status.is_success() {
            let said: String = body.chars().take(300).collect();
            bail!("MLflow {api} answered {status}: {said}");
        }
        if body.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&body).with_context(|| format!("MLflow {api}: an answer not JSON"))
    }

    async fn post(&self, api: &str, body: Value) -> Result<Value> {
        self.send(api, self.request(reqwest::Method::POST, api).json(&body))
            .await
    }

    /// The experiment's id, made when there is none of that name.
    pub async fn experiment_id(&self, name: &str) -> Result<String> {
        let api = "experiments/get-by-name";
        let found = self
            .send(
                api,
                self.request(reqwest::Method::GET, api)
                    .query(&[("experiment_name", name)]),
            )
            .await;
        let id = |v: &Value, ptr: &str| v.pointer(ptr).and_then(Value::as_str).map(str::to_string);
        if let Ok(v) = &found
            && let Some(e) = id(v, "/experiment/experiment_id")
        {
            return Ok(e);
        }
        match self
            .post("experiments/create", json!({ "name": name }))
            .await
        {
            Ok(v) => id(&v, "/experiment_id").context("MLflow experiments/create: no id"),
            // Made by someone else meanwhile.
            Err(e) if e.to_string().contains("RESOURCE_ALREADY_EXISTS") => {
                let v = self
                    .send(
                        api,
                        self.request(reqwest::Method::GET, api)
                            .query(&[("experiment_name", name)]),
                    )
                    .await?;
                id(&v, "/experiment/experiment_id").context("MLflow get-by-name: no id")
            }
            Err(e) => Err(e),
        }
    }

    /// A new run named `name` in `experiment_id`; its id.
    pub async fn create_run(
        &self,
        experiment_id: &str,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Result<String> {
        let tags: Vec<Value> = tags
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .chain([json!({"key": "mlflow.runName", "value": name})])
            .collect();
        let v = self
            .post(
                "runs/create",
                json!({
                    "experiment_id": experiment_id,
                    "run_name": name,
                    "start_time": chrono::Utc::now().timestamp_millis(),
                    "tags": tags,
                }),
            )
            .await?;
        v.pointer("/run/info/run_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .context("MLflow runs/create: no run id")
    }

    /// Metrics, params and tags, in as many requests as the server's limits need.
    pub async fn log_batch(
        &self,
        run_id: &str,
        metrics: &[Metric<'_>],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<()> {
        for chunk in metrics.chunks(1000) {
            let metrics: Vec<Value> = chunk
                .iter()
                .map(|m| {
                    json!({"key": m.key, "value": m.value, "step": m.step, "timestamp": m.timestamp_ms})
                })
                .collect();
            self.post(
                "runs/log-batch",
                json!({"run_id": run_id, "metrics": metrics}),
            )
            .await?;
        }
        let pairs = |items: &[(String, String)]| -> Vec<Value> {
            items
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect()
        };
        for chunk in params.chunks(100) {
            self.post(
                "runs/log-batch",
                json!({"run_id": run_id, "params": pairs(chunk)}),
            )
            .await?;
        }
        for chunk in tags.chunks(100) {
            self.post(
                "runs/log-batch",
                json!({"run_id": run_id, "tags": pairs(chunk)}),
            )
            .await?;
        }
        Ok(())
    }

    /// The run's status: `RUNNING`, `FINISHED`, `FAILED` or `KILLED` (the last three
    /// with an end time).
    pub async fn set_status(&self, run_id: &str, status: &str) -> Result<()> {
        let mut body = json!({"run_id": run_id, "status": status});
        if status != "RUNNING" {
            body["end_time"] = json!(chrono::Utc::now().timestamp_millis());
        }
        self.post("runs/update", body).await.map(|_| ())
    }
}
