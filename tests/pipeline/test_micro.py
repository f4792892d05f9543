"""`nemo-lead run` through the real stack on a tiny model (CPU, as a user runs it, one process per command):

- a two-stage micro recipe (SFT -> RL, a few steps each) killed with SIGKILL during its RL stage: the rerun
  skips the finished SFT stage (its run folder untouched) and resumes the RL stage in its folder; a third run
  skips both;
- trace distillation with that SFT model as a tiny teacher (it learned to answer 7 to everything): only
  verified responses become traces, one per problem, in the format `nemo-lead sft` reads.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import cli_process
import pytest

from nemo_lead.models import write_tiny_model

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "nemo_lead.cli"]

MICRO = """
paths: {model: MODEL, traces: TRACES, problems: PROBLEMS}
stages:
  - name: sft
    kind: sft
    actor: {model: "${paths.model}", optim: {lr: 1.0e-2, min_lr: 1.0e-3, lr_warmup_steps: 2}}
    data: {path: "${paths.traces}", max_seq_len: 64}
    prompt: &prompt {suffix: ""}
    steps: 40
    global_batch: 16
    progress: lines
    tensorboard: false
  - name: rl
    kind: rl
    actor: {model: "${stage:sft.checkpoint}", optim: {lr: 1.0e-4}}
    data: {path: "${paths.problems}"}
    prompt: *prompt
    steps: 4
    save_every: 1
    prompts_per_step: 4
    max_rounds: 1
    rollout: {n: 4, temperature: 1.0, max_tokens: 16}
    verify.workers: 1
    progress: lines
    tensorboard: false
"""
DISTILL = """
paths: {teacher: TEACHER, problems: PROBLEMS}
stages:
  - name: distill
    kind: distill
    model: "${paths.teacher}"
    data: "${paths.problems}"
    prompt: {suffix: ""}
    keep: shortest
    sampling: {n: 3, temperature: 0.7, top_p: 1.0, max_tokens: 16, seed: 7}
    verify.workers: 1
"""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(recipe: Path, out: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return cli_process.run(["run", str(recipe), "--out", str(out)], env=_env(), timeout=timeout)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """The micro recipe run once with a SIGKILL during its RL stage, then twice more (see the module doc)."""
    root = tmp_path_factory.mktemp("micro")
    model = write_tiny_model(root / "model", family="qwen2", seed=0)
    rng = random.Random(0)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(64)]
    # the teacher-to-be learns one answer for every problem: 7
    traces = _jsonl(root / "traces.jsonl", [{"id": f"t{i}", "problem": f"{a}+{b}", "response": "</think>\n\n\\boxed{7}"}
                                            for i, (a, b) in enumerate(pairs)])
    problems = _jsonl(root / "problems.jsonl", [{"id": f"p{i}", "problem": f"{a}+{b}", "answer": "7" if i % 2 else "5"}
                                                for i, (a, b) in enumerate(pairs[:16])])
    recipe = root / "micro.yaml"
    recipe.write_text(MICRO.replace("MODEL", str(model)).replace("TRACES", str(traces))
                      .replace("PROBLEMS", str(problems)))
    out = root / "out"
    proc = cli_process.CLIProcess(["run", str(recipe), "--out", str(out)], env=_env())
    try:
        metrics = out / "stages" / "rl" / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 2:
                proc.kill_group()
                break
            time.sleep(0.05)
        status = proc.wait(timeout=60)
    finally:
        proc.close()
    first = {"status": status, "sft_metrics": (out / "stages/sft/metrics.jsonl").read_bytes(),
             "state": json.loads((out / "pipeline_state.json").read_text())}
    second = _run(recipe, out)
    third = _run(recipe, out)
    return {"root": root, "out": out, "problems": problems, "first": first, "second": second, "third": third}


def test_rerun_skips_the_finished_stage_and_resumes_the_interrupted_one(micro):
    out, first, second, third = micro["out"], micro["first"], micro["second"], micro["third"]
    assert first["status"] == -signal.SIGKILL
    assert first["state"]["stages"]["sft"]["status"] == "done" and first["state"]["stages"]["rl"]["status"] == "running"
    assert second.returncode == 0, second.stderr[-3000:]
    assert "stage sft (sft): done, skipped" in second.stderr
    assert "stage rl (rl): interrupted before; resuming" in second.stderr
    assert (out / "stages/sft/metrics.jsonl").read_bytes() == first["sft_metrics"]  # SFT not touched again
    steps = [json.loads(line)["step"] for line in (out / "stages/rl/metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    state = json.loads((out / "pipeline_state.json").read_text())["stages"]
    assert state["rl"]["status"] == "done"
    assert state["rl"]["outputs"]["checkpoint"] == str((out / "stages/rl/checkpoints/step_000004").resolve())
    assert state["rl"]["outputs"]["checkpoint"] == json.loads((out / "stages/rl/done.json").read_text())["checkpoint"]
    rl_config = (out / "stages/rl/config.yaml").read_text()
    assert state["sft"]["outputs"]["checkpoint"] in rl_config  # stage 2 started from stage 1's final checkpoint
    assert third.returncode == 0 and third.stderr.count("done, skipped") == 2


def test_distillation_keeps_only_verified_traces(micro, tmp_path):
    from nemo_lead.data.traces import load_traces
    from nemo_lead.models import load_tokenizer
    from nemo_lead.verify import MathVerifier

    teacher = json.loads((micro["out"] / "pipeline_state.json").read_text())["stages"]["sft"]["outputs"]["checkpoint"]
    recipe = tmp_path / "distill.yaml"
    recipe.write_text(DISTILL.replace("TEACHER", teacher).replace("PROBLEMS", str(micro["problems"])))
    done = _run(recipe, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "out" / "stages" / "distill"
    samples = [json.loads(line) for line in (folder / "samples" / "samples.jsonl").read_text().splitlines()]
    traces = [json.loads(line) for line in (folder / "traces.jsonl").read_text().splitlines()]
    solved = {s["problem_id"] for s in samples if s["correct"]}
    assert solved and len(solved) < 16  # the teacher answers 7: it solves the problems whose answer is 7 only
    assert [t["id"] for t in traces] == [f"p{i}" for i in range(16) if f"p{i}" in solved]  # one each, in order
    for t in traces:  # the shortest correct sample of its problem
        mine = [s for s in samples if s["problem_id"] == t["id"] and s["correct"]]
        assert t["teacher_tokens"] == min(s["tokens"] for s in mine)
    verifier = MathVerifier(1, 5.0, "after_think")
    try:
        grades = verifier.grade([t["response"] for t in traces], [t["answer"] for t in traces], [True] * len(traces))
    finally:
        verifier.close()
    assert all(g.correct for g in grades)
    assert all(t["response"].startswith("<think>\n") for t in traces)  # the whole assistant text
    from nemo_lead.data import PromptConfig
    from nemo_lead.models.source import model_source

    tokenizer = load_tokenizer(model_source(teacher).tokenizer_dir)
    loaded = load_traces(str(folder / "traces.jsonl"), tokenizer, PromptConfig(suffix=""))
    assert len(loaded) == len(traces)  # the SFT loader reads them (one leading <think> dropped, as the prompt has it)
