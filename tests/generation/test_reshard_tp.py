"""Resharding from actor TP a to engine TP b (b dividing a, `nemo_lead.generation.megatron_engine.reshard.engine_tp_shards`),
in-process on a tiny Qwen2 with 4 KV groups: every engine shard equals the slice of the HF tensors it
should hold (fused QKV split back into q / k / v by query group, fc1 into gate / up, vocabulary rows with
the padding, row-parallel columns), and equals the shard a TP b model loads from the same HF folder."""

import dataclasses

import pytest
import torch

from nemo_lead.generation.megatron_engine.reshard import engine_tp_shards
from nemo_lead.models import arch_from_hf, read_hf_config, write_tiny_model
from nemo_lead.models.hf_config import padded_vocab_size
from nemo_lead.models.hf_weights import (
    COLUMN,
    FC1,
    QKV,
    REPLICATED,
    ROW,
    VOCAB,
    HFReader,
    _shard_from_hf,
    _split_qkv,
    mapping,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = write_tiny_model(tmp_path_factory.mktemp("reshard") / "qwen2", "qwen2", seed=3, init_std=0.1,
                              num_attention_heads=8, num_key_value_heads=4)
    return folder, arch_from_hf(read_hf_config(folder)), HFReader(folder)


def _hf_slice(item, arch, reader, j: int, b: int, rows_total: int):
    """What engine rank j of b should hold, cut from the HF tensors here (not through the loader)."""
    full = [reader.read(n) for n in item.hf]
    if item.kind == REPLICATED:
        return full[0]
    if item.kind == ROW:
        return full[0].chunk(b, dim=1)[j]
    if item.kind == VOCAB:
        padded = torch.zeros((rows_total, arch.hidden_size), dtype=full[0].dtype)
        padded[: arch.vocab_size] = full[0]
        return padded.chunk(b)[j]
    if item.kind == FC1:
        return torch.cat([t.chunk(b)[j] for t in full])  # [gate_j; up_j]
    assert item.kind == QKV  # q / k / v of this rank's query groups
    return tuple(t.chunk(b)[j] for t in full)


@pytest.mark.parametrize(("a", "b"), [(4, 2), (4, 1), (2, 1), (4, 4)])
def test_engine_shards_hold_the_slices_of_the_hf_tensors(tiny, a, b):
    folder, arch, reader = tiny
    rows_total = padded_vocab_size(arch.vocab_size)
    group_arch = dataclasses.replace(arch, num_heads=arch.num_heads // b, num_kv_heads=arch.num_kv_heads // b)
    kinds = set()
    for item in mapping(arch):
        pieces = [_shard_from_hf(item, arch, reader, r, a, rows_total) for r in range(a)]
        shards = engine_tp_shards(item.kind, pieces, b)
        assert len(shards) == b
        for j, shard in enumerate(shards):
            want = _hf_slice(item, arch, reader, j, b, rows_total)
            got = _split_qkv(shard, group_arch) if item.kind == QKV else (shard,)
            want = want if item.kind == QKV else (want,)
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), (item.megatron[0], j)
            # and the shard a model at TP b loads from the HF folder
            assert torch.equal(shard, _shard_from_hf(item, arch, reader, j, b, rows_total)), (item.megatron[0], j)
        kinds.add(item.kind)
    assert kinds == {REPLICATED, ROW, QKV, FC1, VOCAB}  # (Qwen2 has no other column-parallel weight than fc1 / QKV)


def test_an_engine_tp_that_does_not_divide_the_actors_is_an_error_naming_both():
    pieces = [torch.zeros(2, 2)] * 4
    for bad in (3, 0, 8):
        with pytest.raises(ValueError, match=rf"engine.tp={bad} must divide the actor's TP \(4 shards\)"):
            engine_tp_shards(COLUMN, pieces, bad)
