"""Fills a data root's data folders with COUNT small files (default 166,829, the
operator guide's figure), split over corpus/, shards/ and tokens/ the way a real
pipeline's outputs pile up. Usage: make_data_root.py DATA_ROOT [COUNT]"""

import os
import sys


def main():
    root = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 166_829
    folders = ["corpus/documents", "shards/parts", "tokens/cache"]
    for f in folders:
        os.makedirs(os.path.join(root, f), exist_ok=True)
    payload = b"x" * 96
    for i in range(count):
        folder = folders[i % len(folders)]
        with open(os.path.join(root, folder, f"{i:07d}.bin"), "wb") as out:
            out.write(payload)
    print(f"{count} files in {', '.join(folders)} under {root}")


if __name__ == "__main__":
    main()
