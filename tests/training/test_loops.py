"""`nemo-lead sft` and `nemo-lead rl` end to end on a tiny model (CPU, gloo), as a user runs them.

- SFT lowers the loss on a small trace set (and writes the run folder: config, metrics, TensorBoard, checkpoints,
  done.json); the RL runs start from its checkpoint, so their groups have right and wrong answers.
- kill -9 at an arbitrary moment, then the same command again: metrics.jsonl (timing keys aside), val.jsonl,
  problem_stats.jsonl and the rollout logs equal an uninterrupted run's (TP1, both commands).
- The same at TP2 for rl; TP2 equals TP1 to tolerance (the same sampled tokens, rewards and advantages;
  losses to 1e-4). SIGTERM: the step finishes, a checkpoint is written, exit 0, and the rerun completes it.
- Dynamic sampling (DAPO preset): only groups with mixed outcomes train, extra rounds fill the batch.
- A rerun with a changed setting is refused naming the key; a larger --steps extends the run.
- All groups filtered: the step is logged as skipped, the run goes on. A NaN loss stops the run with exit 1
  and keeps the last good checkpoint.
- One RL update raises the log-prob of a correct response and lowers a wrong one's (the advantage sign).
- Old log-probs from the update's own forward pass (the default) give the run a separate pass gives.
- Rollout correction (token TIS) runs end to end, logs its metrics, and leaves an on-policy run as it was.
- Offloading the optimizer state and gradient buffers during generation gives the same run and weights.
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

import pytest

from nemo_lead.models import write_tiny_model

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "nemo_lead.cli"]
PROMPT = ["prompt.suffix=''"]  # the tiny chat template alone: <|user|>3+4<|assistant|><think>\n
SFT_ARGS = ["global_batch=16", "data.max_seq_len=64", "actor.optim.lr=1e-2", "actor.optim.lr_warmup_steps=2",
            "actor.optim.min_lr=1e-3", "data.val_fraction=0.1", "val_every=4", "progress=lines", *PROMPT]
RL_ARGS = ["--prompts-per-step", "4", "--n", "4", "--max-tokens", "32", "actor.optim.lr=2e-4",
           "validation.every=3", "validation.n=2", "validation.limit=6", "rollout.temperature=1.0", "progress=lines",
           *PROMPT]


def _problem(rng: random.Random, i: int) -> dict:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return {"id": f"p{i}", "problem": f"{a}+{b}", "answer": str(a + b)}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("loops")
    model = write_tiny_model(root / "model", family="qwen2", seed=0)
    rng = random.Random(0)
    problems = [_problem(rng, i) for i in range(240)]
    traces = [{**p, "response": f"{p['problem']}={p['answer']}\n</think>\n\n\\boxed{{{p['answer']}}}"} for p in problems[:200]]
    for name, rows in (("traces.jsonl", traces), ("problems.jsonl", problems[:200]), ("val.jsonl", problems[200:])):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, model


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _run(args, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=_env())


def _metrics(run: Path, name="metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


def _strip_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("tokens_per_s", "seconds")}
            for r in rows]


def _interrupt(args, run: Path, after_lines: int, sig=signal.SIGKILL, timeout=240) -> int:
    """Start the command, send `sig` once metrics.jsonl has `after_lines` lines (at some moment of the next
    step), wait for it to end; its exit status."""
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        metrics = run / "metrics.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            lines = metrics.read_text().splitlines() if metrics.is_file() else []
            if len(lines) >= after_lines:
                # a random moment of the next step: a fraction of the last step's own time (a tiny model's
                # SFT step takes ~15 ms; a fixed delay would let the run finish first)
                try:
                    step_s = json.loads(lines[-1]).get("time/step", 0.0)
                except json.JSONDecodeError:  # the line is being written
                    step_s = 0.0
                time.sleep(random.Random(after_lines).uniform(0.0, 1.0) * step_s)
                if sig == signal.SIGKILL:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.send_signal(sig)
                break
            time.sleep(0.005)
        return proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # rank processes a killed launcher may leave
            except ProcessLookupError:
                pass


def _sft_args(root, model, out, steps=12, extra=()):
    return ["sft", "--model", str(model), "--data", str(root / "traces.jsonl"), "--out", str(out), "--steps", str(steps),
            "--save-every", "4", *SFT_ARGS, *extra]


@pytest.fixture(scope="module")
def sft_run(data):
    """The reference SFT run (TP1, uninterrupted); its final checkpoint is the RL runs' starting point."""
    root, model = data
    out = root / "sft_a"
    res = _run(_sft_args(root, model, out, steps=80, extra=["--save-every", "40"]))
    assert res.returncode == 0, res.stderr
    return out


