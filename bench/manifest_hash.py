"""What the checkpoint manifest's hash costs (`nemo_lead.checkpoint.manifest`): MB/s of CRC-32 (the one it
uses) beside the standard library's other hashes (and xxhash's, where that package is installed), over bytes
in memory and over a file just written (in the page cache, as a rank's own shards are when it hashes them
after a save), the seconds that read-back adds to one save of a rank's share of a checkpoint, and what
hashing while writing (`nemo_lead.checkpoint.hashing.HashingWriter`, how the shards are hashed since
2026-12-02) costs beside a plain write of the same bytes (page cache, no fsync: the worst case for the ratio).

    python bench/manifest_hash.py [--mb 256] [--checkpoint-gib 193 --ranks 8]

193 GiB is `nemo-lead plan lead-14b --gpus 8`'s "checkpoint per save" (R1-Distill-Qwen-14B, bf16 weights,
fp32 master weights and Adam moments), saved by 8 ranks.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
import zlib

from nemo_lead.checkpoint.hashing import HashingWriter
from nemo_lead.checkpoint.manifest import file_entry

try:  # optional: not a dependency of nemo-lead (see docs/faults.md); measured when present
    import xxhash
except ImportError:
    xxhash = None


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
    parser.add_argument("--checkpoint-gib", type=float, default=193.0, help="one save's bytes (nemo-lead plan)")
    parser.add_argument("--ranks", type=int, default=8, help="the ranks that write it, each its share")
    args = parser.parse_args()
    data = os.urandom(args.mb << 20)
    hashes = {"crc32 (zlib)": zlib.crc32, "sha1": lambda b: hashlib.sha1(b).digest(),
              "blake2b-128": lambda b: hashlib.blake2b(b, digest_size=16).digest(),
              "sha256": lambda b: hashlib.sha256(b).digest()}
    if xxhash is not None:
        hashes.update({"xxh3_64": lambda b: xxhash.xxh3_64_digest(b), "xxh64": lambda b: xxhash.xxh64_digest(b)})
    for name, fn in hashes.items():
        print(f"{name:<14} in memory: {_rate(fn, data):7.0f} MB/s")
    share = args.checkpoint_gib * (1 << 30) / args.ranks
    with tempfile.NamedTemporaryFile(dir=os.environ.get("TMPDIR")) as f:
        f.write(data)
        f.flush()
        best = min(_timed(file_entry, f.name) for _ in range(3))
        rate = len(data) / best
        print(f"{'file_entry':<14} page cache: {rate / 1e6:7.0f} MB/s (CRC-32 in 8 MiB reads)")
        read = len(data) / min(_timed(_read, f.name) for _ in range(3))
        print(f"{'read alone':<14} page cache: {read / 1e6:7.0f} MB/s (the floor of any read-back)")
    print(f"read-back per save: {share / 2**30:.1f} GiB per rank ({args.checkpoint_gib:g} GiB / {args.ranks} ranks) "
          f"= {share / rate:.0f} s at this CRC-32 rate, {share / read:.0f} s for the reading alone")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        times = {False: [], True: []}
        for _ in range(4):  # interleaved, so that load from other jobs falls on both alike
            for hashing in (False, True):
                times[hashing].append(_timed(_write, tmp, data, hashing))
                os.remove(os.path.join(tmp, "shard"))
        plain, hashed = min(times[False]), min(times[True])
    print(f"{'plain write':<14} page cache: {len(data) / plain / 1e6:7.0f} MB/s (64 MiB writes)")
    print(f"{'hashing write':<14} page cache: {len(data) / hashed / 1e6:7.0f} MB/s (HashingWriter, the same writes): "
          f"{hashed / plain:.2f}x the plain write's time; per save {share * (hashed - plain) / len(data):.0f} s of CPU "
          f"per rank's writer instead of the {share / rate:.0f} s read-back")


def _read(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def _write(folder: str, data: bytes, hashing: bool) -> None:
    view = memoryview(data)
    with open(os.path.join(folder, "shard"), "wb") as raw:
        stream = HashingWriter(raw, "shard", os.path.join(folder, "records")) if hashing else raw
        for i in range(0, len(view), 64 << 20):
            stream.write(view[i:i + (64 << 20)])
        stream.close()


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
