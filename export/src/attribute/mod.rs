//! `lavenderd attribute`: which training documents a query owes its loss to, by
//! bergson's SOURCE (approximate unrolling) over a run's exported checkpoints.
//!
//! lavenderd writes a bergson config (the `approx_unrolling_cfg` that
//! `lavenderd resolve` prints, plus the data and model settings), runs bergson's
//! CLI on it (what `python -m bergson <config>` runs) with the Python that has
//! bergson, and ranks the scores it writes. One Python process checks the
//! documents' token counts, runs SOURCE and reads the scores, so bergson is
//! imported once. Everything lives in `<run>/attribution/<UTC time>/`:
//! `train.jsonl`, `queries.jsonl`, `config.yaml`, `bergson.log`, bergson's own
//! run directory `source/`, `scores.json` (bergson's scores) and
//! `attribution.json` (the ranking).
//!
//! bergson packs up to `--batch-tokens` tokens of rows into one batch, which its
//! own CLI refuses above the model's context; the helper raises that cap
//! (`helper.py`). The query-independent Hessian passes are cached under
//! `<run>/attribution/cache/` ([`cache`]); a later call computes only the query's
//! part. The helper reports each data pass's progress ([`progress`]).
//!
//! By default (`--from-run`) the training data is the run's own, as it saw it: its
//! chunk's pretraining windows ([`windows`]), scored one by one; a document's score
//! is its best window's. `--train FILE` scores whole documents instead.

mod cache;
mod process;
mod progress;
mod windows;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lavender::checkpoint::EXPORT_MARKER;
use serde::Serialize;
use serde_json::{Value, json};

use crate::exporter::locate_run;
use crate::hf_config::model_dims;
use crate::names::{EXPORT_DIR, OPTIMIZER_PT};
use crate::output::resolve_yaml;
use crate::resolve::{ResolveOptions, Resolved, resolve};
use crate::run_config::RunConfig;
use crate::step::step_from_name;

/// The Python half: token-length checks and reading bergson's score store.
const HELPER: &str = include_str!("helper.py");
/// What installs bergson into the project's .venv.
pub const INSTALL_HINT: &str = "run `bash scripts/attribution-setup.sh` in the lavender checkout (it installs bergson==2.5.1 into .venv, keeping torch 2.13.0), or pass --python with an interpreter that has bergson 2.5.1";

#[derive(Debug, Clone)]
pub struct AttributeOptions {
    pub run: String,
    pub queries: PathBuf,
    pub train: Option<PathBuf>,
    pub top: usize,
    pub segments: Option<usize>,
    pub out: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub json: bool,
    /// bergson's `token_batch_size`: rows × the longest row per batch.
    pub batch_tokens: u64,
    /// Neither reuse nor keep the Hessian passes.
    pub no_cache: bool,
    /// Score an evenly spaced sample of at most this many of the run's windows
    /// ([`windows::TrainingWindows::sample`]); all when `None`.
    pub windows: Option<usize>,
}

/// `--batch-tokens`' default: 63 of the tiny pipeline's 65-token windows, 15 of
/// 257 at `--scale small`, per forward/backward.
pub const BATCH_TOKENS: u64 = 4096;

#[derive(Debug, Serialize)]
struct Ranked {
    rank: usize,
    /// 0-based: the document's line in `--train`'s file, or its place among the
    /// run's documents (shard by shard).
    index: usize,
    score: f64,
    /// The document's text.
    text: String,
    document: DocumentRef,
    /// The window whose score is the document's (the run's training data).
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<WindowRef>,
}

#[derive(Debug, Serialize)]
struct DocumentRef {
    file: PathBuf,
    /// 1-based line of `file`.
    line: usize,
    /// Its tokens, the end-of-text token included (the run's documents).
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<usize>,
}

#[derive(Debug, Serialize)]
struct WindowRef {
    /// 0-based, in the trainer's numbering (shard by shard, from the start).
    index: usize,
    shard: String,
    /// Token offsets in the shard's token array, `start..end`.
    start: usize,
    end: usize,
    /// The window as text (it may run across document ends).
    text: String,
    /// The part of the document it holds: token and character offsets, `[from, to)`.
    document_tokens: [usize; 2],
    document_chars: [usize; 2],
}

#[derive(Debug, Serialize)]
struct QueryResult {
    index: usize,
    text: String,
    top: Vec<Ranked>,
}

