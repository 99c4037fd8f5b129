"""`lavenderd attribute`'s Python side, run with the interpreter that has bergson.

  run MODEL CONTEXT TRAIN QUERIES CONFIG SCORES LOG OUT
  source CONFIG
  check

`run` is one process (importing bergson costs seconds, so it is imported once),
whose output, and every library's warning, goes to LOG; only its own one-line
messages reach its stderr (lavenderd's pipe):
1. the token count of every query and training text as bergson will tokenize
   them (training rows that are token ids already, the run's windows, fit by
   construction); exit 4 naming the first one longer than the model's context
   (or empty): queries are refused, not windowed;
2. SOURCE: bergson's own `python -m bergson CONFIG`, run in this process with
   the token-batch cap raised (below) and each data pass's progress reported as
   `progress {json}` lines; exit 5 if it fails;
3. bergson's score store (SCORES, in CONFIG's run_path) as JSON in OUT: one list
   of training-document scores per query, and whether higher scores mean more
   helpful.

`source CONFIG` runs a config `run` wrote again, by hand, with the same cap
(bergson's own `python -m bergson CONFIG` refuses it; see below). `check` says
whether this bergson is the one the cap is written against (exit 0) or not
(exit 6), without running anything.

The token-batch cap. bergson packs many rows into one padded batch of at most
`token_batch_size` tokens (rows x longest row), but `setup_data_pipeline`
(bergson/utils/worker_utils.py) refuses a `token_batch_size` above
`max_tokens_for_model` -- the model's context -- as if the budget were a sequence
length. With lavender's short windows that leaves one window per batch. The
cap is raised by replacing `max_tokens_for_model` in that module (its only
caller there is `setup_data_pipeline`, which looks the name up at call time) with
one returning at least the config's `token_batch_size`. The function also sets
the length bergson truncates texts to, which is harmless here: every text is
checked against the context in step 1 and bergson's truncation is off. Written
against bergson 2.5.1 exactly: another version, or 2.5.1's functions changed in
place, exits 6 before anything runs.

The labels of the Hessian passes. bergson draws each position's label from the
model's distribution with `torch.multinomial` (`fwd_bwd_hessian` in
bergson/collector/collector.py), which on the CPU walks the rows one by one:
~300 ms for a batch of 4,032 positions over a 2,048-token vocabulary, half of
each K-FAC pass here. Inverse-CDF sampling (a cumulative sum, a uniform draw
scaled to the row's total, a binary search) draws from the same distribution (to
the rounding of the running sum, ~1e-4 of a row's mass at worst in float32), from
torch's same generator, in ~30 ms. It is put in place by
giving that module a `torch` that is torch but for `multinomial` (only the
single-draw, with-replacement, 2-D call is taken over; any other goes to
torch's own).

Everything else (the config, the cache of the Hessian passes, ranking) is
lavenderd's. Exit 3: bergson (or a library it needs) is not importable. Messages
for exits 3, 4 and 6 go to stderr.
"""

import importlib.util
import inspect
import json
import os
import sys
import traceback
from pathlib import Path

# The bergson whose internals `_raise_token_batch_cap`, `_sample_labels_by_inverse_cdf`
# and `_report_progress` are written against.
BERGSON_VERSION = "2.5.1"

# The terminal's stderr (lavenderd's pipe), kept aside while fds 1 and 2 go to
# the log.
_TERMINAL = None


def _say(message):
    out = _TERMINAL if _TERMINAL is not None else sys.stderr
    print(message, file=out, flush=True)


def _import_or_exit(module):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        _say(f"cannot import {module}: {e}")
        sys.exit(3)


def _texts(path):
    """The texts of a JSONL file, or None when its rows are token ids already."""
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if rows and "input_ids" in rows[0]:
        return None
    return [row["text"] for row in rows]


