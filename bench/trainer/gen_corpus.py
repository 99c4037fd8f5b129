"""Writes a synthetic corpus of about SIZE_MB megabytes for timing the data steps.

Documents look like the embedded corpus (a speaker's name, then a few lines of
verse separated by blank lines), built from its words with a seeded generator, so
the tokenizer sees realistic word statistics and dedup finds few exact copies.

    python bench/trainer/gen_corpus.py OUT.txt 300
"""

import gzip
import pathlib
import random
import sys


def main() -> None:
    out, size_mb = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    root = pathlib.Path(__file__).resolve().parents[2]
    text = gzip.decompress((root / "data/tinyshakespeare.txt.gz").read_bytes()).decode()
    speeches = [s for s in text.split("\n\n") if "\n" in s]
    speakers = sorted({s.split("\n", 1)[0] for s in speeches})
    words = text.split()
    rng = random.Random(1337)
    target = int(size_mb * 1_000_000)
    written = 0
    with out.open("w", encoding="utf-8") as f:
        while written < target:
            lines = [rng.choice(speakers)]
            for _ in range(rng.randint(1, 6)):
                start = rng.randrange(len(words) - 12)
                line = words[start : start + rng.randint(4, 11)]
                # Swap a word for one from elsewhere: exact repeats stay rare.
                line[rng.randrange(len(line))] = rng.choice(words)
                lines.append(" ".join(line))
            doc = "\n".join(lines) + "\n\n"
            f.write(doc)
            written += len(doc.encode())


if __name__ == "__main__":
    main()