def test_sft_learns_and_writes_its_run_folder(sft_run):
    rows = _metrics(sft_run)
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


@pytest.fixture(scope="module")
def sft_ref(data):
    """A 12-step SFT run, uninterrupted: what the interrupted runs must end up equal to."""
    root, model = data
    res = _run(_sft_args(root, model, root / "sft_ref"))
    assert res.returncode == 0, res.stderr
    return root / "sft_ref"


def test_sft_resume_after_kill_equals_uninterrupted_run(data, sft_ref, tmp_path):
    root, model = data
    ref, out = sft_ref, tmp_path / "killed"
    _interrupt(_sft_args(root, model, out), out, after_lines=6)
    assert len(_metrics(out)) < 12
    res = _run(_sft_args(root, model, out))
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stderr
    assert _strip_timing(_metrics(out)) == _strip_timing(_metrics(ref))


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_sft_final_checkpoint_weights_only(data, tmp_path, capsys):
    """final_checkpoint=weights: the last checkpoint holds the model and tokenizer only (about a third of a full
    fp32 one: Adam's two moments go), evaluates like any; a rerun of the finished run trains nothing; extending
    it continues from the last full checkpoint, and without one says why it cannot."""
    import shutil

    from nemo_lead.checkpoint_meta import read_checkpoint_meta
    from nemo_lead.cli import main

    root, model = data
    out = tmp_path / "weights"
    args = _sft_args(root, model, out, steps=8, extra=["final_checkpoint=weights"])
    res = _run(args)
    assert res.returncode == 0, res.stderr
    full, final = out / "checkpoints" / "step_000004", out / "checkpoints" / "step_000008"
    assert sorted(p.name for p in full.iterdir()) == ["meta.json", "model", "optim", "rng", "tokenizer"]
    assert sorted(p.name for p in final.iterdir()) == ["meta.json", "model", "tokenizer"]
    assert read_checkpoint_meta(final)["parts"] == ["model"] and read_checkpoint_meta(final)["prompt"]["suffix"] == ""
    assert 2.5 * _size(final / "model") < _size(full) < 3.5 * _size(final / "model")  # Adam: two moments per weight
    assert json.loads((out / "done.json").read_text())["checkpoint"] == str(final)
    assert main(["generate", "--model", str(final), 'prompts=["1+2"]', "--max-tokens", "4", "--out",
                 str(tmp_path / "g.jsonl")]) == 0, capsys.readouterr().err
    first = _strip_timing(_metrics(out))
    res = _run(args)  # finished: nothing to train, the same logs
    assert res.returncode == 0 and "resuming from" in res.stderr and _strip_timing(_metrics(out)) == first
    res = _run(_sft_args(root, model, out, steps=10, extra=["final_checkpoint=weights"]))
    assert res.returncode == 0 and f"resuming from {full}" in res.stderr, res.stderr
    rows = _strip_timing(_metrics(out))
    assert [r["step"] for r in rows] == list(range(1, 11)) and rows[:4] == first[:4]
    assert read_checkpoint_meta(out / "checkpoints" / "step_000010")["parts"] == ["model"]
    shutil.rmtree(out / "checkpoints" / "step_000008")  # as keep_last=1 leaves it: the weights-only one alone
    res = _run(_sft_args(root, model, out, steps=12, extra=["final_checkpoint=weights"]))
    assert res.returncode == 2 and "holds the weights only (final_checkpoint=weights)" in res.stderr


def _rl_args(root, ckpt, out, steps=6, extra=()):
    return ["rl", "--model", str(ckpt), "--data", str(root / "problems.jsonl"), "--val-data", str(root / "val.jsonl"),
            "--out", str(out), "--steps", str(steps), "--save-every", "2", *RL_ARGS, *extra]


