"""`lavenderd attribute`'s Python side, run with the interpreter that has bergson.

  run MODEL CONTEXT TRAIN QUERIES CONFIG SCORES LOG OUT

One process (importing bergson costs seconds, so it is imported once), whose
output, and every library's warning, goes to LOG; only its own one-line messages
reach the terminal:
1. the token count of every query and training text as bergson will tokenize
   them (training rows that are token ids already, the run's windows, fit by
   construction); exit 4 naming the first one longer than the model's context
   (or empty): queries are refused, not windowed;
2. SOURCE: bergson's own `python -m bergson CONFIG`, run in this process; exit 5
   if it fails;
3. bergson's score store (SCORES, in CONFIG's run_path) as JSON in OUT: one list of training-document scores per
   query, and whether higher scores mean more helpful.

Everything else (the config, ranking) is lavenderd's. Exit 3: bergson (or a
library it needs) is not importable. Messages for exits 3 and 4 go to stderr.
"""

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path


# The terminal's stderr, kept aside while fds 1 and 2 go to the log.
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


def source(config):
    """bergson's CLI on CONFIG, as `python -m bergson CONFIG` runs it."""
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
    source(config)
    with open(out, "w") as f:
        json.dump(scores(scores_dir), f)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"run": run}[command](*args)
