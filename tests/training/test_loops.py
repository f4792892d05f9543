"""`nemo-lead sft` end to end on a tiny model (CPU, gloo), as a user runs it, and what the loops share.

- SFT lowers the loss on a small trace set (and writes the run folder: config, metrics, TensorBoard, checkpoints,
  done.json); the RL runs (test_rl_loop.py, test_rl_tp2.py) start from its checkpoint.
- A lost output pipe: the step finishes, a checkpoint is written, exit 0 (kill -9, stop signals and the job's
  end, each resumed to an uninterrupted run: test_stop_signals.py).
- A start that failed does not bind the folder; bad inputs name the file, line or setting.
- One RL update raises the log-prob of a correct response and lowers a wrong one's (the advantage sign).
- A NaN loss stops the run with exit 1 and keeps the last good checkpoint; kill -9 leaves no helper process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loops_common import (
    CLI,
    RL_ARGS,
    cli_env,
    folder_size,
    processes_with,
    read_lines,
    run_cli,
    sft_args,
    strip_timing,
)

from nemo_lead.models import write_tiny_model

pytestmark = pytest.mark.slow


def test_sft_learns_and_writes_its_run_folder(sft_run):
    rows = read_lines(sft_run)
    assert [r["step"] for r in rows] == list(range(1, 81)) and list(rows[0])[0] == "step"
    assert rows[-1]["loss"] < 0.5 * rows[0]["loss"]
    assert rows[-1]["val/loss"] < 0.5 * rows[3]["val/loss"]
    for key in ("loss", "lr", "grad_norm", "tokens", "time/step"):
        assert key in rows[0]
    done = json.loads((sft_run / "done.json").read_text())
    assert done["step"] == 80 and Path(done["checkpoint"]).name == "step_000080"
    assert sorted(p.name for p in (sft_run / "checkpoints").iterdir()) == ["step_000040", "step_000080"]
    assert list((sft_run / "tb").glob("events.out.tfevents.*")) and (sft_run / "config.yaml").is_file()
    assert json.loads((sft_run / "data.json").read_text())["train_traces"] == 180


def test_sft_final_checkpoint_weights_only(data, tmp_path, capsys):
    """final_checkpoint=weights: the last checkpoint holds the model and tokenizer only (about a third of a full
    fp32 one: Adam's two moments go), evaluates like any; a rerun of the finished run trains nothing; extending
    it continues from the last full checkpoint, and without one says why it cannot."""
    import shutil

    from nemo_lead.checkpoint.meta import read_checkpoint_meta
    from nemo_lead.cli import main

    root, model = data
    out = tmp_path / "weights"
    args = sft_args(root, model, out, steps=8, extra=["final_checkpoint=weights"])
    res = run_cli(args)
    assert res.returncode == 0, res.stderr
    full, final = out / "checkpoints" / "step_000004", out / "checkpoints" / "step_000008"
    assert sorted(p.name for p in full.iterdir()) == ["manifest.json", "meta.json", "model", "optim", "rng", "tokenizer"]
    assert sorted(p.name for p in final.iterdir()) == ["manifest.json", "meta.json", "model", "tokenizer"]
    assert read_checkpoint_meta(final)["parts"] == ["model"] and read_checkpoint_meta(final)["prompt"]["suffix"] == ""
    assert 2.5 * folder_size(final / "model") < folder_size(full) < 3.5 * folder_size(final / "model")  # Adam: two moments per weight
    assert json.loads((out / "done.json").read_text())["checkpoint"] == str(final)
    assert main(["generate", "--model", str(final), 'prompts=["1+2"]', "--max-tokens", "4", "--out",
                 str(tmp_path / "g.jsonl")]) == 0, capsys.readouterr().err
    first = strip_timing(read_lines(out))
    res = run_cli(args)  # finished: nothing to train, the same logs
    assert res.returncode == 0 and "resuming from" in res.stderr and strip_timing(read_lines(out)) == first
    res = run_cli(sft_args(root, model, out, steps=10, extra=["final_checkpoint=weights"]))
    assert res.returncode == 0 and f"resuming from {full}" in res.stderr, res.stderr
    rows = strip_timing(read_lines(out))
    assert [r["step"] for r in rows] == list(range(1, 11)) and rows[:4] == first[:4]
    assert read_checkpoint_meta(out / "checkpoints" / "step_000010")["parts"] == ["model"]
    shutil.rmtree(out / "checkpoints" / "step_000008")  # as keep_last=1 leaves it: the weights-only one alone
    res = run_cli(sft_args(root, model, out, steps=12, extra=["final_checkpoint=weights"]))
    assert res.returncode == 2 and "holds the weights only (final_checkpoint=weights)" in res.stderr


def test_a_lost_output_pipe_checkpoints_and_exits_0(data, tmp_path):
    """`nemo-lead sft ... 2>&1 | head -n 3`: the reader goes away; the run checkpoints the step and stops."""
    root, model = data
    out = tmp_path / "piped"
    proc = subprocess.Popen([*CLI, *sft_args(root, model, out, steps=400, extra=["--save-every", "0"])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
    try:
        lines = 0
        while lines < 3:  # what `head -n 3` reads before it exits: the start-up lines
            assert proc.stderr.readline(), "the run ended before its third line"
            lines += 1
        proc.stderr.close()
        assert proc.wait(timeout=240) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    steps = [int(p.name.split("_")[1]) for p in (out / "checkpoints").iterdir()]
    assert len(steps) == 1 and 0 < steps[0] < 400 and not (out / "done.json").exists()
    assert read_lines(out)[-1]["step"] == steps[0]


def test_a_failed_start_does_not_lock_the_run_folder(data, tmp_path):
    """The settings of a folder bind once it holds a step: a start that failed on a bad model, then the
    fixed command into the same --out."""
    root, model = data
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    (weightless / "config.json").write_text((model / "config.json").read_text())
    for f in model.iterdir():
        if f.name.startswith("token") or f.name.endswith(".jinja"):
            (weightless / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "sft"
    res = run_cli(sft_args(root, weightless, out, steps=2))
    assert res.returncode != 0 and (out / "config.yaml").is_file()
    res = run_cli(sft_args(root, model, out, steps=2))
    assert res.returncode == 0, res.stderr
    assert [r["step"] for r in read_lines(out)] == [1, 2]


def test_bad_inputs_name_the_file_line_or_setting(data, tmp_path):
    root, model = data
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "2+2"}\n')
    res = run_cli(["rl", "--model", str(model), "--data", str(bad), "--out", str(tmp_path / "r"), "--steps", "1"])
    assert res.returncode == 2 and f"{bad}:2" in res.stderr
    other = write_tiny_model(tmp_path / "other", seed=0, extra_tokens=["\\boxed{", "<step>"])
    res = run_cli(["sft", "--model", str(model), "--data", str(root / "traces.jsonl"), "--out", str(tmp_path / "s"),
                "--steps", "1", f"tokenizer={other}"])
    assert res.returncode == 2 and "vocabulary has 102 tokens but the tokenizer has 104" in res.stderr


# ----------------------------------------------------------------------------- in-process (one rank)
def _advantage_sign_job(model: str) -> tuple[list[float], list[float]]:
    """One update on two groups: per group a correct short response and a wrong one; their summed log-probs
    before and after."""
    import torch

    from nemo_lead.algorithms import LeadConfig, Outcome
    from nemo_lead.generation import Rollout
    from nemo_lead.models import load_tokenizer
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor, compute_logprobs
    from nemo_lead.training.rl.loop import (
        assign_advantages,
        old_logprobs,
        old_logprobs_from_update,
        update_policy,
    )
    from nemo_lead.training.rl.rollouts import Group, flat_tensors, training_batch

    tok = load_tokenizer(model)
    init_parallel(1, 1, seed=0)
    actor = build_actor(ActorConfig(model=model, optim={"lr": 1e-3, "clip_grad": 0.0, "weight_decay": 0.0}))
    lead = LeadConfig.paper()

    class S:  # the slice of RLState these phases read
        cfg = type("C", (), {"lead": lead, "rollout": type("R", (), {"temperature": 1.0, "lag": 0})(), "minibatches": 1,
                             "ppo_epochs": 1, "old_logprobs": "auto",
                             "skip_zero_advantage": None})()
        run = type("Run", (), {"actor": actor})()

    groups = []
    for a, b in ((3, 4), (2, 5)):
        prompt = tok(f"<|user|>{a}+{b}<|assistant|><think>\n")["input_ids"]
        texts = [f"{a}+{b}={a + b}\n</think>\n\n\\boxed{{{a + b}}}", f"hmm, maybe {a * b}?\n</think>\n\n\\boxed{{{a * b}}}"]
        outs = [Outcome.CORRECT, Outcome.WRONG]
        rolls = [Rollout(0, i, tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id], [0.0], [0.0], "stop")
                 for i, t in enumerate(texts)]
        groups.append(Group(problem=None, prompt_ids=prompt, rollouts=rolls, texts=texts, outcomes=[int(o) for o in outs]))
    from nemo_lead.algorithms import shape_rewards

    outcome, lengths, index = flat_tensors(groups)
    rewards = shape_rewards(outcome, lengths, index, lead)
    for i, g in enumerate(groups):
        g.rewards, g.keep = rewards[index == i], torch.ones(2, dtype=torch.bool)
    assign_advantages(S, groups, groups)
    batch, _ = training_batch(groups)
    for r, lp in zip([r for g in groups for r in g.rollouts], compute_logprobs(actor, batch)):
        r.policy_logprobs = lp.tolist()
    before = [float(x.sum()) for x in compute_logprobs(actor, batch)]
    batch, _ = old_logprobs(S, batch, [r.policy_logprobs for g in groups for r in g.rollouts])
    update_policy(S, batch, on_policy=old_logprobs_from_update(S.cfg))
    after = [float(x.sum()) for x in compute_logprobs(actor, batch)]
    adv = [float(a) for g in groups for a in g.advantages]
    destroy_parallel()
    return before, after, adv


def test_one_update_follows_the_advantage_sign(data):
    from distributed import run_distributed

    _, model = data
    before, after, adv = run_distributed(_advantage_sign_job, 1, str(model))[0]
    assert [a > 0 for a in adv] == [True, False, True, False]
    for b, a, sign in zip(before, after, adv):
        assert (a - b) * sign > 0, (before, after, adv)


def _nan_job(root: str, ckpt: str, out: str) -> str:
    import nemo_lead.training.rl.loop as rl_mod
    from nemo_lead.cli import resolve_config
    from nemo_lead.parallel.local import JobError

    real = rl_mod.policy_train_step  # the name the RL step calls
    calls = []

    def poisoned(*args, **kwargs):
        m = real(*args, **kwargs)
        calls.append(1)
        return {**m, "loss": float("nan")} if len(calls) == 3 else m

    rl_mod.policy_train_step = poisoned
    cfg = resolve_config("rl", [], [f"actor.model={ckpt}", f"data.path={root}/problems.jsonl", f"out={out}", "steps=5",
                                    "save_every=2", "prompts_per_step=4", "rollout.n=4", "rollout.max_tokens=32",
                                    "actor.optim.lr=2e-4", "rollout.temperature=1.0", "progress=none", "prompt.suffix="])
    try:
        rl_mod.rl_job(cfg)
    except JobError as e:
        return str(e)
    return "no error"


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(data, sft_run, tmp_path):
    from distributed import run_distributed

    root, _ = data
    out = tmp_path / "nan"
    msg = run_distributed(_nan_job, 1, str(root), str(sft_run / "checkpoints" / "step_000080"), str(out))[0]
    assert "step 3: loss = nan" in msg and "last good checkpoint (step 2)" in msg
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000002"]
    assert [r["step"] for r in read_lines(out)] == [1, 2] and not (out / "done.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_kill_9_leaves_no_helper_process(data, tmp_path):
    """Verifier workers, the checkpoint writer's queue server and its writer processes die with a rank
    killed by SIGKILL (which cannot clean up)."""
    root, model = data
    marker = f"NEMO_LEAD_TEST_MARKER={os.getpid()}-{time.monotonic_ns()}"
    name, value = marker.split("=")
    out = tmp_path / "rl"
    args = ["rl", "--model", str(model), "--data", str(root / "problems.jsonl"), "--out", str(out), "--steps", "50",
            "--save-every", "1", *RL_ARGS]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**cli_env(), name: value})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not list(out.glob("checkpoints/step_*")):
            time.sleep(0.05)
        helpers = [p for p in processes_with(marker) if p != proc.pid]
        assert proc.poll() is None and len(helpers) >= 3, helpers  # two graders and the queue server at least
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 20
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(marker) == []
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
