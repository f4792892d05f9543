"""`nemo-lead rl` end to end on a tiny model (CPU, gloo), as a user runs it, from the SFT run's checkpoint.

- The run folder and every metric of a step; kill -9 at an arbitrary moment, then the same command again:
  metrics.jsonl (timing keys aside), val.jsonl, problem_stats.jsonl and the rollout logs equal an
  uninterrupted run's.
- Old log-probs from the update's own forward pass (the default) give the run a separate pass gives.
- Rollout correction (token TIS) runs end to end, logs its metrics, and leaves an on-policy run as it was.
- Dynamic sampling (DAPO preset): only groups with mixed outcomes train, extra rounds fill the batch.
- A rerun with a changed setting is refused naming the key; a larger --steps extends the run.
- Prompts render as the checkpoint was trained; all groups filtered: the step is logged as skipped; every end
  token stops a response, and a run that cannot learn says why (the no-signal warning, and the start check
  of the first two steps: answers read, responses cut, mixed groups).
"""

from __future__ import annotations

import json
import re

import pytest
from loops_common import (
    PROMPT,
    RL_ARGS,
    assert_same_logs,
    close_to,
    interrupt,
    read_lines,
    rl_args,
    run_cli,
    strip_timing,
)

pytestmark = pytest.mark.slow


def test_rl_run_folder_and_metrics(rl_run):
    rows = read_lines(rl_run)
    assert [r["step"] for r in rows] == list(range(1, 7))
    required = ("reward/mean", "accuracy", "response_length/mean", "response_length/max", "truncated_frac",
                "groups/kept_frac", "advantage/abs_mean", "loss", "clip_frac", "entropy", "grad_norm", "lr",
                "mismatch/logprob_abs_mean", "time/generate", "time/verify", "time/logprobs", "time/train",
                "time/refit", "time/step", "tokens_per_s", "groups/no_signal", "groups/no_signal_frac",
                "answer_extracted_frac", "no_signal", "groups/all_correct_frac", "groups/all_wrong_frac",
                "groups/mixed_frac", "response_length/correct_mean", "response_length/incorrect_mean",
                "update/microbatches", "update/skipped_zero_advantage")
    for r in rows:
        assert list(r)[0] == "step" and all(k in r for k in required), sorted(set(required) - set(r))
        # the engine samples from the actor's own weights (None: a step whose advantages were all 0 forwarded
        # nothing to compare)
        assert r["mismatch/logprob_abs_mean"] is None or r["mismatch/logprob_abs_mean"] < 1e-4
    assert any(r["mismatch/logprob_abs_mean"] is not None for r in rows)
    # the SFT checkpoint answers some problems and misses others: groups carry signal, updates happen
    assert 0 < sum(r["accuracy"] for r in rows) / len(rows) < 1
    assert any(r["advantage/abs_mean"] > 0 and r["grad_norm"] > 0 for r in rows)
    # the LEAD preset: an all-wrong group's responses (advantage 0) are not forwarded in the update
    assert all(r["update/skipped_zero_advantage"] == r["samples"] for r in rows if r["accuracy"] == 0)
    assert any(0 < r["update/skipped_zero_advantage"] < r["samples"] for r in rows)
    for r in rows:  # every group is all right, all wrong or mixed; the LEAD preset trains all-wrong ones on nothing
        assert r["groups/all_correct_frac"] + r["groups/all_wrong_frac"] + r["groups/mixed_frac"] == pytest.approx(1.0)
        assert r["update/skipped_zero_advantage"] >= r["groups/all_wrong_frac"] * r["samples"] - 1e-9
        lengths = [r[f"response_length/{k}_mean"] for k in ("correct", "incorrect")]
        assert (lengths[0] is None) == (r["accuracy"] == 0) and (lengths[1] is None) == (r["accuracy"] == 1)
    val = read_lines(rl_run, "val.jsonl")
    assert [v["step"] for v in val] == [0, 3, 6] and all(v["problems"] == 6 and v["n"] == 2 for v in val)
    stats = read_lines(rl_run, "problem_stats.jsonl")
    assert len(stats) == 6 * 4 and all(s["samples"] == 4 and 0 <= s["correct"] <= 4 for s in stats)
    rollouts = [json.loads(x) for x in (rl_run / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert len(rollouts) == 16 and {"prompt", "response", "reward", "advantage", "outcome"} <= set(rollouts[0])
    assert sum(s["correct"] for s in stats if s["step"] == 1) == sum(r["outcome"] == "CORRECT" for r in rollouts)


def test_rl_resume_after_kill_equals_uninterrupted_run(data, sft_run, rl_run, tmp_path):
    root, _ = data
    out = tmp_path / "killed"
    args = rl_args(root, sft_run / "checkpoints" / "step_000080", out)
    interrupt(args, out, after_lines=3)
    assert len(read_lines(out)) < 6
    res = run_cli(args)
    assert res.returncode == 0, res.stderr
    assert_same_logs(out, rl_run)
    for f in sorted((rl_run / "rollouts").iterdir()):
        assert (out / "rollouts" / f.name).read_text() == f.read_text()


def test_rl_old_logprobs_from_the_update_equal_a_pass_of_their_own(data, sft_run, rl_run, tmp_path):
    """`old_logprobs=auto` (the default; one update per step: the update's own forward pass) against
    `recompute` (a forward pass of their own, as with several updates per step): the same run."""
    root, _ = data
    out = tmp_path / "recompute"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["old_logprobs=recompute"]))
    assert res.returncode == 0, res.stderr
    for a, b in zip(strip_timing(read_lines(out)), strip_timing(read_lines(rl_run))):
        assert close_to(a, b, 1e-5), (a, b)
    # a pass of their own, over the responses the update forwards (none in a step whose advantages are all 0)
    assert all(r["time/logprobs"] > 0.001 for r in read_lines(out)
               if not r["skipped"] and r["update/skipped_zero_advantage"] < r["samples"])