@pytest.fixture(scope="module")
def rl_run(data, sft_run):
    root, _ = data
    out = root / "rl_a"
    res = _run(_rl_args(root, sft_run / "checkpoints" / "step_000080", out))
    assert res.returncode == 0, res.stderr
    return out


def test_rl_run_folder_and_metrics(rl_run):
    rows = _metrics(rl_run)
    assert [r["step"] for r in rows] == list(range(1, 7))
    required = ("reward/mean", "accuracy", "response_length/mean", "response_length/max", "truncated_frac",
                "groups/kept_frac", "advantage/abs_mean", "loss", "clip_frac", "entropy", "grad_norm", "lr",
                "mismatch/logprob_abs_mean", "time/generate", "time/verify", "time/logprobs", "time/train",
                "time/refit", "time/step", "tokens_per_s", "groups/no_signal", "groups/no_signal_frac",
                "answer_extracted_frac", "no_signal")
    for r in rows:
        assert list(r)[0] == "step" and all(k in r for k in required), sorted(set(required) - set(r))
        assert r["mismatch/logprob_abs_mean"] < 1e-4  # the engine samples from the actor's own weights
    # the SFT checkpoint answers some problems and misses others: groups carry signal, updates happen
    assert 0 < sum(r["accuracy"] for r in rows) / len(rows) < 1
    assert any(r["advantage/abs_mean"] > 0 and r["grad_norm"] > 0 for r in rows)
    val = _metrics(rl_run, "val.jsonl")
    assert [v["step"] for v in val] == [0, 3, 6] and all(v["problems"] == 6 and v["n"] == 2 for v in val)
    stats = _metrics(rl_run, "problem_stats.jsonl")
    assert len(stats) == 6 * 4 and all(s["samples"] == 4 and 0 <= s["correct"] <= 4 for s in stats)
    rollouts = [json.loads(x) for x in (rl_run / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert len(rollouts) == 16 and {"prompt", "response", "reward", "advantage", "outcome"} <= set(rollouts[0])
    assert sum(s["correct"] for s in stats if s["step"] == 1) == sum(r["outcome"] == "CORRECT" for r in rollouts)


def test_rl_resume_after_kill_equals_uninterrupted_run(data, sft_run, rl_run, tmp_path):
    root, _ = data
    out = tmp_path / "killed"
    args = _rl_args(root, sft_run / "checkpoints" / "step_000080", out)
    _interrupt(args, out, after_lines=3)
    assert len(_metrics(out)) < 6
    res = _run(args)
    assert res.returncode == 0, res.stderr
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        assert _strip_timing(_metrics(out, name)) == _strip_timing(_metrics(rl_run, name)), name
    for f in sorted((rl_run / "rollouts").iterdir()):
        assert (out / "rollouts" / f.name).read_text() == f.read_text()


def test_rl_old_logprobs_from_the_update_equal_a_pass_of_their_own(data, sft_run, rl_run, tmp_path):
    """`old_logprobs=auto` (the default; one update per step: the update's own forward pass) against
    `recompute` (a forward pass of their own, as with several updates per step): the same run."""
    root, _ = data
    out = tmp_path / "recompute"
    res = _run(_rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["old_logprobs=recompute"]))
    assert res.returncode == 0, res.stderr
    for a, b in zip(_strip_timing(_metrics(out)), _strip_timing(_metrics(rl_run))):
        assert _close(a, b, 1e-5), (a, b)
    assert all(r["time/logprobs"] > 0.001 for r in _metrics(out) if not r["skipped"])


def test_rl_rollout_correction_runs_and_logs_its_metrics(data, sft_run, rl_run, tmp_path):
    """Token TIS against the engine's log-probs: the engine samples from the actor's own weights, so every
    weight is 1 up to float noise, nothing is truncated, and the first step equals the default run's."""
    root, _ = data
    out = tmp_path / "tis"
    res = _run(_rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["lead.rollout_correction.mode=tis"]))
    assert res.returncode == 0, res.stderr
    rows = _metrics(out)
    keys = ("rollout_correction/token_frac", "rollout_correction/seq_frac", "rollout_correction/weight_mean")
    assert all(set(keys) <= set(r) for r in rows)
    trained = [r for r in rows if not r["skipped"]]
    assert trained and all(r[keys[0]] == 0.0 and r[keys[1]] == 0.0 and abs(r[keys[2]] - 1.0) < 1e-4 for r in trained)
    assert _close(_strip_timing(rows)[0], {**_strip_timing(_metrics(rl_run))[0], **{k: rows[0][k] for k in keys}}, 1e-4)
    assert not any(k.startswith("rollout_correction/") for k in _metrics(rl_run)[0])  # off by default


