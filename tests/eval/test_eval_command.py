"""`nemo-lead eval` end to end on a tiny random model: every file, scores consistent with the per-sample
JSONL, resume after a crash (torn last line), refusal to mix settings, regrading, --compare, checkpoints."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from eval_settings import MAX_TOKENS, PROBLEMS, N, eval_args

from nemo_lead.cli import main
from nemo_lead.generation.megatron_engine.engine import MegatronEngine
from nemo_lead.models.source import model_source


def read_samples(folder) -> dict:
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    return {(r["dataset"], r["problem_id"], r["sample"]): r for r in rows}


def summary_of(folder) -> dict:
    return json.loads((folder / "summary.json").read_text())


@pytest.fixture
def generate_calls(monkeypatch):
    """The number of prompts of every engine call made while the test runs."""
    calls: list[int] = []
    original = MegatronEngine.generate

    def counting(self, prompt_token_ids, params, *args, **kwargs):
        calls.append(len(prompt_token_ids))
        return original(self, prompt_token_ids, params, *args, **kwargs)

    monkeypatch.setattr(MegatronEngine, "generate", counting)
    return calls


def test_eval_writes_every_file_and_scores_match_the_samples(reference_run):
    out = reference_run
    for name in ("run.json", "config.yaml", "samples.jsonl", "summary.json", "summary.md", "accuracy_vs_budget.png"):
        assert (out / name).is_file(), name
    assert (out / "accuracy_vs_budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["sampling"]["n"] == N and cfg["sampling"]["temperature"] == 0.6 and cfg["sampling"]["top_p"] == 0.95

    samples = read_samples(out)
    assert sorted(samples) == sorted(("five", pid, s) for pid, _, _ in PROBLEMS for s in range(N))
    for r in samples.values():
        assert 1 <= r["tokens"] <= MAX_TOKENS and r["finish_reason"] in ("stop", "length")
        if r["finish_reason"] == "length":  # cut at the budget: counted like max_tokens, not graded
            assert r["tokens"] == MAX_TOKENS and r["status"] == "truncated" and not r["correct"]
        assert r["gold"] == dict((i, a) for i, _, a in PROBLEMS)[r["problem_id"]]

    d = summary_of(out)["datasets"]["five"]
    flat = list(samples.values())
    per_problem = [[samples[("five", pid, s)] for s in range(N)] for pid, _, _ in PROBLEMS]
    assert d["problems"] == 5 and d["samples"] == 15 and d["complete"]
    assert d["mean_length"] == pytest.approx(sum(r["tokens"] for r in flat) / 15)
    assert d["pass@1"] == pytest.approx(sum(sum(r["correct"] for r in p) / N for p in per_problem) / 5)
    assert d["truncated"] == pytest.approx(sum(r["finish_reason"] == "length" for r in flat) / 15)
    assert list(d["accuracy_vs_budget"]) == ["12", "4", "8"]  # JSON keys; the budgets given
    md = (out / "summary.md").read_text()
    assert "| five " in md and "Cons@3" in md and "acc@8" in md and f"{d['mean_length']:,.0f}" in md


def test_scores_follow_regraded_samples(run_copy, generate_calls, capsys):
    """Give some samples right answers and mark every line as graded another way: the rerun regrades from the
    stored responses (no generation) and the summary equals the hand-computed scores."""
    samples = read_samples(run_copy)
    fix = {("five", "a", 0): "x</think>\\boxed{2}", ("five", "a", 1): "</think>\\boxed{02}",
           ("five", "b", 2): "</think>\\boxed{5}", ("five", "b", 0): "\\boxed{5}",  # never closed <think>: no answer
           ("five", "b", 1): "</think>\\boxed{6}", ("five", "c", 0): "</think>\\boxed{7}"}
    for key, r in samples.items():
        r["grading"] = "before_think"
        if key in fix:
            r.update(response=fix[key], finish_reason="stop")
    (run_copy / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples.values()))

    assert main(_args_for(run_copy)) == 0
    assert generate_calls == []  # nothing missing: no engine call
    assert "regrading 15 stored samples" in capsys.readouterr().err
    after = read_samples(run_copy)
    assert all(r["grading"] == "after_think" for r in after.values())
    assert [after[k]["correct"] for k in fix] == [True, True, True, False, False, False]
    assert after[("five", "b", 0)]["status"] == "no_answer" and after[("five", "b", 1)]["extracted"] == "6"
    d = summary_of(run_copy)["datasets"]["five"]
    assert d["pass@1"] == pytest.approx((2 / 3 + 1 / 3) / 5)
    assert d["answer_extracted"] == pytest.approx(sum(r["extracted"] is not None for r in after.values()) / 15)
    assert d["answer_extracted"] >= 5 / 15  # the five fixed answers read after </think>
    assert f"| {d['answer_extracted']:.1%}" in (run_copy / "summary.md").read_text()
    # votes: a -> "2" twice (right); b -> "5" vs "6", one each: the first seen, sample 1's "6", wins (wrong);
    # c -> "7" (wrong); d, e: nobody answered
    assert d["cons@k"] == pytest.approx(1 / 5)


def _args_for(run):
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    return eval_args(cfg["model"], cfg["data"], run)


def test_resume_after_a_crash_generates_only_the_missing_samples(reference_run, run_copy, generate_calls, capsys):
    lines = (run_copy / "samples.jsonl").read_text().splitlines(keepends=True)
    # call (a, b) complete, sample 0 of c, then a line torn by the crash; d and e missing
    (run_copy / "samples.jsonl").write_text("".join(lines[:7]) + lines[7][: len(lines[7]) // 2])
    (run_copy / "summary.json").unlink()
    assert main(_args_for(run_copy)) == 0
    assert generate_calls == [1, 2]  # c's samples 1-2, then (d, e): calls of at most 2 x 3 sequences
    assert "7 samples already in" in capsys.readouterr().err
    # the same bytes as the uninterrupted run: every sample has its own seed, the file is put in order at the end
    for name in ("samples.jsonl", "summary.json", "run.json"):
        assert (run_copy / name).read_bytes() == (reference_run / name).read_bytes(), name


@pytest.mark.parametrize("size", [1, 4, 64])
def test_the_call_size_changes_no_sample(reference_run, tiny, problems_file, tmp_path, generate_calls, size):
    """Calls of 1 (each sample alone), 4 (one problem's 3 samples) or 64 sequences (one call) give the reference
    run's files (calls of 2 problems), byte for byte (the megatron engine on CPU: a sample's tokens depend
    on its stream and its logits, and its logits do not depend on the rows beside it here)."""
    out = tmp_path / f"calls-{size}"
    assert main(eval_args(tiny, problems_file, out, f"call_sequences={size}")) == 0
    assert generate_calls == {1: [1] * 15, 4: [1] * 5, 64: [5]}[size]  # prompts per call
    for name in ("samples.jsonl", "summary.json", "run.json"):
        assert (out / name).read_bytes() == (reference_run / name).read_bytes(), name


def test_refuses_to_mix_settings_or_models(run_copy, tiny, tmp_path, capsys):
    before = (run_copy / "samples.jsonl").read_bytes()
    assert main(_args_for(run_copy) + ["--temperature", "0.7"]) == 2
    err = capsys.readouterr().err
    assert "holds samples made with other settings" in err and "sampling.temperature: 0.6 there, 0.7 now" in err
    from nemo_lead.models import write_tiny_model

    other = write_tiny_model(tmp_path / "other", "qwen2", seed=4)
    cfg = yaml.safe_load((run_copy / "config.yaml").read_text())
    assert main(eval_args(other, cfg["data"], run_copy)) == 2
    assert "the model's file content changed: model.safetensors" in capsys.readouterr().err
    assert (run_copy / "samples.jsonl").read_bytes() == before
    # the same model with newer modification times (`touch`) is the same model: the run resumes, nothing to do
    for f in tiny.iterdir():
        os.utime(f)
    assert main(_args_for(run_copy)) == 0
    assert (run_copy / "samples.jsonl").read_bytes() == before


def test_bad_dataset_name_names_the_nearest(tiny, tmp_path, capsys):
    assert main(["eval", "--model", str(tiny), "--data", "aime24,math50", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset 'math50'" in err and "did you mean 'math500'?" in err
    assert not (tmp_path / "o").exists()


def test_compare_prints_the_runs_side_by_side(reference_run, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    s = summary_of(reference_run)
    for key in ("cons@k", "pass@1", "mean_length"):  # a summary written before the scores' names changed
        del s["datasets"]["five"][key]
    s["datasets"]["five"].update(cons_at_k=0.8, pass_at_1=0.4375, len_avg=6990.4)
    s["datasets"]["aime25"] = dict(s["datasets"]["five"], samples_per_problem=32, cons_at_k=0.5)
    (other / "summary.json").write_text(json.dumps(s))
    table = tmp_path / "table.md"
    assert main(["eval", "--out", str(table), "--compare", str(reference_run), str(other)]) == 0
    out = capsys.readouterr().out
    assert out == table.read_text()
    rows = [[c.strip() for c in line.strip("|\n").split("|")] for line in out.splitlines() if line.startswith("|")]
    ref = summary_of(reference_run)["datasets"]["five"]
    assert rows[0] == ["run", "five Cons@3", "five Pass@1", "five Len", "aime25 Cons@32", "aime25 Pass@1", "aime25 Len"]
    assert rows[2] == ["reference", f"{ref['cons@k']:.3f}", f"{ref['pass@1']:.3f}", f"{ref['mean_length']:,.0f}",
                       "-", "-", "-"]
    assert rows[3] == ["other", "0.800", "0.438", "6,990", "0.500", "0.438", "6,990"]
    assert "- other: model" in out and "T 0.6, top-p 0.95, n 3" in out
    assert main(["eval", "--compare", str(tmp_path / "missing")]) == 2
    assert "no summary.json" in capsys.readouterr().err


def test_checkpoint_folder_as_model_gives_the_hf_samples(tiny, problems_file, reference_run, tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "step_000007"
    assert main(["convert", "--from-hf", str(tiny), "--out", str(ckpt)]) == 0
    assert model_source(str(ckpt)).tokenizer_dir == str((ckpt / "tokenizer").resolve())  # the checkpoint's own by default
    out = tmp_path / "ckpt_eval"
    # the checkpoint's own tokenizer/ folder tokenizes exactly as the HF folder's (see models.load_tokenizer)
    assert main(eval_args(ckpt, problems_file, out)) == 0
    summary = summary_of(out)
    assert summary["model_kind"] == "checkpoint" and summary["model"] == str(ckpt)
    ours, ref = read_samples(out), read_samples(reference_run)
    assert {k: r["response"] for k, r in ours.items()} == {k: r["response"] for k, r in ref.items()}
    assert summary["datasets"] == summary_of(reference_run)["datasets"]


def test_progress_modes_show_lines_or_nothing(tiny, problems_file, reference_run, tmp_path, capsys):
    """`progress=none`: no progress or log lines (the table still goes to stdout); `lines`: a line per call;
    neither changes the samples. A bad value names the key."""
    out = tmp_path / "quiet"
    assert main(eval_args(tiny, problems_file, out, "progress=none")) == 0
    err = capsys.readouterr().err
    assert "[eval]" not in err
    ours, ref = read_samples(out), read_samples(reference_run)
    assert {k: r["response"] for k, r in ours.items()} == {k: r["response"] for k, r in ref.items()}
    (out / "samples.jsonl").write_text("".join((out / "samples.jsonl").read_text().splitlines(keepends=True)[:6]))
    assert main(eval_args(tiny, problems_file, out, "progress=lines")) == 0  # progress may change on resume
    err = capsys.readouterr().err
    assert "[eval] call 1/2 | five 4/5 problems | samples 6/9 |" in err and "s/call" in err
    assert "[eval] call 2/2" in err and "6 samples already in" in err
    assert main(eval_args(tiny, problems_file, out, "progress=loud")) == 2
    assert "progress must be auto, bar, lines or none, got 'loud'" in capsys.readouterr().err
