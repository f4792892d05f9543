"""What the checkpoint manifest's hash costs (`nemo_lead.checkpoint_manifest`): MB/s of CRC-32 (the one it
uses) beside the standard library's other hashes, over bytes in memory and over a file just written (in
the page cache, as a rank's own shards are when it hashes them after a save).

    python bench/manifest_hash.py [--mb 256]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
import zlib

from nemo_lead.checkpoint_manifest import file_entry


def _rate(fn, data: bytes, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - t)
    return len(data) / best / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=256)
    args = parser.parse_args()
    data = os.urandom(args.mb << 20)
    hashes = {"crc32 (zlib)": zlib.crc32, "sha1": lambda b: hashlib.sha1(b).digest(),
              "blake2b-128": lambda b: hashlib.blake2b(b, digest_size=16).digest(),
              "sha256": lambda b: hashlib.sha256(b).digest()}
    for name, fn in hashes.items():
        print(f"{name:<14} in memory: {_rate(fn, data):7.0f} MB/s")
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR")) as f:
        f.write(data)
        f.flush()
        best = min(_timed(file_entry, f.name) for _ in range(3))
        print(f"{'file_entry':<14} page cache: {len(data) / best / 1e6:7.0f} MB/s (CRC-32 in 8 MiB reads)")


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