def test_rl_offload_during_generation_is_the_same_run(data, sft_run, rl_run, tmp_path):
    """`actor.offload_during_generation=true` (optimizer state on the host and gradient buffers freed while
    the engine generates, validation too): the same metrics, logs and rollouts, and the same final weights."""
    import torch
    from safetensors.torch import load_file

    root, _ = data
    out = tmp_path / "offload"
    res = _run(_rl_args(root, sft_run / "checkpoints" / "step_000080", out,
                        extra=["actor.offload_during_generation=true"]))
    assert res.returncode == 0, res.stderr
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        assert _strip_timing(_metrics(out, name)) == _strip_timing(_metrics(rl_run, name)), name
    assert any(r["grad_norm"] for r in _metrics(out))  # updates happened between the offloaded generations
    weights = []
    for run in (rl_run, out):
        hf = tmp_path / f"{run.name}-hf"
        res = _run(["convert", "--from-ckpt", str(run / "checkpoints" / "step_000006"), "--to-hf", str(hf)])
        assert res.returncode == 0, res.stderr
        weights.append({k: v for f in sorted(hf.glob("*.safetensors")) for k, v in load_file(f).items()})
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def _close(a: dict, b: dict, tol: float) -> bool:
    return set(a) == set(b) and all(
        abs(a[k] - b[k]) <= tol * max(1.0, abs(b[k])) if isinstance(b[k], float) else a[k] == b[k] for k in b)


@pytest.fixture(scope="module")
def rl_tp2(data, sft_run):
    root, _ = data
    out = root / "rl_tp2"
    res = _run(_rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["--tp", "2"]))
    assert res.returncode == 0, res.stderr
    return out


def test_rl_at_tp2_matches_tp1(rl_tp2, rl_run):
    tp2, tp1 = _strip_timing(_metrics(rl_tp2)), _strip_timing(_metrics(rl_run))
    assert [r["step"] for r in tp2] == list(range(1, 7))
    for a, b in zip(tp2, tp1):  # the same sampled tokens, rewards and advantages; losses up to float order
        assert _close(a, b, 1e-4), (a, b)


def test_rl_resume_after_kill_at_tp2_equals_uninterrupted_tp2(data, sft_run, rl_tp2, tmp_path):
    root, _ = data
    out = tmp_path / "tp2"
    args = _rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["--tp", "2"])
    _interrupt(args, out, after_lines=2)
    assert len(_metrics(out)) < 6
    res = _run(args)
    assert res.returncode == 0, res.stderr
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        assert _strip_timing(_metrics(out, name)) == _strip_timing(_metrics(rl_tp2, name)), name


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sft_sigterm_checkpoints_the_step_and_exits_0(data, sft_ref, tmp_path, sig):
    root, model = data
    ref, out = sft_ref, tmp_path / "stopped"
    assert _interrupt(_sft_args(root, model, out), out, after_lines=1, sig=sig) == 0
    stopped_at = len(_metrics(out))
    assert stopped_at < 12 and (out / "checkpoints" / f"step_{stopped_at:06d}").is_dir()
    assert not (out / "done.json").exists()
    res = _run(_sft_args(root, model, out))
    assert res.returncode == 0, res.stderr
    assert _strip_timing(_metrics(out)) == _strip_timing(_metrics(ref))


