"""`nemo-lead rl` at TP2 against TP1, and offload during generation against none: the same run.

- TP2 equals TP1 to tolerance (the same sampled tokens, rewards and advantages; losses to 1e-4); kill -9 and
  the same command again at TP2 equal the uninterrupted TP2 run.
- Offloading the optimizer state and gradient buffers during generation gives the same run and weights.
"""

from __future__ import annotations

import pytest
from loops_common import close_to, interrupt, read_lines, rl_args, run_cli, strip_timing

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rl_tp2(data, sft_run):
    root, _ = data
    out = root / "rl_tp2"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["--tp", "2"]))
    assert res.returncode == 0, res.stderr
    return out


def test_rl_at_tp2_matches_tp1(rl_tp2, rl_run):
    tp2, tp1 = strip_timing(read_lines(rl_tp2)), strip_timing(read_lines(rl_run))
    assert [r["step"] for r in tp2] == list(range(1, 7))
    for a, b in zip(tp2, tp1):  # the same sampled tokens, rewards and advantages; losses up to float order
        assert close_to(a, b, 1e-4), (a, b)


def test_rl_resume_after_kill_at_tp2_equals_uninterrupted_tp2(data, sft_run, rl_tp2, tmp_path):
    root, _ = data
    out = tmp_path / "tp2"
    args = rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["--tp", "2"])
    interrupt(args, out, after_lines=2)
    assert len(read_lines(out)) < 6
    res = run_cli(args)
    assert res.returncode == 0, res.stderr
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        assert strip_timing(read_lines(out, name)) == strip_timing(read_lines(rl_tp2, name)), name


def test_rl_offload_during_generation_is_the_same_run(data, sft_run, rl_run, tmp_path):
    """`actor.offload_during_generation=true` (optimizer state on the host and gradient buffers freed while
    the engine generates, validation too): the same metrics, logs and rollouts, and the same final weights."""
    import torch
    from safetensors.torch import load_file

    root, _ = data
    out = tmp_path / "offload"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out,
                        extra=["actor.offload_during_generation=true"]))
    assert res.returncode == 0, res.stderr
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        assert strip_timing(read_lines(out, name)) == strip_timing(read_lines(rl_run, name)), name
    assert any(r["grad_norm"] for r in read_lines(out))  # updates happened between the offloaded generations
    weights = []
    for run in (rl_run, out):
        hf = tmp_path / f"{run.name}-hf"
        res = run_cli(["convert", "--from-ckpt", str(run / "checkpoints" / "step_000006"), "--to-hf", str(hf)])
        assert res.returncode == 0, res.stderr
        weights.append({k: v for f in sorted(hf.glob("*.safetensors")) for k, v in load_file(f).items()})
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