#[derive(Debug, Serialize)]
struct Report {
    run: PathBuf,
    checkpoints: Vec<PathBuf>,
    train: PathBuf,
    train_documents: usize,
    /// The run's training windows scored (none with `--train`).
    #[serde(skip_serializing_if = "Option::is_none")]
    train_windows: Option<TrainWindows>,
    queries_file: PathBuf,
    config: PathBuf,
    scores: PathBuf,
    /// SOURCE's token budget per batch (`--batch-tokens`).
    batch_tokens: u64,
    hessians: Hessians,
    /// Wall time of the SOURCE run (bergson's import included).
    source_seconds: f64,
    /// bergson's orientation of the scores: true when a higher score means the
    /// document helped the query more.
    higher_is_better: bool,
    queries: Vec<QueryResult>,
}

/// Where the query-independent Hessian passes came from.
#[derive(Debug, Serialize)]
struct Hessians {
    /// `reused` (from the cache), `computed` (and cached) or `computed, not cached`
    /// (`--no-cache`).
    cache: &'static str,
    /// The cache entry, `<run>/attribution/cache/<key>/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    dir: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct TrainWindows {
    /// Windows scored.
    count: usize,
    /// The run's windows: `count` unless `--windows` took a sample.
    of: usize,
    /// The sample's spacing: every `every`-th window in the trainer's numbering.
    every: usize,
    /// Tokens per window: `training.seq_len + 1` (inputs and their next-token
    /// labels), at most the model's context.
    tokens: usize,
    chunk: Option<u64>,
    shards: Vec<String>,
    /// How a document's score is made from its windows'.
    document_score: &'static str,
}

/// What SOURCE scores: whole documents (`--train`), or the run's windows.
enum TrainingData {
    Documents(Vec<String>),
    Windows(windows::TrainingWindows),
}

impl TrainingData {
    fn rows(&self) -> usize {
        match self {
            TrainingData::Documents(d) => d.len(),
            TrainingData::Windows(w) => w.windows.len(),
        }
    }

    fn documents(&self) -> usize {
        match self {
            TrainingData::Documents(d) => d.len(),
            TrainingData::Windows(w) => w.documents.len(),
        }
    }

    /// `train.jsonl` for bergson: texts it tokenizes, or the windows' token ids
    /// (bergson takes an `input_ids` column as it is).
    fn write(&self, path: &Path) -> Result<()> {
        match self {
            TrainingData::Documents(d) => write_documents(path, d),
            TrainingData::Windows(w) => {
                let mut out = std::io::BufWriter::new(
                    fs::File::create(path)
                        .with_context(|| format!("could not create {}", path.display()))?,
                );
                for win in &w.windows {
                    serde_json::to_writer(&mut out, &json!({ "input_ids": win.ids }))?;
                    out.write_all(b"\n")?;
                }
                out.flush()?;
                Ok(())
            }
        }
    }

    /// The top `k` documents for one query's row scores, best first.
    fn top(&self, source: &Path, scores: &[f64], higher_is_better: bool, k: usize) -> Vec<Ranked> {
        match self {
            TrainingData::Documents(docs) => rank(scores, higher_is_better)
                .into_iter()
                .take(k)
                .enumerate()
                .map(|(r, i)| Ranked {
                    rank: r + 1,
                    index: i,
                    score: scores[i],
                    text: docs[i].clone(),
                    document: DocumentRef {
                        file: source.to_path_buf(),
                        line: i + 1,
                        tokens: None,
                    },
                    window: None,
                })
                .collect(),
            TrainingData::Windows(w) => best_windows(w, scores, higher_is_better)
                .into_iter()
                .take(k)
                .enumerate()
                .map(|(r, (doc, win, o))| {
                    let d = &w.documents[doc];
                    let window = &w.windows[win];
                    let (c0, c1) = windows::char_span(&d.text, o.byte_from, o.byte_to);
                    Ranked {
                        rank: r + 1,
                        index: doc,
                        score: scores[win],
                        text: d.text.clone(),
                        document: DocumentRef {
                            file: d.file.clone(),
                            line: d.line,
                            tokens: Some(d.tokens),
                        },
                        window: Some(WindowRef {
                            index: window.index,
                            shard: window.shard.clone(),
                            start: window.start,
                            end: window.start + window.ids.len(),
                            text: window.text.clone(),
                            document_tokens: [o.from, o.to],
                            document_chars: [c0, c1],
                        }),
                    }
                })
                .collect(),
        }
    }
}

