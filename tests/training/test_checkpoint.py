"""Checkpoints: atomic folders and listing (in process); saved at TP1 x DP2, loaded at TP2 and PP2 with the
same eval loss and bit-identical weights (2 ranks, gloo)."""

import json

import pytest
import torch
from distributed import run_distributed

from nemo_lead.checkpoint.meta import (
    checkpoint_dir,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint_meta,
)
from nemo_lead.models import write_tiny_model
from nemo_lead.models.weights_checkpoint import atomic_dir


def test_checkpoint_folders_are_atomic_and_listed(tmp_path):
    assert checkpoint_dir(tmp_path, 100) == tmp_path / "checkpoints" / "step_000100"
    assert latest_checkpoint(tmp_path) is None
    for step in (5, 40):
        with atomic_dir(checkpoint_dir(tmp_path, step)) as tmp:
            assert tmp.name == f".tmp-step_{step:06d}"
            (tmp / "meta.json").write_text("{}")
    with pytest.raises(RuntimeError):  # a save that dies leaves no step folder
        with atomic_dir(checkpoint_dir(tmp_path, 60)) as tmp:
            (tmp / "meta.json").write_text("{}")
            raise RuntimeError("killed mid-save")
    (tmp_path / "checkpoints" / "step_000070").mkdir()  # no meta.json: incomplete, ignored
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5, 40]
    assert latest_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 40)
    with atomic_dir(checkpoint_dir(tmp_path, 40)) as tmp:  # re-saving a step replaces it whole
        (tmp / "meta.json").write_text('{"new": 1}')
    assert json.loads((checkpoint_dir(tmp_path, 40) / "meta.json").read_text()) == {"new": 1}
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        read_checkpoint_meta(tmp_path / "checkpoints" / "step_000070")


def _eval_loss(model, ids):
    from nemo_lead.models import forward_logits

    logits = forward_logits(model, ids)
    if logits is None:
        return None
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()


def _checkpoint_job(hf_dir, ckpt):
    from nemo_lead.models import HFReader, build_gpt, export_hf_weights, load_hf_weights
    from nemo_lead.models.weights_checkpoint import load_checkpoint, writing_checkpoint
    from nemo_lead.parallel import destroy_parallel, init_parallel

    ids = torch.randint(0, 102, (2, 20), generator=torch.Generator().manual_seed(1))
    out = {}
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    info = init_parallel(1, 1)  # DP2: the fully parallel strategy splits the writing over both ranks
    gpt = build_gpt(hf_dir, info)
    model = DistributedDataParallel(gpt.config, DistributedDataParallelConfig(), gpt)  # as training wraps it
    load_hf_weights(model, hf_dir)
    out["saved"] = _eval_loss(model, ids)
    import torch.distributed as dist

    # a part written by every rank inside the atomic save (as the training state writes its optimizer)
    with writing_checkpoint(ckpt, model, step=7, tokenizer_dir=hf_dir, extra_meta={"loop": {"consumed": 3}},
                            parts=("extra",)) as folder:
        (folder / "extra" / f"rank{dist.get_rank()}.txt").write_text("x")
    destroy_parallel(keep_process_group=True)
    reader = HFReader(hf_dir)
    for tp, pp in ((2, 1), (1, 2)):
        info = init_parallel(tp, pp)
        model = build_gpt(hf_dir, info)  # random init, then the checkpoint
        before = _eval_loss(model, ids)
        meta = load_checkpoint(ckpt, model)
        exact = all(torch.equal(t, reader.read(n)) for n, t in export_hf_weights(model))
        out[(tp, pp)] = (before, _eval_loss(model, ids), exact, meta["step"], meta["saved_layout"])
        try:
            load_checkpoint(ckpt, build_gpt(hf_dir, info, vocab_divisible_by=256))
        except ValueError as e:
            out[(tp, pp, "error")] = str(e)
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_checkpoint_reshards_to_tp2_and_pp2(tmp_path):
    hf = write_tiny_model(tmp_path / "hf", "qwen2", seed=21, init_std=0.1)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000007"
    r0, r1 = run_distributed(_checkpoint_job, 2, str(hf), str(ckpt))
    saved = r0["saved"]
    assert saved == r1["saved"] and saved > 0
    for tp, pp in ((2, 1), (1, 2)):
        for rank, r in enumerate((r0, r1)):
            before, after, exact, step, layout = r[(tp, pp)]
            assert exact and step == 7 and layout == {"tp": 1, "pp": 1, "dp": 2}
            assert "vocab_divisible_by=128" in r[(tp, pp, "error")]
            if pp == 2 and rank == 0:
                assert after is None
                continue
            assert after == pytest.approx(saved, abs=1e-6)
            assert abs(before - saved) > 1e-3  # the load changed something: random init gives another loss
    meta = read_checkpoint_meta(ckpt)
    assert meta["hf_config"]["model_type"] == "qwen2" and meta["padded_vocab_size"] == 128
    assert meta["parts"] == ["model", "extra"] and meta["loop"] == {"consumed": 3}
    assert sorted(p.name for p in (ckpt / "extra").iterdir()) == ["rank0.txt", "rank1.txt"]
    assert (ckpt / "tokenizer" / "tokenizer.json").is_file() and not (ckpt.parent / ".tmp-step_000007").exists()
