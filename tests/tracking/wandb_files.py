"""Reading back what W&B writes in offline mode (RUN/wandb/offline-run-*/run-<id>.wandb): a log of protobuf
records in 32 KiB blocks, each record framed by a 7-byte header (checksum, length, type), after a 7-byte file
header. The tests read the run's id and config, its history rows and its table files from it."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    folder: Path
    run_id: str = ""
    project: str = ""
    group: str = ""
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)

    def table(self, key: str) -> dict:
        """The last logged W&B table `key` ({"columns", "data"}), from its file in files/."""
        rows = [h for h in self.history if f"{key}/path" in h]
        assert rows, f"no table {key!r} in {self.folder}"
        return json.loads((self.folder / "files" / rows[-1][f"{key}/path"]).read_text())


def _records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, out, buf = HEADER, [], b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0 and length == 0:  # the block's zero padding
            pos += room
            continue
        buf += data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            out.append(buf)
            buf = b""
    return out


def read_offline_runs(wandb_dir: Path) -> list[OfflineRun]:
    """Every offline run under `wandb_dir`, oldest first."""
    from wandb.proto import wandb_internal_pb2 as pb  # the tests that call this skip without wandb

    runs = []
    for folder in sorted(Path(wandb_dir).glob("offline-run-*")):
        run = OfflineRun(folder=folder)
        for raw in _records(next(folder.glob("run-*.wandb"))):
            record = pb.Record()
            record.ParseFromString(raw)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.run_id, run.project, run.group = record.run.run_id, record.run.project, record.run.run_group
                run.config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif kind == "config":
                run.config.update({i.key: json.loads(i.value_json) for i in record.config.update})
            elif kind == "history":
                run.history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                    for i in record.history.item})
        runs.append(run)
    return runs