def test_rl_rollout_correction_runs_and_logs_its_metrics(data, sft_run, rl_run, tmp_path):
    """Token TIS against the engine's log-probs: the engine samples from the actor's own weights, so every
    weight is 1 up to float noise, nothing is truncated, and the first step equals the default run's."""
    root, _ = data
    out = tmp_path / "tis"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out, extra=["lead.rollout_correction.mode=tis"]))
    assert res.returncode == 0, res.stderr
    rows = read_lines(out)
    keys = ("rollout_correction/token_frac", "rollout_correction/seq_frac", "rollout_correction/weight_mean")
    assert all(set(keys) <= set(r) for r in rows)
    # steps that forwarded some response (in one whose advantages are all 0 the means are over nothing: None)
    trained = [r for r in rows if not r["skipped"] and r["update/skipped_zero_advantage"] < r["samples"]]
    assert all(r[k] is None for r in rows if r not in trained for k in keys)
    assert trained and all(r[keys[0]] == 0.0 and r[keys[1]] == 0.0 and abs(r[keys[2]] - 1.0) < 1e-4 for r in trained)
    assert close_to(strip_timing(rows)[0], {**strip_timing(read_lines(rl_run))[0], **{k: rows[0][k] for k in keys}}, 1e-4)
    assert not any(k.startswith("rollout_correction/") for k in read_lines(rl_run)[0])  # off by default


def test_rl_dynamic_sampling_and_several_updates_per_step(data, sft_run, tmp_path):
    """DAPO's dynamic sampling: only groups with 0 < correct < n train, more rounds of prompts fill the
    batch; two epochs of two minibatches each step."""
    root, _ = data
    out = tmp_path / "dapo"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out, steps=2,
                        extra=["--preset", "dapo", "max_rounds=3", "ppo_epochs=2", "minibatches=2"]))
    assert res.returncode == 0, res.stderr
    for r in read_lines(out):
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
    res = run_cli(rl_args(root, ckpt, out, extra=["actor.optim.lr=1e-3"]))
    assert res.returncode == 2 and "actor.optim.lr: 0.0002 -> 0.001  (allowed with --allow-change actor.optim.lr)" \
        in res.stderr
    res = run_cli(rl_args(root, ckpt, out, extra=["--allow-change", "rollout.n", "--n", "8"]))
    assert res.returncode == 2 and "allow_change: rollout.n may not change when a run continues" in res.stderr
    assert not (out / "changes.jsonl").exists()
    # a run started by an older nemo-lead, before a setting existed: continued while the setting keeps its
    # default, refused when it is set to something else
    from omegaconf import OmegaConf

    saved = OmegaConf.load(out / "config.yaml")
    del saved["old_logprobs"]
    OmegaConf.save(saved, out / "config.yaml")
    res = run_cli(rl_args(root, ckpt, out, extra=["old_logprobs=recompute"]))
    assert res.returncode == 2 and "old_logprobs: None -> 'recompute'" in res.stderr
    res = run_cli(rl_args(root, ckpt, out, steps=7))
    assert res.returncode == 0, res.stderr
    assert [r["step"] for r in read_lines(out)] == list(range(1, 8))
    assert json.loads((out / "done.json").read_text())["step"] == 7
    # what the NaN stop advises: a lower learning rate, allowed explicitly, recorded with the step it starts at
    res = run_cli(rl_args(root, ckpt, out, steps=8, extra=["--allow-change", "actor.optim.lr", "actor.optim.lr=1e-4"]))
    assert res.returncode == 0, res.stderr
    assert [json.loads(x) for x in (out / "changes.jsonl").read_text().splitlines()] == [
        {"step": 7, "key": "actor.optim.lr", "from": 0.0002, "to": 0.0001}]
    assert read_lines(out)[-1]["lr"] == pytest.approx(1e-4) and read_lines(out)[-2]["lr"] == pytest.approx(2e-4)
    # the data file replaced at the same path (same name, other content): refused, naming the key
    problems = root / "problems.jsonl"
    saved = problems.read_text()
    try:
        problems.write_text(saved.replace('"answer": "', '"answer": "1', 1))
        res = run_cli(rl_args(root, ckpt, out, steps=9))
        assert res.returncode == 2 and "data.path: the content changed since the run started" in res.stderr
    finally:
        problems.write_text(saved)