def check(model, context, train, queries):
    transformers = _import_or_exit("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(model)
    context = int(context)
    for kind, path in (("query", queries), ("training document", train)):
        texts = _texts(path)
        if texts is None:
            continue
        lengths = [len(ids) for ids in tok(texts)["input_ids"]]
        for i, n in enumerate(lengths):
            if n > context:
                refused = " (queries are not windowed)" if kind == "query" else ""
                _say(
                    f"{kind} {i + 1} of {path} is {n} tokens long, but the model's "
                    f"context (n_positions) is {context} tokens{refused}"
                )
                sys.exit(4)
            if n == 0:
                _say(f"{kind} {i + 1} of {path} has no tokens")
                sys.exit(4)


def bergson_internals():
    """What of bergson the cap and the progress reports rely on, as
    (module, problem) pairs: empty when this is the bergson they are written
    against."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("bergson")
    except PackageNotFoundError:
        return [("bergson", "not installed")]
    if found != BERGSON_VERSION:
        return [("bergson", f"version {found}, not {BERGSON_VERSION}")]
    problems = []
    worker_utils = _import_or_exit("bergson.utils.worker_utils")
    collector = _import_or_exit("bergson.collector.collector")
    cap = getattr(worker_utils, "max_tokens_for_model", None)
    if cap is None or list(inspect.signature(cap).parameters)[:3] != [
        "tokenizer",
        "model_str",
        "revision",
    ]:
        problems.append(
            (
                "bergson.utils.worker_utils",
                "max_tokens_for_model(tokenizer, model_str, revision, ...) is gone",
            )
        )
    pipeline = inspect.getsource(worker_utils.setup_data_pipeline)
    for needle in ("max_tokens_for_model(", "Token batch size"):
        if needle not in pipeline:
            problems.append(
                (
                    "bergson.utils.worker_utils",
                    f"setup_data_pipeline no longer contains {needle!r}",
                )
            )
    hessian = inspect.getsource(collector.fwd_bwd_hessian_factory)
    if "torch.multinomial(" not in hessian or collector.torch.__name__ != "torch":
        problems.append(
            (
                "bergson.collector.collector",
                "fwd_bwd_hessian_factory no longer samples labels with the module's torch.multinomial",
            )
        )
    hooks = inspect.getsource(collector.CollectorComputer.run_with_collector_hooks)
    if "tqdm(" not in hooks or not hasattr(collector, "tqdm"):
        problems.append(
            (
                "bergson.collector.collector",
                "CollectorComputer.run_with_collector_hooks no longer iterates its batches through the module's tqdm",
            )
        )
    return problems


def _require_bergson_internals():
    problems = bergson_internals()
    if problems:
        for module, problem in problems:
            _say(
                f"lavender's SOURCE helper is written against bergson {BERGSON_VERSION}'s "
                f"internals, and {module}: {problem}; install bergson=={BERGSON_VERSION} "
                "(bash scripts/attribution-setup.sh)"
            )
        sys.exit(6)


def _token_batch_size(config):
    yaml = _import_or_exit("yaml")
    with open(config, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for step in doc.get("steps", []):
        for body in step.values():
            size = (body or {}).get("index_cfg", {}).get("token_batch_size")
            if size is not None:
                return int(size)
    return None


def _raise_token_batch_cap(budget):
    """bergson's cap on `token_batch_size` at least `budget` (module docstring)."""
    worker_utils = _import_or_exit("bergson.utils.worker_utils")
    model_cap = worker_utils.max_tokens_for_model

    def max_tokens_for_model(*args, **kwargs):
        return max(model_cap(*args, **kwargs), budget)

    worker_utils.max_tokens_for_model = max_tokens_for_model


def sample_one(probs, num_samples, replacement=False, *, generator=None, out=None):
    """`torch.multinomial(probs, num_samples, replacement)` by inverse CDF when it
    is one draw with replacement from each row of a 2-D `probs` (the module
    docstring says why); torch's own otherwise."""
    import torch

    if num_samples != 1 or not replacement or probs.dim() != 2 or out is not None:
        return torch.multinomial(probs, num_samples, replacement=replacement, generator=generator, out=out)
    cdf = probs.cumsum(dim=-1)
    draw = torch.rand((probs.size(0), 1), dtype=cdf.dtype, device=probs.device, generator=generator)
    # The first category whose cumulative mass exceeds the draw: a category of
    # mass 0 is never it (its cumulative mass equals its predecessor's).
    picked = torch.searchsorted(cdf, draw * cdf[:, -1:], right=True)
    return picked.clamp_(max=probs.size(1) - 1)


def _sample_labels_by_inverse_cdf():
    """bergson's Hessian passes draw their labels with `sample_one` (module
    docstring)."""
    import types

    import torch

    collector = _import_or_exit("bergson.collector.collector")

    class TorchButMultinomial(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    patched = TorchButMultinomial("torch")
    patched.multinomial = sample_one
    collector.torch = patched


def _kind(desc):
    """The pass a CollectorComputer run is, from the description bergson gives it."""
    desc = desc or ""
    if desc.startswith("Computing Approximating"):
        return "covariances"
    if desc.startswith("Computing Lambda"):
        return "eigenvalue correction"
    return "gradients"


def _report_progress():
    """Each data pass of bergson's CollectorComputer reported on the terminal as
    `progress {"pass", "done", "total"}` lines (rows done of the pass's rows),
    at its start and after each batch."""
    collector = _import_or_exit("bergson.collector.collector")

    def reporting(batches, desc=None, **_):
        batches = list(batches)
        total = sum(len(b) for b in batches)
        kind = _kind(desc)

        def report(done):
            _say("progress " + json.dumps({"pass": kind, "done": done, "total": total}))

        report(0)
        done = 0
        for indices in batches:
            yield indices
            done += len(indices)
            report(done)

    collector.tqdm = reporting


def source(config, progress=False):
    """bergson's CLI on CONFIG, as `python -m bergson CONFIG` runs it, with the
    token-batch cap raised to CONFIG's token_batch_size."""
    _require_bergson_internals()
    budget = _token_batch_size(config)
    if budget is not None:
        _raise_token_batch_cap(budget)
    _sample_labels_by_inverse_cdf()
    if progress:
        _report_progress()
    bergson_main = _import_or_exit("bergson.__main__")
    sys.argv = ["bergson", config]
    try:
        bergson_main.main()
    except BaseException:  # noqa: BLE001 - SystemExit too: the log says why
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.exit(5)
    sys.stdout.flush()
    sys.stderr.flush()


def _to_log(log):
    """Sends fds 1 and 2 (print, logging, warnings, C libraries) to LOG, keeping
    the terminal's stderr for this script's own messages."""
    global _TERMINAL
    sys.stdout.flush()
    sys.stderr.flush()
    _TERMINAL = os.fdopen(os.dup(2), "w")
    out = open(log, "w")
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)


def scores(scores_dir):
    data = _import_or_exit("bergson.data")
    config_io = _import_or_exit("bergson.config.config_io")
    config = _import_or_exit("bergson.config")
    scores_dir = Path(scores_dir)
    store = data.load_scores(scores_dir)
    grid = store[:]
    score_cfg = config_io.load_subconfig(scores_dir, "score_cfg", config.ScoreConfig)
    higher_is_better = bool(score_cfg.higher_is_better) if score_cfg else False
    # grid is [training documents, queries].
    per_query = [[float(x) for x in grid[:, q]] for q in range(grid.shape[1])]
    return {"higher_is_better": higher_is_better, "scores": per_query}


def run(model, context, train, queries, config, scores_dir, log, out):
    # Found without importing it: a document too long is told in seconds.
    if importlib.util.find_spec("bergson") is None:
        _say(f"no module named bergson in {sys.executable}")
        sys.exit(3)
    _to_log(log)
    check(model, context, train, queries)
    source(config, progress=True)
    with open(out, "w") as f:
        json.dump(scores(scores_dir), f)


def check_internals():
    if importlib.util.find_spec("bergson") is None:
        _say(f"no module named bergson in {sys.executable}")
        sys.exit(3)
    _require_bergson_internals()
    _say(f"bergson {BERGSON_VERSION}: the token-batch cap, the label sampler and the progress hooks are in place")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"run": run, "source": source, "check": check_internals}[command](*args)