def test_sft_stops_before_a_step_that_would_pass_the_jobs_end(data, sft_ref, tmp_path):
    """Outside SLURM with SLURM_JOB_END_TIME set, and each step slowed to > 4 s by the test hook: the loop
    checkpoints and exits 0 before the job's end, saying why, and the rerun ends equal to an uninterrupted run."""
    root, model = data
    out = tmp_path / "deadline"
    end = time.time() + 40  # 12 steps of > 4 s cannot fit, whatever the start-up takes
    env = {**_env(), "SLURM_JOB_END_TIME": str(int(end)), "NEMO_LEAD_DEADLINE_MARGIN_S": "0",
           "NEMO_LEAD_TEST_STEP_DELAY_S": "4"}
    env.pop("SLURM_JOB_ID", None)
    res = subprocess.run([*CLI, *_sft_args(root, model, out)], capture_output=True, text=True, timeout=240, env=env)
    ended = time.time()
    assert res.returncode == 0, res.stderr
    stopped_at = len(_metrics(out))
    assert 1 <= stopped_at < 12 and (out / "checkpoints" / f"step_{stopped_at:06d}").is_dir()
    assert not (out / "done.json").exists()
    assert f"stopping before step {stopped_at + 1}: the job ends in" in res.stderr + res.stdout
    assert ended < end + 10  # the next step (> 4 s) was not started; the checkpoint and the exit took the rest
    res = _run(_sft_args(root, model, out))
    assert res.returncode == 0, res.stderr
    assert _strip_timing(_metrics(out)) == _strip_timing(_metrics(sft_ref))


def test_a_lost_output_pipe_checkpoints_and_exits_0(data, sft_ref, tmp_path):
    """`nemo-lead sft ... 2>&1 | head -n 3`: the reader goes away; the run checkpoints the step and stops."""
    root, model = data
    out = tmp_path / "piped"
    proc = subprocess.Popen([*CLI, *_sft_args(root, model, out, steps=400, extra=["--save-every", "0"])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
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
    assert _metrics(out)[-1]["step"] == steps[0]


def test_rl_dynamic_sampling_and_several_updates_per_step(data, sft_run, tmp_path):
    """DAPO's dynamic sampling: only groups with 0 < correct < n train, more rounds of prompts fill the
    batch; two epochs of two minibatches each step."""
    root, _ = data
    out = tmp_path / "dapo"
    res = _run(_rl_args(root, sft_run / "checkpoints" / "step_000080", out, steps=2,
                        extra=["--preset", "dapo", "max_rounds=3", "ppo_epochs=2", "minibatches=2"]))
    assert res.returncode == 0, res.stderr
    for r in _metrics(out):
        rows = [json.loads(x) for x in (out / "rollouts" / f"step_{r['step']:06d}.jsonl").read_text().splitlines()]
        assert len(rows) == 16 * r["rounds"] and 1 <= r["rounds"] <= 3
        groups: dict[str, list] = {}
        for row in rows:
            groups.setdefault(row["problem_id"], []).append(row)
        kept = [g for g in groups.values() if any(x["kept"] for x in g)]  # (truncated samples are masked)
        assert len(kept) == r["groups/kept"] <= 4
        assert all(0 < sum(x["outcome"] == "CORRECT" for x in g) < 4 for g in kept)
        assert r["rounds"] == 3 or r["groups/kept"] == 4


def test_rl_rerun_refuses_changed_settings_and_extends_steps(data, sft_run, rl_run, tmp_path):
    import shutil

    root, _ = data
    out = tmp_path / "copy"
    shutil.copytree(rl_run, out)
    ckpt = sft_run / "checkpoints" / "step_000080"
    res = _run(_rl_args(root, ckpt, out, extra=["actor.optim.lr=1e-3"]))
    assert res.returncode == 2 and "actor.optim.lr: 0.0002 -> 0.001  (allowed with --allow-change actor.optim.lr)" \
        in res.stderr
    res = _run(_rl_args(root, ckpt, out, extra=["--allow-change", "rollout.n", "--n", "8"]))
    assert res.returncode == 2 and "allow_change: rollout.n may not change when a run continues" in res.stderr
    assert not (out / "changes.jsonl").exists()
    # a run started by an older nemo-lead, before a setting existed: continued while the setting keeps its
    # default, refused when it is set to something else
    from omegaconf import OmegaConf

    saved = OmegaConf.load(out / "config.yaml")
    del saved["old_logprobs"]
    OmegaConf.save(saved, out / "config.yaml")
    res = _run(_rl_args(root, ckpt, out, extra=["old_logprobs=recompute"]))
    assert res.returncode == 2 and "old_logprobs: None -> 'recompute'" in res.stderr
    res = _run(_rl_args(root, ckpt, out, steps=7))
    assert res.returncode == 0, res.stderr
    assert [r["step"] for r in _metrics(out)] == list(range(1, 8))
    assert json.loads((out / "done.json").read_text())["step"] == 7
    # what the NaN stop advises: a lower learning rate, allowed explicitly, recorded with the step it starts at
    res = _run(_rl_args(root, ckpt, out, steps=8, extra=["--allow-change", "actor.optim.lr", "actor.optim.lr=1e-4"]))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x) for x in (out / "changes.jsonl").read_text().splitlines()] == [
        {"step": 7, "key": "actor.optim.lr", "from": 0.0002, "to": 0.0001}]
    assert _metrics(out)[-1]["lr"] == pytest.approx(1e-4) and _metrics(out)[-2]["lr"] == pytest.approx(2e-4)
    # the data file replaced at the same path (same name, other content): refused, naming the key
    problems = root / "problems.jsonl"
    saved = problems.read_text()
    try:
        problems.write_text(saved.replace('"answer": "', '"answer": "1', 1))
        res = _run(_rl_args(root, ckpt, out, steps=9))
        assert res.returncode == 2 and "data.path: the content changed since the run started" in res.stderr
    finally:
        problems.write_text(saved)


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
    res = _run(_sft_args(root, weightless, out, steps=2))
    assert res.returncode != 0 and (out / "config.yaml").is_file()
    res = _run(_sft_args(root, model, out, steps=2))
    assert res.returncode == 0, res.stderr
    assert [r["step"] for r in _metrics(out)] == [1, 2]