def test_rl_renders_prompts_as_the_checkpoint_was_trained(data, sft_run, tmp_path):
    """The SFT checkpoint recorded its prompt (no suffix); rl with prompt.* at their defaults uses it, as eval
    does (one rule); a prompt key set explicitly wins."""
    root, _ = data
    ckpt = sft_run / "checkpoints" / "step_000080"
    def args(out, extra=()):
        return [a for a in rl_args(root, ckpt, out, steps=1) if a not in PROMPT] + ["validation.every=99", *extra]

    res = run_cli(args(tmp_path / "rl"))
    assert res.returncode == 0, res.stderr
    prompts = {json.loads(x)["prompt"] for x in (tmp_path / "rl" / "rollouts" / "step_000001.jsonl").read_text().splitlines()}
    assert prompts and not any("think step by step" in p for p in prompts)
    from omegaconf import OmegaConf

    assert OmegaConf.load(tmp_path / "rl" / "config.yaml").prompt.suffix == ""
    res = run_cli(args(tmp_path / "rl2", ["prompt.prefix='Q: '"]))
    assert res.returncode == 0, res.stderr
    prompts = {json.loads(x)["prompt"] for x in (tmp_path / "rl2" / "rollouts" / "step_000001.jsonl").read_text().splitlines()}
    assert all("think step by step" in p and "Q: " in p for p in prompts)


def test_rl_refuses_validation_prompts_that_cannot_fit_before_any_step(data, tmp_path):
    """Validation's prompts are tokenized once, at the start, and checked with validation.max_tokens against the
    model's 1024 positions: a problem that cannot fit is named before any validation or step runs."""
    root, model = data
    out = tmp_path / "long"
    res = run_cli(rl_args(root, model, out, steps=1, extra=["validation.max_tokens=1020"]))
    assert res.returncode == 2, res.stderr
    assert re.search(r"validation.data problem \S+: \d+ prompt tokens \+ max_tokens 1020 exceed the model's 1024 "
                     "positions", res.stderr), res.stderr
    assert not (out / "val.jsonl").exists() and not (out / "checkpoints").exists()


def test_rl_all_groups_filtered_is_logged_and_skipped(data, tmp_path):
    root, model = data  # the untrained model answers nothing: with the authors' filter every group is dropped
    out = tmp_path / "filtered"
    res = run_cli(["rl", "--model", str(model), "--data", str(root / "problems.jsonl"), "--out", str(out), "--steps", "2",
                "--preset", "reference_code", *RL_ARGS])
    assert res.returncode == 0, res.stderr
    rows = read_lines(out)
    assert [(r["step"], r["skipped"], r["groups/kept_frac"]) for r in rows] == [(1, 1, 0.0), (2, 1, 0.0)]
    assert set(rows[0]) == set(read_lines(out)[1]) and rows[0]["loss"] is None and rows[0]["lr"] > 0
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
    from nemo_lead.checkpoint.manifest import entries_of_rank, write_manifest

    write_manifest(ckpt, entries_of_rank(ckpt, 0, 1))  # edited on purpose: sealed again, as `check --seal` would
    out = tmp_path / "stops"
    res = run_cli(["rl", "--model", str(ckpt), "--data", str(root / "problems.jsonl"), "--out", str(out), "--steps", "2",
                *RL_ARGS])
    assert res.returncode == 0, res.stderr
    rows = read_lines(out)
    rollouts = [json.loads(x) for f in sorted((out / "rollouts").iterdir()) for x in f.read_text().splitlines()]
    assert len(rollouts) == 32 and all(r["finish_reason"] == "stop" and "=" not in r["response"] for r in rollouts)
    assert sum(r["response"].count("+") for r in rollouts) >= 16  # they stopped after "a+b", where "=" comes
    for r in rows:
        assert r["groups/kept_frac"] == 1.0 and r["groups/no_signal_frac"] == 1.0 and r["no_signal"] == 1
        assert r["answer_extracted_frac"] == 0.0 and r["accuracy"] == 0.0 and r["advantage/abs_mean"] == 0.0
    assert res.stderr.count("warning: step 1: no learning signal") == 1 and "warning: step 2" not in res.stderr
    assert "only 0% of the responses have an answer" in res.stderr
    # the start check of the first two steps says the same in its own terms, at each of them
    for step in (1, 2):
        assert re.search(rf"start check, step {step}: an answer was read in 0% .*; 0% of the groups were mixed",
                         res.stderr), res.stderr
