"""One plain function per stage kind: `run_<kind>(stage) -> outputs` (a dict of the kind's outputs, paths as
strings). A stage reads only its settings (references to earlier stages' outputs are already resolved into
them) and writes only under its own folder, OUT/stages/NAME/. A stage that stops before it is finished
raises `StageStopped`; running it again into the same folder resumes it (the loops and the evaluation
resume from their run folders; prepare and select simply run again).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from nemo_lead.data import open_think
from nemo_lead.data.demo_task import DEMO_EXTRA_TOKENS, DEMO_MODEL, write_demo_data
from nemo_lead.pipeline.config import Stage, eval_row_config
from nemo_lead.pipeline.select import select_problems, write_problems
from nemo_lead.runtime.files import jsonl_text, read_jsonl, write_atomic, write_json
from nemo_lead.training.run.folder import DONE_FILE, read_done


class StageStopped(RuntimeError):
    """The stage's command returned without finishing (`status`: its exit status, 0 when it was stopped
    cleanly before its last step, e.g. by a signal)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def say(msg: str) -> None:
    print(f"[run] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- prepare (the demo task)
def run_prepare(stage: Stage) -> dict[str, str]:
    """The embedded demo task's files and its tiny random-initialised model, from the stage's seed."""
    from nemo_lead.models import write_tiny_model

    seed = stage.config.seed
    files = write_demo_data(stage.folder / "data", seed=seed)
    model = write_tiny_model(stage.folder / "model", family="qwen2", seed=seed, extra_tokens=DEMO_EXTRA_TOKENS,
                             **DEMO_MODEL)
    return {"model": str(Path(model).resolve()), **{k: str(Path(v).resolve()) for k, v in files.items()}}


# ----------------------------------------------------------------------------- select
def run_select(stage: Stage) -> dict[str, str]:
    """Filter and combine problem sets (SelectConfig); writes problems.jsonl and selection.json (the counts)."""
    problems, report = select_problems(stage.config)
    if not problems:
        raise ValueError(f"stage {stage.name!r}: the selection is empty ({report})")
    path = write_problems(problems, stage.folder / "problems.jsonl")
    write_json(stage.folder / "selection.json", report)
    say(f"{stage.name}: {report['total']} problems ({', '.join(f'{k} {v}' for k, v in report.items())})")
    return {"data": str(path.resolve())}


# ----------------------------------------------------------------------------- distill
def keep_traces(records: list[dict[str, Any]], rule: str) -> dict[tuple[str, str], dict[str, Any]]:
    """One verified response per problem: {(dataset, problem id): record}. Only records graded correct
    qualify, so a problem the teacher never solved gets no trace. `first`: the lowest sample index (an
    unbiased draw from the teacher's correct responses, lengths included); `shortest`: the fewest tokens,
    then the lowest index."""

    def rank(r: dict[str, Any]) -> tuple[int, ...]:
        return (r["sample"],) if rule == "first" else (r["tokens"], r["sample"])

    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        key = (str(r["dataset"]), str(r["problem_id"]))
        if r.get("correct") and (key not in best or rank(r) < rank(best[key])):
            best[key] = r
    return best


def distill_report(problems: list[tuple[str, str]], records: list[dict[str, Any]], rounds: list[range]) -> dict[str, Any]:
    """What the teacher's sampling cost and found, per round: the problems it sampled, the samples and tokens
    it drew, the problems it solved first in that round; and the first try's solve rate (sample 0), which a
    run in rounds and a run of all n at once share (as they share the traces of keep: first)."""
    by_problem: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        by_problem.setdefault((str(r["dataset"]), str(r["problem_id"])), []).append(r)
    first_correct = {key: min((r["sample"] for r in rs if r.get("correct")), default=None) for key, rs in by_problem.items()}
    per_round = []
    for span in rounds:
        drawn = [r for r in records if r["sample"] in span]
        per_round.append({
            "samples": [span.start, span.stop - 1], "problems": len({(r["dataset"], r["problem_id"]) for r in drawn}),
            "drawn": len(drawn), "tokens": sum(r["tokens"] for r in drawn),
            "solved": sum(first_correct.get(key) in span for key in problems)})
    first_try = sum(first_correct.get(key) == 0 for key in problems)
    return {"samples": len(records), "correct_samples": sum(bool(r.get("correct")) for r in records),
            "tokens": sum(r["tokens"] for r in records), "first_try_solved": first_try,
            "first_try_solve_rate": first_try / max(len(problems), 1), "rounds": per_round}


def run_distill(stage: Stage) -> dict[str, str]:
    """Trace distillation: the teacher samples solutions to the problems through the rollout engine
    (`nemo-lead eval`'s job, so it is resumable and runs at any TP x PP), MathVerifier grades them, and one
    correct response per problem (`keep`) becomes its SFT trace: traces.jsonl with id, problem, response
    (the whole assistant text, think block included), answer, and the teacher's tokens and sample index.
    keep: first samples in rounds (sample 0; the other n - 1 only for the problems it did not solve): the
    traces are those of a run drawing all n at once with the same seed (each sample has its own seed); the
    counts of samples and tokens in distill.json are the ones drawn (docs/recipes.md, "Distillation")."""
    from nemo_lead.eval.store import SAMPLES_FILE

    cfg = stage.config
    prep = _evaluated(stage, cfg, "the teacher's sampling")
    opened = open_think(prep.tokenizer, prep.prompt)
    problems = {(name, p.id): p for name, ps in prep.datasets.items() for p in ps}
    records = read_jsonl(Path(cfg.out) / SAMPLES_FILE, what="a sample line")
    records = [r for r in records if (r["dataset"], r["problem_id"]) in problems]
    chosen = keep_traces(records, stage.keep)
    kept = {key: (p, chosen[key]) for key, p in problems.items() if key in chosen}  # in problem order
    path = stage.folder / "traces.jsonl"
    write_atomic(path, jsonl_text({"id": p.id, "problem": p.problem, "response": opened + r["response"],
                                   "answer": p.answer, "teacher_tokens": r["tokens"], "teacher_sample": r["sample"]}
                                  for p, r in kept.values()))
    report = {"problems": len(problems), "traces": len(kept), "solve_rate": len(kept) / max(len(problems), 1),
              "keep": stage.keep, **distill_report(list(problems), records, prep.rounds)}
    write_json(stage.folder / "distill.json", report)
    rounds = "; ".join(f"round {i + 1}: {r['problems']} problems, {r['drawn']} samples, {r['tokens']:,} tokens, "
                       f"{r['solved']} solved" for i, r in enumerate(report["rounds"]))
    say(f"{stage.name}: {len(kept)} traces from {len(problems)} problems "
        f"({report['correct_samples']}/{len(records)} samples verified correct; first try "
        f"{report['first_try_solve_rate']:.1%}; keep {stage.keep}) | {rounds}")
    if not kept:
        raise ValueError(f"stage {stage.name!r}: the teacher solved none of the {len(problems)} problems")
    return {"traces": str(path.resolve()), "samples": str(Path(cfg.out).resolve())}


# ----------------------------------------------------------------------------- sft / rl
def _finished_run(stage: Stage, status: int) -> dict[str, str]:
    run = Path(stage.config.out)
    if status:
        raise StageStopped(f"stage {stage.name!r} exited with status {status}", status)
    done = read_done(run)
    if done is None:
        raise StageStopped(f"stage {stage.name!r} stopped before its last step (no {run / DONE_FILE})", 0)
    checkpoint = done["checkpoint"]
    return {"run": str(run.resolve()), "checkpoint": str(Path(checkpoint).resolve())}


def run_sft_stage(stage: Stage) -> dict[str, str]:
    """`nemo-lead sft` into OUT/stages/NAME (resumes there when interrupted)."""
    from nemo_lead.training.sft.loop import run_sft

    return _finished_run(stage, run_sft(stage.config))


def run_rl_stage(stage: Stage) -> dict[str, str]:
    """`nemo-lead rl` into OUT/stages/NAME (resumes there when interrupted)."""
    from nemo_lead.training.rl.loop import run_rl

    return _finished_run(stage, run_rl(stage.config))


# ----------------------------------------------------------------------------- eval
def _set_aside_other_model(folder: Path, model: str) -> None:
    """A row's folder that holds another model's samples (an earlier stage ran again, e.g. extended, so the
    row's checkpoint changed) is renamed to <row>.replaced-N, not mixed with the new model's samples."""
    saved = folder / "config.yaml"
    if not saved.is_file() or (yaml.safe_load(saved.read_text()) or {}).get("model") == model:
        return
    n = 1
    while folder.with_name(f"{folder.name}.replaced-{n}").exists():
        n += 1
    folder.rename(folder.with_name(f"{folder.name}.replaced-{n}"))
    say(f"{folder} held another model's evaluation; moved to {folder.name}.replaced-{n}")


def _evaluated(stage: Stage, cfg: Any, what: str):
    """Run `nemo-lead eval` with `cfg`; its `Prepared` once every sample is in its folder. A failure, or a
    stop before the job's end (exit 0 with samples still missing), raises StageStopped."""
    from nemo_lead.eval.command import run_eval
    from nemo_lead.eval.runner import prepare, samples_left

    status = run_eval(cfg)
    if status:
        raise StageStopped(f"stage {stage.name!r}: {what} exited with status {status}", status)
    prep = prepare(cfg)
    left = samples_left(prep)
    if left:
        raise StageStopped(f"stage {stage.name!r}: {what} stopped with {left} samples to go ({cfg.out})", 0)
    return prep


def run_eval_stage(stage: Stage) -> dict[str, str]:
    """`nemo-lead eval` of every row's model, each into OUT/stages/NAME/<row> (each resumes there)."""
    for row in stage.models:
        cfg = eval_row_config(stage, row)
        _set_aside_other_model(Path(cfg.out), cfg.model)
        say(f"{stage.name}: evaluating {row!r} ({cfg.model})")
        _evaluated(stage, cfg, f"the evaluation of {row!r}")
    return {"folder": str(stage.folder.resolve())}
