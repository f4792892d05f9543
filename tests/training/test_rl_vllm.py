"""`nemo-lead rl engine.kind=vllm` end to end on vLLM's CPU build (the vllm leg; skipped where vLLM is not
installed, an error with NEMO_LEAD_REQUIRE_VLLM=1).

A tiny Qwen2 at hidden 128 (head size 32, which vLLM's CPU attention supports) is fine-tuned on the tiny
task, then trained with GRPO-LEAD for 4 steps with vLLM generating and token TIS against vLLM's log-probs:
- every step refits vLLM (time/refit > 0), updates happen, and the engine / trainer mismatch is measured
  and small (fp32 on both sides), the TIS weights ~1;
- kill -9 during step 3, then the same command: the run's logs and rollouts equal the uninterrupted run's
  (vLLM's CPU kernels are deterministic run to run, and every sample is seeded by (seed, step, prompt, sample)).
"""

import json
import random

import pytest
from loops_common import assert_same_logs, interrupt, problem_row, read_lines, rl_args, run_cli, sft_args
from vllm_leg import needs_vllm

from nemo_lead.models import write_tiny_model

pytestmark = [pytest.mark.slow, needs_vllm]

VLLM = ["engine.kind=vllm", "lead.rollout_correction.mode=tis", "engine.kv_cache_gib=0.25"]


@pytest.fixture(scope="module")
def vllm_task(tmp_path_factory):
    root = tmp_path_factory.mktemp("rl_vllm")
    model = write_tiny_model(root / "model", family="qwen2", seed=0, hidden_size=128)
    rng = random.Random(0)
    problems = [problem_row(rng, i) for i in range(240)]
    traces = [{**p, "response": f"{p['problem']}={p['answer']}\n</think>\n\n\\boxed{{{p['answer']}}}"} for p in problems[:200]]
    for name, rows in (("traces.jsonl", traces), ("problems.jsonl", problems[:200]), ("val.jsonl", problems[200:])):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_cli(sft_args(root, model, root / "sft", steps=120, extra=["--save-every", "120"]))
    assert res.returncode == 0, res.stderr
    return root, root / "sft" / "checkpoints" / "step_000120"


@pytest.fixture(scope="module")
def vllm_run(vllm_task):
    root, ckpt = vllm_task
    out = root / "rl_vllm"
    res = run_cli(rl_args(root, ckpt, out, steps=4, extra=VLLM), timeout=400)
    assert res.returncode == 0, res.stderr
    return out


def test_rl_with_vllm_refits_every_step_and_measures_the_mismatch(vllm_run):
    rows = read_lines(vllm_run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    trained = [r for r in rows if not r["skipped"]]
    assert trained and all(r["time/refit"] > 0 for r in trained) and any(r["grad_norm"] > 0 for r in trained)
    # steps that forwarded some response (one whose advantages are all 0 forwards nothing: its means are None)
    forwarded = [r for r in trained if r["update/skipped_zero_advantage"] < r["samples"]]
    assert forwarded
    for r in forwarded:
        assert r["mismatch/logprob_abs_mean"] < 1e-4  # vLLM samples from the actor's own weights, both fp32
        assert abs(r["rollout_correction/weight_mean"] - 1.0) < 1e-3 and r["rollout_correction/token_frac"] == 0.0
    assert 0 < sum(r["accuracy"] for r in rows) / len(rows) < 1
    assert [v["step"] for v in read_lines(vllm_run, "val.jsonl")] == [0, 3, 4]


def test_rl_with_vllm_resumes_after_kill_as_the_uninterrupted_run(vllm_task, vllm_run, tmp_path):
    root, ckpt = vllm_task
    out = tmp_path / "killed"
    args = rl_args(root, ckpt, out, steps=4, extra=VLLM)
    interrupt(args, out, after_lines=2, timeout=400)
    assert len(read_lines(out)) < 4
    res = run_cli(args, timeout=400)
    assert res.returncode == 0, res.stderr
    assert_same_logs(out, vllm_run)
    for f in sorted((vllm_run / "rollouts").iterdir()):
        assert (out / "rollouts" / f.name).read_text() == f.read_text()
