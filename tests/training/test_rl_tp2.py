"""`nemo-lead rl` at TP2 against TP1, and offload during generation against none: the same run.

- TP2 equals TP1 to tolerance (the same sampled tokens, rewards and advantages; losses to 1e-4); kill -9 and
  the same command again at TP2 equal the uninterrupted TP2 run.
- Offloading the optimizer state and gradient buffers during generation gives the same run and weights.
- engine.tp=1 at TP2 (a TP1 copy of the weights per rank, two engine replicas, offload on) equals the TP2 run.
"""

from __future__ import annotations

import json

import pytest
from loops_common import assert_same_logs, close_to, interrupt, read_lines, rl_args, run_cli, strip_timing

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


def test_rl_engine_tp1_replicas_over_a_tp2_actor_match_the_tp2_run(data, sft_run, rl_tp2, tmp_path):
    """engine.tp=1 at --tp 2: each rank decodes half of each step's prompts on its own TP1 copy of the
    weights, rebuilt after every update (with offload on: freed between generations, rebuilt in the
    offloaded window); the same sampled tokens as the engine at the actor's layout, so the run equals the
    TP2 run to the tolerance TP2 has against TP1."""
    root, _ = data
    out = tmp_path / "engine_tp1"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out,
                          extra=["--tp", "2", "engine.tp=1", "engine.pp=1", "actor.offload_during_generation=true"]))
    assert res.returncode == 0, res.stderr
    rows, tp2 = strip_timing(read_lines(out)), strip_timing(read_lines(rl_tp2))
    assert [r["step"] for r in rows] == list(range(1, 7)) and any(r["grad_norm"] for r in rows)
    for a, b in zip(rows, tp2):
        assert close_to(a, b, 1e-4), (a, b)
        # the copy holds the actor's current weights (None: a step whose advantages are all 0 forwarded nothing)
        assert a["mismatch/logprob_abs_mean"] is None or a["mismatch/logprob_abs_mean"] < 1e-4
    for name in ("val.jsonl", "problem_stats.jsonl"):
        got, want = strip_timing(read_lines(out, name)), strip_timing(read_lines(rl_tp2, name))
        assert len(got) == len(want) and all(close_to(a, b, 1e-4) for a, b in zip(got, want)), name
    for f in sorted((rl_tp2 / "rollouts").iterdir()):  # the same responses, rewards, outcomes
        got = [json.loads(x) for x in (out / "rollouts" / f.name).read_text().splitlines()]
        want = [json.loads(x) for x in f.read_text().splitlines()]
        assert [(g["response"], g["outcome"]) for g in got] == [(w["response"], w["outcome"]) for w in want], f.name


def test_rl_resume_after_kill_at_tp2_equals_uninterrupted_tp2(data, sft_run, rl_tp2, tmp_path):
    root, _ = data
    out = tmp_path / "tp2"
    args = rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["--tp", "2"])
    interrupt(args, out, after_lines=2)
    assert len(read_lines(out)) < 6
    res = run_cli(args)
    assert res.returncode == 0, res.stderr
    assert_same_logs(out, rl_tp2)


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
    assert_same_logs(out, rl_run)
    assert any(r["grad_norm"] for r in read_lines(out))  # updates happened between the offloaded generations
    weights = []
    for run in (rl_run, out):
        hf = tmp_path / f"{run.name}-hf"
        res = run_cli(["convert", "--from-ckpt", str(run / "checkpoints" / "step_000006"), "--to-hf", str(hf)])
        assert res.returncode == 0, res.stderr
        weights.append({k: v for f in sorted(hf.glob("*.safetensors")) for k, v in load_file(f).items()})
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
