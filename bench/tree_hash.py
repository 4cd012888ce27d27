"""Code-image hashing speed: our md5-tree-v2 over a synthetic tree vs coreutils md5sum of the
same bytes, measured in the same run. Prints the ratio (1.0 = as fast as md5sum).

    .venv/bin/python bench/tree_hash.py [--files 2000] [--size 65536]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from mlpstorage_py.results.code_image import tree_files, tree_hash


def build_tree(root: Path, files: int, size: int) -> None:
    for i in range(files):
        path = root / f"d{i % 50:02d}" / f"f{i:05d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(os.urandom(size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--size", type=int, default=65536)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_tree(root, opts.files, opts.size)
        names = tree_files(root)
        start = time.perf_counter()
        subprocess.run(["md5sum", *names], cwd=root, check=True, stdout=subprocess.DEVNULL)
        reference = time.perf_counter() - start
        start = time.perf_counter()
        tree_hash(root)
        ours = time.perf_counter() - start
    total = opts.files * opts.size / 2**20
    print(f"{opts.files} files, {total:.0f} MiB (page cache warm for both)")
    print(f"md5sum     : {reference:.3f} s ({total / reference:.0f} MiB/s)")
    print(f"tree_hash  : {ours:.3f} s ({total / ours:.0f} MiB/s)")
    print(f"ratio (md5sum time / ours): {reference / ours:.2f}")


if __name__ == "__main__":
    main()
