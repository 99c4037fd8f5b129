//! `lavender-worker generate`: sample text from a checkpoint with temperature and top-k.

use std::path::PathBuf;

use anyhow::{Result, anyhow, ensure};
use clap::Args;
use tch::{Kind, Tensor};

use crate::cli::StepArgs;
use crate::model::load_for_inference;
use crate::train::settings::Settings;

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub step: StepArgs,
    /// Checkpoint directory, run directory, or `latest`.
    #[arg(long, default_value = "latest", value_name = "PATH|latest")]
    pub checkpoint: String,
    /// Text to continue.
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 picks the most likely token every time.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Sample among the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top_k: i64,
    /// Sampling seed (default: the config's seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// auto|cpu|cuda|cuda:N|mps.
    #[arg(long)]
    pub device: Option<String>,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    crate::train::runtime::tune();
    ensure!(
        args.temperature >= 0.0 && args.temperature.is_finite(),
        "--temperature must be ≥ 0, got {}",
        args.temperature
    );
    let s = Settings::load(&args.step)?;
    tch::set_num_threads(s.threads as i32);
    let device =
        crate::train::device::from_flag(args.device.as_deref(), s.config.device, &s.origins)?;
    let (model, ck) =
        load_for_inference(&s.checkpoints_root(), &args.checkpoint, s.model(0)?, device)?;
    // The run's own tokenizer is the encoding its weights were trained with.
    let run_tok = ck
        .path
        .parent()
        .map(|p| p.join(crate::tokens::TOKENIZER_FILE));
    let tok_path: PathBuf = run_tok.filter(|p| p.is_file()).unwrap_or_else(|| {
        s.data_root
            .join(lavender::data_root::TOKENS)
            .join(crate::tokens::TOKENIZER_FILE)
    });
    let tokenizer = tokenizers::Tokenizer::from_file(&tok_path)
        .map_err(|e| anyhow!("could not load the tokenizer {}: {e}", tok_path.display()))?;
    let enc = tokenizer
        .encode(args.prompt.as_str(), false)
        .map_err(|e| anyhow!("could not encode the prompt: {e}"))?;
    let mut ids: Vec<i64> = enc.get_ids().iter().map(|&i| i as i64).collect();
    if ids.is_empty() {
        // An empty prompt starts from the end-of-text token.
        ids.push(0);
    }
    tch::manual_seed(args.seed.unwrap_or(s.seed) as i64);
    let _guard = tch::no_grad_guard();
    let ctx = model.cfg.n_positions as usize;
    let prompt_len = ids.len();
    for _ in 0..args.max_new_tokens {
        let window = &ids[ids.len().saturating_sub(ctx)..];
        let input = Tensor::from_slice(window).view([1, -1]).to_device(device);
        let logits = model.forward(&input, false).select(1, -1).squeeze_dim(0);
        let next = if args.temperature == 0.0 {
            logits.argmax(-1, false).int64_value(&[])
        } else {
            let mut l = logits / args.temperature;
            if args.top_k > 0 && args.top_k < l.size()[0] {
                let (top, _) = l.topk(args.top_k, -1, true, true);
                let floor = top.select(0, args.top_k - 1);
                l = l.where_self(
                    &l.ge_tensor(&floor),
                    &Tensor::from(f64::NEG_INFINITY).to_device(device),
                );
            }
            l.softmax(-1, Kind::Float)
                .multinomial(1, false)
                .int64_value(&[0])
        };
        ids.push(next);
    }
    // Decoding the whole sequence lets the tokenizer place the spaces between the
    // prompt and the continuation; the prompt is then shown as the user typed it.
    let decode = |ids: &[i64]| -> Result<String> {
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        tokenizer
            .decode(&ids, true)
            .map_err(|e| anyhow!("could not decode the sample: {e}"))
    };
    let all = decode(&ids)?;
    let head = decode(&ids[..prompt_len])?;
    match all.strip_prefix(head.as_str()) {
        Some(rest) if !args.prompt.is_empty() => println!("{}{rest}", args.prompt),
        _ => println!("{all}"),
    }
    let new = ids.len() - prompt_len;
    eprintln!("(sampled {new} tokens from {})", ck.name);
    Ok(())
}
