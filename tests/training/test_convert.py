"""`nemo-lead convert` both ways, as a user runs it: HF -> checkpoint at TP2 (the command re-launches itself on
2 ranks) -> HF at TP1 with sharded output; tensors bit-identical, config and tokenizer carried over."""

import json
import subprocess

import cli_process
import torch

from nemo_lead.checkpoint.meta import read_checkpoint_meta
from nemo_lead.cli import main
from nemo_lead.models import HFReader, load_tokenizer, write_tiny_model


def _convert(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return cli_process.run(["convert", *args], timeout=timeout)


def test_convert_round_trip_through_tp2_checkpoint(tmp_path):
    hf = write_tiny_model(tmp_path / "hf", "qwen2", seed=31, init_std=0.1, max_shard_size="40KB")
    ckpt, back = tmp_path / "ckpt", tmp_path / "back"
    to_ckpt = _convert("--from-hf", str(hf), "--out", str(ckpt), "--tp", "2")
    assert to_ckpt.returncode == 0, to_ckpt.stderr[-3000:]
    assert "starting 2 local ranks" in to_ckpt.stdout
    assert read_checkpoint_meta(ckpt)["saved_layout"] == {"tp": 2, "pp": 1, "dp": 1}

    to_hf = _convert("--from-ckpt", str(ckpt), "--to-hf", str(back), "max_shard_mb=0.03")
    assert to_hf.returncode == 0, to_hf.stderr[-3000:]
    original, converted = HFReader(hf), HFReader(back)
    assert sorted(original.file_of) == sorted(converted.file_of)
    assert all(torch.equal(original.read(n), converted.read(n)) for n in original.file_of)
    assert len(set(converted.file_of.values())) > 1  # written as several shards with an index
    assert json.loads((back / "config.json").read_text()) == json.loads((hf / "config.json").read_text())
    text = "<think>\n2+2=4</think>"
    assert load_tokenizer(back)(text)["input_ids"] == load_tokenizer(hf)(text)["input_ids"]


def test_convert_refuses_bad_requests_before_starting(tmp_path, capsys):
    hf = write_tiny_model(tmp_path / "hf", "qwen2")
    assert main(["convert", "--from-hf", str(hf), "--out", str(tmp_path / "c"), "--tp", "3"]) == 2
    assert "tp 3 does not divide the 4 attention heads" in capsys.readouterr().err
    assert main(["convert", "--out", str(tmp_path / "c")]) == 2
    assert "give exactly one of from_hf" in capsys.readouterr().err
    assert main(["convert", "--from-ckpt", str(tmp_path), "--to-hf", str(tmp_path / "o")]) == 2
    assert "not a complete checkpoint" in capsys.readouterr().err