/// Per document, its best window (ties: the window holding more of it), and the
/// documents in that order: `(document, window, the window's part of it)`.
fn best_windows(
    w: &windows::TrainingWindows,
    scores: &[f64],
    higher_is_better: bool,
) -> Vec<(usize, usize, windows::Overlap)> {
    let better = |a: f64, b: f64| {
        if higher_is_better { a > b } else { a < b }
    };
    let mut best: Vec<Option<(usize, windows::Overlap)>> = vec![None; w.documents.len()];
    for (i, win) in w.windows.iter().enumerate() {
        for o in &win.overlaps {
            let replace = match best[o.doc] {
                None => true,
                Some((j, held)) => {
                    better(scores[i], scores[j])
                        || (scores[i] == scores[j] && o.to - o.from > held.to - held.from)
                }
            };
            if replace {
                best[o.doc] = Some((i, *o));
            }
        }
    }
    let mut out: Vec<(usize, usize, windows::Overlap)> = best
        .into_iter()
        .enumerate()
        .filter_map(|(d, b)| b.map(|(i, o)| (d, i, o)))
        .collect();
    out.sort_by(|a, b| {
        let o = scores[a.1].total_cmp(&scores[b.1]);
        let o = if higher_is_better { o.reverse() } else { o };
        o.then((b.2.to - b.2.from).cmp(&(a.2.to - a.2.from)))
            .then(a.0.cmp(&b.0))
    });
    out
}