def test_rl_renders_prompts_as_the_checkpoint_was_trained(data, sft_run, tmp_path):
    """The SFT checkpoint recorded its prompt (no suffix); rl with prompt.* at their defaults uses it, as eval
    does (one rule); a prompt key set explicitly wins."""
    root, _ = data
    ckpt = sft_run / "checkpoints" / "step_000080"
    def args(out, extra=()):
        return [a for a in _rl_args(root, ckpt, out, steps=1) if a not in PROMPT] + ["validation.every=99", *extra]

    res = _run(args(tmp_path / "rl"))
    assert res.returncode == 0, res.stderr
    prompts = {json.loads(x)["prompt"] for x in (tmp_path / "rl" / "rollouts" / "step_000001.jsonl").read_text().splitlines()}
    assert prompts and not any("think step by step" in p for p in prompts)
    from omegaconf import OmegaConf

    assert OmegaConf.load(tmp_path / "rl" / "config.yaml").prompt.suffix == ""
    res = _run(args(tmp_path / "rl2", ["prompt.prefix='Q: '"]))
    assert res.returncode == 0, res.stderr
    prompts = {json.loads(x)["prompt"] for x in (tmp_path / "rl2" / "rollouts" / "step_000001.jsonl").read_text().splitlines()}
    assert all("think step by step" in p and "Q: " in p for p in prompts)


def test_rl_all_groups_filtered_is_logged_and_skipped(data, tmp_path):
    root, model = data  # the untrained model answers nothing: with the authors' filter every group is dropped
    out = tmp_path / "filtered"
    res = _run(["rl", "--model", str(model), "--data", str(root / "problems.jsonl"), "--out", str(out), "--steps", "2",
                "--preset", "reference_code", *RL_ARGS])
    assert res.returncode == 0, res.stderr
    rows = _metrics(out)
    assert [(r["step"], r["skipped"], r["groups/kept_frac"]) for r in rows] == [(1, 1, 0.0), (2, 1, 0.0)]
    assert set(rows[0]) == set(_metrics(out)[1]) and rows[0]["loss"] is None and rows[0]["lr"] > 0
    assert "no learning signal" in res.stderr
    assert all(r["no_signal"] == 1 and r["groups/no_signal_frac"] == 1.0 for r in rows)
    assert res.stderr.count("warning: step") == 1  # the first step without signal; then every 10 steps


