"""`lavenderd attribute`'s Python side, run with the interpreter that has bergson.

  check MODEL CONTEXT TRAIN QUERIES   token counts of every document, as bergson
                                      will tokenize them; exit 4 naming the first
                                      one longer than the model's context
  scores SCORES_DIR                   bergson's score store as JSON: one list of
                                      training-document scores per query, and
                                      whether higher scores mean more helpful

Everything else (the config, running `python -m bergson`, ranking) is lavenderd's.
Exit 3: bergson (or a library it needs) is not importable.
"""

import json
import sys
from pathlib import Path


def _import_or_exit(module):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        print(f"cannot import {module}: {e}", file=sys.stderr)
        sys.exit(3)


def _texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def check(model, context, train, queries):
    _import_or_exit("bergson")
    transformers = _import_or_exit("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(model)
    context = int(context)
    longest = {}
    for kind, path in (("training document", train), ("query", queries)):
        texts = _texts(path)
        lengths = [len(ids) for ids in tok(texts)["input_ids"]]
        for i, n in enumerate(lengths):
            if n > context:
                print(
                    f"{kind} {i + 1} of {path} is {n} tokens long, but the model's "
                    f"context (n_positions) is {context} tokens",
                    file=sys.stderr,
                )
                sys.exit(4)
            if n == 0:
                print(f"{kind} {i + 1} of {path} has no tokens", file=sys.stderr)
                sys.exit(4)
        longest[kind] = max(lengths)
    print(json.dumps({"longest": longest}))


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
    print(json.dumps({"higher_is_better": higher_is_better, "scores": per_query}))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"check": check, "scores": scores}[command](*args)