/// `lavenderd attribute`: `checkpoints_root` is where the data root keeps its runs.
pub fn run(checkpoints_root: &Path, a: &AttributeOptions) -> Result<ExitCode> {
    let run = locate_run(checkpoints_root, Some(&a.run))?;
    // Absolute: bergson and the helper run in the work directory.
    let run = std::path::absolute(&run).unwrap_or(run);
    let checkpoints = exported_checkpoints(&run)?;
    let resolved = resolve(&ResolveOptions {
        checkpoints: checkpoints.clone(),
        segments: a.segments,
        ..ResolveOptions::default()
    })?;
    if resolved.use_adam_preconditioner == Some(true) {
        for c in &checkpoints {
            if !c.join(OPTIMIZER_PT).is_file() {
                bail!(
                    "{} has no {OPTIMIZER_PT}, which SOURCE's Adam variant reads: re-export with `lavenderd export --run {} --all --force` (the run must have been trained with training.save_optimizer_state: all)",
                    c.display(),
                    a.run
                );
            }
        }
    }
    let model = checkpoints.last().expect("at least one checkpoint").clone();
    let context = model_dims(&model)?.n_positions;
    let (train_src, train) = match &a.train {
        Some(p) => (
            p.clone(),
            TrainingData::Documents(read_documents(p, "--train")?),
        ),
        None => {
            let rc = RunConfig::read(&run)?;
            let mut w = windows::from_run(&run, &model, rc.seq_len, context)?;
            if let Some(n) = a.windows {
                if n == 0 {
                    bail!(
                        "--windows 0 leaves nothing to score: pass at least 1, or leave it out for all {} windows",
                        w.total
                    );
                }
                w.sample(n);
            }
            let src = run.parent().and_then(Path::parent).map_or_else(
                || run.clone(),
                |root| root.join(lavender::data_root::SHARDS),
            );
            (src, TrainingData::Windows(w))
        }
    };
    let queries = read_documents(&a.queries, "--queries")?;
    if a.batch_tokens < context {
        bail!(
            "--batch-tokens {} is below the model's context ({context} tokens): a row as long as the context would fit no batch; pass at least {context}",
            a.batch_tokens
        );
    }
    let python = process::python(a.python.as_deref())?;

    let work = run.join("attribution").join(
        chrono::Utc::now()
            .format("%Y-%m-%d_%H-%M-%S%.3f")
            .to_string(),
    );
    fs::create_dir_all(&work).with_context(|| format!("could not create {}", work.display()))?;
    let train_file = work.join("train.jsonl");
    let queries_file = work.join("queries.jsonl");
    train.write(&train_file)?;
    write_documents(&queries_file, &queries)?;
    let helper = work.join("attribute_helper.py");
    fs::write(&helper, HELPER).with_context(|| format!("could not write {}", helper.display()))?;

    match &train {
        TrainingData::Documents(d) => eprintln!(
            "attribute: {} training documents, {} queries, {} checkpoints of {}",
            d.len(),
            queries.len(),
            checkpoints.len(),
            run.display()
        ),
        TrainingData::Windows(w) => eprintln!(
            "attribute: the run's training data: {} of {} tokens from {} documents (chunk {}, shards {}), {} queries, {} checkpoints of {}",
            windows::counted(w.windows.len(), w.total, w.every),
            w.window_tokens,
            w.documents.len(),
            w.chunk.map_or("?".to_string(), |c| c.to_string()),
            w.shards.join(", "),
            queries.len(),
            checkpoints.len(),
            run.display()
        ),
    }
    let source_dir = work.join("source");
    let scores_dir = source_dir.join("scores");
    let config = work.join("config.yaml");
    // Every row fits one batch: rows are at most the context long (the helper
    // checks documents and queries first), the budget at least the context.
    let token_batch = a.batch_tokens;
    let outputs = cache::hessian_outputs(
        resolved.segments,
        checkpoints.len() / resolved.segments.max(1),
    );
    let cache_root = run.join("attribution").join(cache::CACHE_DIR);
    let cache_inputs = if a.no_cache {
        None
    } else {
        let inputs = cache::CacheInputs {
            bergson: cache::BERGSON_VERSION,
            checkpoints: checkpoints
                .iter()
                .map(|c| cache::CheckpointHash::of(c))
                .collect::<Result<_>>()?,
            segments: resolved.segments,
            lr_list: resolved.lr_list.clone(),
            step_size_list: resolved.step_size_list.clone(),
            hessian: cache::HessianSettings {
                method: cache::METHOD,
                ev_correction: true,
                precision: PRECISION,
                token_batch_size: token_batch,
            },
            train_sha256: cache::sha256_file(&train_file)?,
        };
        let key = inputs.key();
        Some((inputs, key))
    };
    let reused = match &cache_inputs {
        Some((_, key)) => cache::lookup(&cache_root, key, &outputs),
        None => None,
    };
    match (&cache_inputs, &reused) {
        (_, Some(entry)) => {
            cache::link(entry, &source_dir, &outputs)?;
            eprintln!(
                "attribute: reusing the Hessian passes cached in {}; computing the query's part only",
                entry.display()
            );
        }
        (Some((_, key)), None) => eprintln!(
            "attribute: no cached Hessian passes for these checkpoints, windows and settings; computing them, then caching them in {}",
            cache_root.join(key).display()
        ),
        (None, None) => {
            eprintln!("attribute: --no-cache: computing the Hessian passes, not keeping them")
        }
    }
    fs::write(
        &config,
        bergson_config(
            &resolved,
            &source_dir,
            &model,
            &train_file,
            &queries_file,
            token_batch,
        ),
    )
    .with_context(|| format!("could not write {}", config.display()))?;
    let log = work.join("bergson.log");
    let scores_json = work.join("scores.json");
    eprintln!(
        "attribute: running SOURCE, {token_batch} tokens a batch: `{} {} source {}` (bergson's CLI with its token-batch cap raised), in one process with the token checks and the score reading: {} {} run … (log: {})",
        python.display(),
        helper.display(),
        config.display(),
        python.display(),
        helper.display(),
        log.display()
    );
    let unit = match &train {
        TrainingData::Documents(_) => "documents",
        TrainingData::Windows(_) => "windows",
    };
    let mut view = progress::View::new(
        progress::Plan::new(
            checkpoints.len(),
            train.rows(),
            queries.len(),
            reused.is_some(),
            unit,
        ),
        a.json,
    );
    let started = Instant::now();
    process::helper_call(
        &python,
        &helper,
        &work,
        &log,
        &[
            "run".as_ref(),
            model.as_os_str(),
            context.to_string().as_ref(),
            train_file.as_os_str(),
            queries_file.as_os_str(),
            config.as_os_str(),
            scores_dir.as_os_str(),
            log.as_os_str(),
            scores_json.as_os_str(),
        ],
        &mut view,
    )?;
    let source_seconds = started.elapsed().as_secs_f64();
    eprintln!("attribute: SOURCE took {source_seconds:.0} s");
    let hessians = match (cache_inputs, reused) {
        (_, Some(entry)) => Hessians {
            cache: "reused",
            dir: Some(entry),
        },
        (Some((inputs, key)), None) => {
            let entry = cache::publish(&source_dir, &cache_root, &key, &outputs, &inputs)?;
            eprintln!(
                "attribute: cached the Hessian passes in {}",
                entry.display()
            );
            Hessians {
                cache: "computed",
                dir: Some(entry),
            }
        }
        (None, None) => Hessians {
            cache: "computed, not cached",
            dir: None,
        },
    };
    let out = fs::read_to_string(&scores_json)
        .with_context(|| format!("could not read {}", scores_json.display()))?;
    let parsed: Value = serde_json::from_str(&out)
        .with_context(|| format!("{} holds no JSON: {out}", scores_json.display()))?;
    let higher_is_better = parsed["higher_is_better"].as_bool().unwrap_or(false);
    let per_query: Vec<Vec<f64>> = serde_json::from_value(parsed["scores"].clone())
        .context("the score reader's scores are not lists of numbers")?;
    if per_query.len() != queries.len() || per_query.iter().any(|s| s.len() != train.rows()) {
        bail!(
            "bergson wrote scores for {} queries × {:?} training rows, expected {} × {}",
            per_query.len(),
            per_query.first().map(Vec::len),
            queries.len(),
            train.rows()
        );
    }
    let results: Vec<QueryResult> = per_query
        .iter()
        .zip(&queries)
        .enumerate()
        .map(|(q, (scores, text))| QueryResult {
            index: q,
            text: text.clone(),
            top: train.top(&train_src, scores, higher_is_better, a.top),
        })
        .collect();
    let report = Report {
        run: run.clone(),
        checkpoints,
        train: train_src,
        train_documents: train.documents(),
        train_windows: match &train {
            TrainingData::Documents(_) => None,
            TrainingData::Windows(w) => Some(TrainWindows {
                count: w.windows.len(),
                of: w.total,
                every: w.every,
                tokens: w.window_tokens,
                chunk: w.chunk,
                shards: w.shards.clone(),
                document_score: "its best window's",
            }),
        },
        queries_file: a.queries.clone(),
        config,
        scores: scores_dir,
        batch_tokens: token_batch,
        hessians,
        source_seconds,
        higher_is_better,
        queries: results,
    };
    let out_path = a
        .out
        .clone()
        .unwrap_or_else(|| work.join("attribution.json"));
    let mut text = serde_json::to_vec_pretty(&report)?;
    text.push(b'\n');
    fs::write(&out_path, text)
        .with_context(|| format!("could not write {}", out_path.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report_text(&report));
        println!("written to {}", out_path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Indices of `scores` from most to least helpful, in bergson's orientation.
fn rank(scores: &[f64], higher_is_better: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| {
        let o = scores[a].total_cmp(&scores[b]);
        if higher_is_better { o.reverse() } else { o }
    });
    order
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

fn report_text(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let order = if r.higher_is_better {
        "higher"
    } else {
        "lower"
    };
    let data = match &r.train_windows {
        Some(w) => format!(
            "the run's training data: {} of {} tokens from {} documents of chunk {} ({}); a document's score is its best window's",
            windows::counted(w.count, w.of, w.every),
            w.tokens,
            r.train_documents,
            w.chunk.map_or("?".to_string(), |c| c.to_string()),
            w.shards.join(", ")
        ),
        None => format!("{} training documents", r.train_documents),
    };
    let _ = writeln!(
        s,
        "SOURCE over {} checkpoints of {}; {data} ({order} score = more helpful)",
        r.checkpoints.len(),
        r.run.display()
    );
    for q in &r.queries {
        let _ = writeln!(s, "query {}: {}", q.index + 1, one_line(&q.text, 70));
        for t in &q.top {
            let name = t
                .document
                .file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  {:>3}. {name}:{:<6} {:>+13.6e}  {}",
                t.rank,
                t.document.line,
                t.score,
                one_line(&t.text, 60)
            );
            if let Some(w) = &t.window {
                let _ = writeln!(
                    s,
                    "       window {} ({} tokens {}..{}; tokens {}..{} of the document's {}, chars {}..{}): {}",
                    w.index,
                    w.shard,
                    w.start,
                    w.end,
                    w.document_tokens[0],
                    w.document_tokens[1],
                    t.document.tokens.unwrap_or(0),
                    w.document_chars[0],
                    w.document_chars[1],
                    one_line(&w.text, 60)
                );
            }
        }
    }
    s
}

/// `<run>/exported/checkpoint-<N>/` directories lavender exported, by step.
fn exported_checkpoints(run: &Path) -> Result<Vec<PathBuf>> {
    let dir = run.join(EXPORT_DIR);
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    if let Ok(entries) = fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(step) = step_from_name(&name)
                && name.starts_with("checkpoint-")
                && e.path().join(EXPORT_MARKER).is_file()
            {
                found.push((step, e.path()));
            }
        }
    }
    if found.is_empty() {
        let name = run
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        bail!(
            "run {} has no exported checkpoints in {}: run `lavenderd export --run {name} --all` first",
            run.display(),
            dir.display()
        );
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// The `text` of every line of a JSONL file; `option` names it in errors.
fn read_documents(path: &Path, option: &str) -> Result<Vec<String>> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("{option}: could not read {}", path.display()))?;
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!(
                "{option}: line {} of {} is not JSON ({e}); expected one {{\"text\": \"...\"}} object per line",
                i + 1,
                path.display()
            )
        })?;
        match v.get("text").and_then(Value::as_str) {
            Some(t) if !t.trim().is_empty() => docs.push(t.to_string()),
            Some(_) => bail!(
                "{option}: line {} of {} has an empty \"text\"",
                i + 1,
                path.display()
            ),
            None => bail!(
                "{option}: line {} of {} has no string \"text\" field",
                i + 1,
                path.display()
            ),
        }
    }
    if docs.is_empty() {
        bail!("{option}: {} holds no documents", path.display());
    }
    Ok(docs)
}