def test_rl_stops_at_every_end_token_and_warns_when_no_answer_is_extracted(data, sft_run, tmp_path):
    """A checkpoint whose generation_config.json lists a second end token ("=", which the SFT model writes
    right after the operands) stops there, so no response reaches an answer: every group is all wrong, the
    paper's preset keeps them all (kept_frac 1.0), and the run warns that nothing can be learned and why."""
    import shutil

    root, _ = data
    ckpt = tmp_path / "ckpt"
    shutil.copytree(sft_run / "checkpoints" / "step_000080", ckpt)
    from nemo_lead.models import load_tokenizer

    gen = ckpt / "tokenizer" / "generation_config.json"  # the HF folder's, copied with the tokenizer
    equals = load_tokenizer(ckpt / "tokenizer").convert_tokens_to_ids("=")
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "eos_token_id": [0, equals]}))
    out = tmp_path / "stops"
    res = _run(["rl", "--model", str(ckpt), "--data", str(root / "problems.jsonl"), "--out", str(out), "--steps", "2",
                *RL_ARGS])
    assert res.returncode == 0, res.stderr
    rows = _metrics(out)
    rollouts = [json.loads(x) for f in sorted((out / "rollouts").iterdir()) for x in f.read_text().splitlines()]
    assert len(rollouts) == 32 and all(r["finish_reason"] == "stop" and "=" not in r["response"] for r in rollouts)
    assert sum(r["response"].count("+") for r in rollouts) >= 16  # they stopped after "a+b", where "=" comes
    for r in rows:
        assert r["groups/kept_frac"] == 1.0 and r["groups/no_signal_frac"] == 1.0 and r["no_signal"] == 1
        assert r["answer_extracted_frac"] == 0.0 and r["accuracy"] == 0.0 and r["advantage/abs_mean"] == 0.0
    assert res.stderr.count("warning: step 1: no learning signal") == 1 and "warning: step 2" not in res.stderr
    assert "only 0% of the responses have an answer" in res.stderr


def test_bad_inputs_name_the_file_line_or_setting(data, tmp_path):
    root, model = data
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "2+2"}\n')
    res = _run(["rl", "--model", str(model), "--data", str(bad), "--out", str(tmp_path / "r"), "--steps", "1"])
    assert res.returncode == 2 and f"{bad}:2" in res.stderr
    other = write_tiny_model(tmp_path / "other", seed=0, extra_tokens=["\\boxed{", "<step>"])
    res = _run(["sft", "--model", str(model), "--data", str(root / "traces.jsonl"), "--out", str(tmp_path / "s"),
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
    from nemo_lead.training.actor import build_actor, compute_logprobs
    from nemo_lead.training.actor_config import ActorConfig
    from nemo_lead.training.rl import assign_advantages, old_logprobs, old_logprobs_from_update, update_policy
    from nemo_lead.training.rollouts import Group, flat_tensors, training_batch

    tok = load_tokenizer(model)
    init_parallel(1, 1, seed=0)
    actor = build_actor(ActorConfig(model=model, optim={"lr": 1e-3, "clip_grad": 0.0, "weight_decay": 0.0}))
    lead = LeadConfig.paper()

    class S:  # the slice of RLState these phases read
        cfg = type("C", (), {"lead": lead, "rollout": type("R", (), {"temperature": 1.0, "lag": 0})(), "minibatches": 1,
                             "ppo_epochs": 1, "old_logprobs": "auto"})()
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
    import nemo_lead.training.rl as rl_mod
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
    assert [r["step"] for r in _metrics(out)] == [1, 2] and not (out / "done.json").exists()


def _processes_with(marker: str) -> list[int]:
    """Pids of live processes whose environment holds `marker` (every helper inherits its parent's)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:  # gone, or not ours to read
                pass
    return found


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
                            env={**_env(), name: value})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not list(out.glob("checkpoints/step_*")):
            time.sleep(0.05)
        helpers = [p for p in _processes_with(marker) if p != proc.pid]
        assert proc.poll() is None and len(helpers) >= 3, helpers  # two graders and the queue server at least
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 20
        while _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_with(marker) == []
    finally:
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)
