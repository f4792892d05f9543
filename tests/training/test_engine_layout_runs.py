"""`nemo-lead rl` with the engine in a layout of its own (engine.tp=1 engine.pp=1 over an actor at --tp 2),
composed with a fixed lag and interrupted by kill -9; runs on CPU (fp32, gloo).

One lagged run at --tp 2 with the engine's TP1 copies (rollout.lag=1), and the serial emulation at TP1
(the same lag on one rank, the engine at the actor's layout):
- the first equals the second to the tolerance TP2 has against TP1 (1e-4), with the same sampled responses
  and the lag's staleness: the copy is rebuilt after every update, so the batch sampled ahead uses the
  weights the lag rule names;
- kill -9 at a moment of a step and the same command again equals the first exactly (logs and final
  weights): the copy is rebuilt from the restored weights, the queued batch comes back from the checkpoint;
- the split layout with two generator replicas (rollout.generator_ranks=2 over TP1) samples the serial
  emulation's responses.
"""

from __future__ import annotations

import json

import pytest
from loops_common import assert_same_logs, close_to, interrupt, read_lines, rl_args, run_cli, strip_timing

pytestmark = pytest.mark.slow
STEPS = 6
LAG = ["rollout.lag=1", "lead.rollout_correction.mode=tis"]
ENGINE_TP1 = ["--tp", "2", "engine.tp=1", "engine.pp=1"]


def _rollouts(run) -> dict[str, list[tuple[str, str]]]:
    return {f.name: [(r["response"], r["outcome"]) for r in map(json.loads, f.read_text().splitlines())]
            for f in sorted((run / "rollouts").iterdir())}


def _weights(run, tmp_path):
    """The run's final weights as HF tensors (`nemo-lead convert`)."""
    from safetensors.torch import load_file

    hf = tmp_path / f"{run.name}-hf"
    res = run_cli(["convert", "--from-ckpt", str(run / "checkpoints" / f"step_{STEPS:06d}"), "--to-hf", str(hf)])
    assert res.returncode == 0, res.stderr
    return {k: v for f in sorted(hf.glob("*.safetensors")) for k, v in load_file(f).items()}


def _rl(data, sft_run, out, extra):
    """`nemo-lead rl` from the reference SFT checkpoint into `out`, to the end; `out`."""
    res = run_cli(rl_args(data[0], sft_run / "checkpoints" / "step_000080", out, steps=STEPS, extra=extra))
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def lag_engine_tp1(data, sft_run):
    return _rl(data, sft_run, data[0] / "lag_engine_tp1", [*ENGINE_TP1, *LAG])


@pytest.fixture(scope="module")
def lag_tp1(data, sft_run):
    """The serial emulation at TP1: the same lag on one rank, the engine on the actor's modules."""
    return _rl(data, sft_run, data[0] / "lag_tp1", LAG)


def _assert_close_runs(run, ref, tol=1e-4) -> None:
    """Metrics, validation and per-problem stats to `tol`; the same responses and outcomes, step by step."""
    rows = strip_timing(read_lines(run))
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)) and any(r["grad_norm"] for r in rows)
    assert [r["lag/staleness"] for r in rows] == [min(1, t - 1) for t in range(1, STEPS + 1)]
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        got, exp = strip_timing(read_lines(run, name)), strip_timing(read_lines(ref, name))
        assert len(got) == len(exp) and all(close_to(a, b, tol) for a, b in zip(got, exp)), name
    assert _rollouts(run) == _rollouts(ref)


def test_lag_with_engine_tp1_equals_the_serial_emulation_at_tp1(lag_engine_tp1, lag_tp1):
    _assert_close_runs(lag_engine_tp1, lag_tp1)


def test_two_generator_replicas_sample_what_one_generator_does(data, sft_run, lag_tp1, tmp_path):
    """rollout.generator_ranks=2 over a TP1 actor: 1 trainer and 2 generator replicas (3 ranks), each
    replica decoding half of each batch's prompts on the streams one generator gives them, the weights sent
    to both. One generator equals the serial run bit for bit (tests/training/test_lag.py); two give its
    responses exactly, and its metrics to 1e-4 (each replica decodes a smaller batch: float order)."""
    _assert_close_runs(_rl(data, sft_run, tmp_path / "split_g2", [*LAG, "rollout.generator_ranks=2"]), lag_tp1)


def test_kill_and_resume_with_engine_tp1_equals_the_uninterrupted_run(data, sft_run, lag_engine_tp1, tmp_path):
    out = tmp_path / "resumed"
    interrupt(rl_args(data[0], sft_run / "checkpoints" / "step_000080", out, steps=STEPS, extra=[*ENGINE_TP1, *LAG]),
              out, after_lines=3)
    assert len(read_lines(out)) < STEPS
    _rl(data, sft_run, out, [*ENGINE_TP1, *LAG])  # the same command again
    assert_same_logs(out, lag_engine_tp1)
    assert _rollouts(out) == _rollouts(lag_engine_tp1)
    got, want = _weights(out, tmp_path), _weights(lag_engine_tp1, tmp_path)
    assert got.keys() == want.keys() and all(got[k].equal(want[k]) for k in want)
