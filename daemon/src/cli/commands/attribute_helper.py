"""`lavenderd attribute`'s Python side, run with the interpreter that has bergson.

  run MODEL CONTEXT TRAIN QUERIES CONFIG SCORES LOG OUT

One process (importing bergson costs seconds, so it is imported once):
1. the token count of every training document and query as bergson will tokenize
   them; exit 4 naming the first one longer than the model's context (or empty);
2. SOURCE: bergson's own `python -m bergson CONFIG`, run in this process, its
   output (stdout and stderr) going to LOG; exit 5 if it fails;
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


def _say(message):
    print(message, file=sys.stderr, flush=True)


def _import_or_exit(module):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        _say(f"cannot import {module}: {e}")
        sys.exit(3)


def _texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def check(model, context, train, queries):
    transformers = _import_or_exit("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(model)
    context = int(context)
    for kind, path in (("training document", train), ("query", queries)):
        texts = _texts(path)
        lengths = [len(ids) for ids in tok(texts)["input_ids"]]
        for i, n in enumerate(lengths):
            if n > context:
                _say(
                    f"{kind} {i + 1} of {path} is {n} tokens long, but the model's "
                    f"context (n_positions) is {context} tokens"
                )
                sys.exit(4)
            if n == 0:
                _say(f"{kind} {i + 1} of {path} has no tokens")
                sys.exit(4)


def source(config, log):
    """bergson's CLI on CONFIG, as `python -m bergson CONFIG` runs it."""
    bergson_main = _import_or_exit("bergson.__main__")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "w") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.argv = ["bergson", config]
        try:
            bergson_main.main()
            failed = False
        except BaseException:  # noqa: BLE001 - SystemExit too: the log says why
            traceback.print_exc()
            failed = True
        sys.stdout.flush()
        sys.stderr.flush()
    os.dup2(saved, 2)
    if failed:
        sys.exit(5)


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
    check(model, context, train, queries)
    source(config, log)
    with open(out, "w") as f:
        json.dump(scores(scores_dir), f)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"run": run}[command](*args)