fn write_documents(path: &Path, docs: &[String]) -> Result<()> {
    let mut out = std::io::BufWriter::new(
        fs::File::create(path).with_context(|| format!("could not create {}", path.display()))?,
    );
    for d in docs {
        serde_json::to_writer(&mut out, &json!({ "text": d }))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// bergson's `index_cfg.precision` (and the cache key's).
const PRECISION: &str = "fp32";

/// The one-step bergson config: `approxunrolling` with the resolved
/// `approx_unrolling_cfg`, the training documents as the data to score and the
/// queries one score column each. Its `token_batch_size` may exceed the model's
/// context, which bergson's own CLI refuses: it runs through the helper's
/// `source` command. `overwrite: false` makes bergson skip the Hessian outputs
/// linked in from the cache (the run directory is otherwise fresh).
fn bergson_config(
    r: &Resolved,
    run_path: &Path,
    model: &Path,
    train: &Path,
    queries: &Path,
    token_batch: u64,
) -> String {
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).expect("strings");
    let fragment = resolve_yaml(r);
    let mut s = String::new();
    s.push_str(
        "# Written by `lavenderd attribute`. Rerun it with `python attribute_helper.py source <this file>`\n\
         # (beside it): bergson's own `python -m bergson` refuses a token_batch_size above the\n\
         # model's context, and the helper raises that cap.\n",
    );
    s.push_str("steps:\n- approxunrolling:\n    index_cfg:\n");
    s.push_str(&format!("      run_path: {}\n", q(run_path)));
    s.push_str(&format!("      model: {}\n", q(model)));
    s.push_str(&format!(
        "      precision: {PRECISION}\n      overwrite: false\n"
    ));
    s.push_str(&format!("      token_batch_size: {token_batch}\n"));
    s.push_str(&format!(
        "      data:\n        dataset: {}\n        prompt_column: text\n",
        q(train)
    ));
    s.push_str("    hessian_cfg:\n      method: kfac\n      ev_correction: true\n");
    // The resolved fragment, indented under the step; its comments come along.
    for line in fragment.lines() {
        s.push_str("    ");
        s.push_str(line);
        s.push('\n');
    }
    s.push_str(&format!(
        "      query:\n        dataset: {}\n        prompt_column: text\n        aggregation: none\n",
        q(queries)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_follows_bergsons_orientation() {
        let scores = [0.5, -2.0, 3.0, 0.0];
        assert_eq!(rank(&scores, true), [2, 0, 3, 1]);
        assert_eq!(rank(&scores, false), [1, 3, 0, 2]);
    }

    #[test]
    fn documents_need_a_text_field() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.jsonl");
        fs::write(&f, "{\"text\": \"a b\"}\n\n{\"text\": \"c\"}\n").unwrap();
        assert_eq!(read_documents(&f, "--queries").unwrap(), ["a b", "c"]);
        fs::write(&f, "{\"text\": \"a\"}\nnot json\n").unwrap();
        let err = read_documents(&f, "--queries").unwrap_err().to_string();
        assert!(
            err.contains("--queries: line 2") && err.contains("not JSON"),
            "{err}"
        );
        fs::write(&f, "{\"body\": \"a\"}\n").unwrap();
        let err = read_documents(&f, "--queries").unwrap_err().to_string();
        assert!(err.contains("no string \"text\""), "{err}");
        let err = read_documents(&dir.path().join("none.jsonl"), "--train")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--train: could not read"), "{err}");
    }
}
