"""The shard files' CRC-32 computed while megatron writes them (`nemo_lead.checkpoint.hashing`) and its use in
the manifest (`nemo_lead.checkpoint.manifest.entries_of_rank`): unit tests of the stream and the hook on a
stand-in module, then one rank's real dist_checkpointing saves (megatron-core 0.16: forked writer
processes; 0.19: writer threads; run this file in both environments)."""

from __future__ import annotations

import builtins
import io
import json
import types
import warnings
import zlib

import pytest
from distributed import run_distributed

from nemo_lead.checkpoint import hashing as checkpoint_hashing
from nemo_lead.checkpoint.hashing import HashingWriter, hash_writes_into, hooked_open, warn_unless_streamed
from nemo_lead.checkpoint.manifest import STREAMED_DIR, entries_of_rank, file_entry, streamed_entries


def _write_through_hook(folder, rel, chunks, module=None):
    module = module or types.ModuleType("writer")
    with hash_writes_into(folder, module):
        with module.open(folder / rel, "wb") as stream:
            for chunk in chunks:
                stream.write(chunk)
    return module


def test_the_streamed_entry_is_the_read_back_one_and_the_hook_goes_away(tmp_path):
    (tmp_path / "model").mkdir()
    chunks = [b"abc" * 1000, memoryview(bytearray(range(256)) * 40), bytearray(b"\x00" * 7)]
    module = _write_through_hook(tmp_path, "model/__0_0.distcp", chunks)
    assert "open" not in vars(module)  # the module looks `open` up in builtins again
    data = b"".join(bytes(c) for c in chunks)
    expected = {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    assert file_entry(tmp_path / "model/__0_0.distcp") == expected
    assert streamed_entries(tmp_path, 0, 1) == {"model/__0_0.distcp": expected}
    counts = {}
    assert entries_of_rank(tmp_path, 0, 1, counts) == {"model/__0_0.distcp": expected}  # the records not listed
    assert counts == {"in_write": len(data), "read_back": 0, "distcp_in_write": len(data), "distcp_read_back": 0}
    assert streamed_entries(tmp_path, 1, 2) == {}  # rank 0's file: rank 1 does not open its record


def test_the_hook_is_restored_when_the_save_fails_and_keeps_an_earlier_open(tmp_path):
    earlier = object()
    module = types.ModuleType("writer")
    module.open = earlier
    with pytest.raises(RuntimeError, match="disk gone"):
        with hash_writes_into(tmp_path, module):
            assert module.open is not earlier
            raise RuntimeError("disk gone")
    assert module.open is earlier


def test_a_failed_write_leaves_no_record(tmp_path):
    module = types.ModuleType("writer")
    with pytest.raises(OSError, match="no space"), hash_writes_into(tmp_path, module):
        with module.open(tmp_path / "__0_0.distcp", "wb") as stream:
            stream.write(b"half")
            raise OSError("no space")
    assert not (tmp_path / STREAMED_DIR).exists()


def test_other_modes_and_paths_go_to_the_real_open(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "a.bin").write_bytes(b"xy")
    open_ = hooked_open(str(tmp_path / "ckpt"))
    with open_(tmp_path / "ckpt" / "a.bin", "rb") as f, open_(tmp_path / "ckpt" / "b.bin", "ab") as g:
        assert isinstance(f, io.BufferedReader) and isinstance(g, io.BufferedWriter)
    with open_(tmp_path / "elsewhere.bin", "wb") as f:  # beside the checkpoint, not in it
        assert isinstance(f, io.BufferedWriter)
    with open_(tmp_path / "ckpt2.bin", "wb") as f:  # a sibling whose name starts like the folder's
        assert isinstance(f, io.BufferedWriter)
    with open_(tmp_path / "ckpt" / "c.bin", "wb") as f:
        assert isinstance(f, HashingWriter)


def test_a_seek_on_the_hashing_stream_raises(tmp_path):
    with builtins.open(tmp_path / "f", "wb") as raw:
        stream = HashingWriter(raw, "f", str(tmp_path / STREAMED_DIR))
        stream.write(b"12345")
        assert stream.tell() == 5 and not stream.seekable()
        with pytest.raises(io.UnsupportedOperation, match="seek on f"):
            stream.seek(0)


def test_a_file_of_another_size_than_its_record_is_read_back(tmp_path, monkeypatch):
    _write_through_hook(tmp_path, "__0_0.distcp", [b"first bytes"])
    with open(tmp_path / "__0_0.distcp", "ab") as f:  # changed after the streamed record was written
        f.write(b" and more")
    (tmp_path / "meta.json").write_text("{}")  # a file without a record
    counts = {}
    entries = entries_of_rank(tmp_path, 0, 1, counts)
    assert entries == {"__0_0.distcp": file_entry(tmp_path / "__0_0.distcp"), "meta.json": file_entry(tmp_path / "meta.json")}
    assert counts == {"in_write": 0, "read_back": 22, "distcp_in_write": 0, "distcp_read_back": 20}
    monkeypatch.setattr(checkpoint_hashing, "_warned", False)
    with pytest.warns(UserWarning, match="no dist_checkpointing shard file was hashed while written"):
        warn_unless_streamed(tmp_path, counts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unless_streamed(tmp_path, counts)  # once per process
        warn_unless_streamed(tmp_path, {**counts, "distcp_in_write": 1})


def test_an_unreadable_record_means_a_read_back(tmp_path):
    _write_through_hook(tmp_path, "__0_0.distcp", [b"bytes"])
    record = next((tmp_path / STREAMED_DIR).glob("*.json"))
    record.write_text(json.dumps({"size": 5}))  # no crc32
    assert streamed_entries(tmp_path, 0, 1) == {}


# ----------------------------------------------------------------------------- real saves, one rank
def _save_job(hf_dir: str, root: str) -> dict:
    from pathlib import Path

    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    from nemo_lead.checkpoint import manifest as checkpoint_manifest
    from nemo_lead.models import build_gpt
    from nemo_lead.models.weights_checkpoint import save_checkpoint, save_strategy
    from nemo_lead.parallel import destroy_parallel, init_parallel

    root = Path(root)
    info = init_parallel(1, 1, seed=0)
    gpt = build_gpt(hf_dir, info)
    out = {}
    # the hook alone around a model save: the records against the files read back
    (root / "bare" / "model").mkdir(parents=True)
    with hash_writes_into(root / "bare"):
        dist_checkpointing.save({"model": gpt.sharded_state_dict()}, str(root / "bare" / "model"),
                                sharded_strategy=save_strategy())
    out["hook_left"] = "open" in vars(filesystem_async)
    out["streamed"] = streamed_entries(root / "bare", 0, 1)
    out["read_back"] = {rel: file_entry(root / "bare" / rel) for rel in out["streamed"]}
    out["distcp"] = sorted(p.relative_to(root / "bare").as_posix() for p in (root / "bare").rglob("*.distcp"))
    counts = {}
    entries_of_rank(root / "bare", 0, 1, counts)
    out["counts"] = counts
    # a save whose writer fails (a folder where its shard file goes): the hook is gone afterwards too
    (root / "fail" / "__0_0.distcp").mkdir(parents=True)
    try:
        with hash_writes_into(root / "fail"):
            dist_checkpointing.save({"model": gpt.sharded_state_dict()}, str(root / "fail"))
    except BaseException as e:  # torch's CheckpointException is a BaseException
        out["failed"] = str(e)
    out["hook_left_after_failure"] = "open" in vars(filesystem_async)
    # a whole checkpoint: no .distcp file is read back for its manifest, no record is left in it
    read_back = []
    real_file_entry = checkpoint_manifest.file_entry

    def spy(path):
        read_back.append(Path(path).name)
        return real_file_entry(path)

    checkpoint_manifest.file_entry = spy
    try:
        save_checkpoint(root / "ckpt", gpt, step=1, tokenizer_dir=hf_dir)
    finally:
        checkpoint_manifest.file_entry = real_file_entry
    out["ckpt_read_back"] = read_back
    out["ckpt_records_left"] = (root / "ckpt" / STREAMED_DIR).exists()
    out["ckpt_problems"] = checkpoint_manifest.check_files(root / "ckpt")
    manifest = checkpoint_manifest.read_manifest(root / "ckpt")
    out["ckpt_manifest_distcp"] = {rel: e for rel, e in manifest.items() if rel.endswith(".distcp")}
    out["ckpt_read_back_distcp"] = {rel: file_entry(root / "ckpt" / rel) for rel in out["ckpt_manifest_distcp"]}
    destroy_parallel()
    return out


def test_a_real_save_hashes_every_shard_byte_while_writing(tmp_path):
    from nemo_lead.models import write_tiny_model

    hf_dir = write_tiny_model(tmp_path / "hf", family="qwen2", seed=0)
    out = run_distributed(_save_job, 1, str(hf_dir), str(tmp_path))[0]
    assert not out["hook_left"] and not out["hook_left_after_failure"]
    assert "IsADirectoryError" in out["failed"] or "Is a directory" in out["failed"]  # 0.19 / 0.16 wording
    assert out["distcp"] and sorted(out["streamed"]) == out["distcp"]  # a record for each shard, no other file
    assert out["streamed"] == out["read_back"]
    shard_bytes = sum(e["size"] for e in out["read_back"].values())
    assert out["counts"]["distcp_in_write"] == shard_bytes > 0 and out["counts"]["distcp_read_back"] == 0
    assert not any(name.endswith(".distcp") for name in out["ckpt_read_back"])
    assert "meta.json" in out["ckpt_read_back"]  # nemo-lead's own small files are read back
    assert not out["ckpt_records_left"] and out["ckpt_problems"] == []
    assert out["ckpt_manifest_distcp"] and out["ckpt_manifest_distcp"] == out["ckpt_read_back_distcp"]
