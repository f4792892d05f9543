"""Scores from graded samples, and the tables people read: summary.{json,md}, `--compare`, the figure.

Per dataset (metrics.py has the definitions):
    Cons@k    majority vote over all k = n samples of a problem, then correct or not; averaged over problems
    Pass@1    mean correctness over the samples of a problem, averaged over problems
    Len_avg   mean response tokens over all samples (counted as the engine's max_tokens counts them:
              every generated token, the EOS that ended the response included)
    acc@b     Pass@1 when a sample also needs length <= b to count (the accuracy-vs-budget curve)
    answer_extracted  share of samples with an answer the grader could read (`answer_region`): a model that
              never writes a final \\boxed{} scores 0 whatever it knows (SFT it on boxed traces first)
A problem with fewer than n samples (an unfinished run) is scored on what it has and the dataset is
marked `complete: false`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nemo_lead.data import Problem
from nemo_lead.eval.metrics import (
    CONS_AT_K,
    MEAN_LENGTH,
    OLD_SCORE_NAMES,
    PASS_AT_1,
    accuracy_vs_budget,
    cons_at_k,
    mean_length,
    pass_at_k,
)
from nemo_lead.runtime.files import write_atomic

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
FIGURE = "accuracy_vs_budget.png"


def wandb_row(scores: dict[str, Any]) -> dict[str, Any]:
    """One dataset's scores as a flat row (accuracy at each budget as `acc@B`), for a W&B table."""
    flat = {k: v for k, v in scores.items() if not isinstance(v, dict)}
    return {**flat, **{f"acc@{b}": v for b, v in scores.get("accuracy_vs_budget", {}).items()}}


def dataset_summary(name: str, problems: Sequence[Problem], records: dict, n: int, budgets: Sequence[int]) -> dict:
    """The scores of one dataset from its records ({(dataset, problem_id, sample): record})."""
    rows = [[records[(name, p.id, s)] for s in range(n) if (name, p.id, s) in records] for p in problems]
    scored = [(p, r) for p, r in zip(problems, rows) if r]
    if not scored:
        raise ValueError(f"{name}: no graded samples to score")
    correct = [[x["correct"] for x in r] for _, r in scored]
    lengths = [[x["tokens"] for x in r] for _, r in scored]
    flat = [x for _, r in scored for x in r]
    return {
        "problems": len(problems),
        "problems_scored": len(scored),
        "samples": len(flat),
        "samples_per_problem": n,
        "complete": all(len(r) == n for r in rows),
        CONS_AT_K: cons_at_k([[x["extracted"] for x in r] for _, r in scored], [p.answer for p, _ in scored]),
        PASS_AT_1: pass_at_k(correct, 1),
        MEAN_LENGTH: mean_length(lengths),
        "truncated": sum(x["finish_reason"] == "length" for x in flat) / len(flat),
        "no_answer": sum(x["status"] in ("no_answer", "truncated") for x in flat) / len(flat),
        "answer_extracted": sum(x["extracted"] is not None for x in flat) / len(flat),
        "accuracy_vs_budget": {str(b): v for b, v in accuracy_vs_budget(correct, lengths, budgets).items()},
    }


# ----------------------------------------------------------------------------- tables
def _fmt_len(x: float) -> str:
    return f"{x:,.0f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table with padded columns (readable as plain text too)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]) + "\n"


def settings_line(summary: dict[str, Any]) -> str:
    s = summary["sampling"]
    model = summary["model"] + (f" (step {summary['model_step']})" if summary.get("model_step") is not None else "")
    return (f"model {model}; T {s['temperature']:g}, top-p {s['top_p']:g}, n {s['n']}, max_tokens {s['max_tokens']}, "
            f"seed {s['seed']}; answers read {summary['answer_region']}")


def summary_markdown(summary: dict[str, Any]) -> str:
    budgets = [b for b in summary["report_budgets"] if b <= summary["sampling"]["max_tokens"]]
    header = ["dataset", "problems", "Cons@k", "Pass@1", "Len_avg", *[f"acc@{b}" for b in budgets], "truncated",
              "answer extracted"]
    rows = []
    for name, d in summary["datasets"].items():
        acc = d["accuracy_vs_budget"]
        rows.append([name, f"{d['problems_scored']}/{d['problems']}" if not d["complete"] else str(d["problems"]),
                     f"{d[CONS_AT_K]:.3f}", f"{d[PASS_AT_1]:.3f}", _fmt_len(d[MEAN_LENGTH]),
                     *[f"{acc[str(b)]:.3f}" if str(b) in acc else "-" for b in budgets], f"{d['truncated']:.1%}",
                     f"{d['answer_extracted']:.1%}"])
    k = summary.get("scored_samples", summary["sampling"]["n"])  # in rounds: the first round's samples
    rounds = f"; sampled in rounds of {summary['rounds']}: scored on the first" if "rounds" in summary else ""
    return (f"# Evaluation of {Path(summary['model']).name}\n\n{settings_line(summary)}{rounds}\n\n"
            + markdown_table(header, rows).replace("Cons@k", f"Cons@{k}"))


def write_summary(folder: Path, summary: dict[str, Any]) -> None:
    write_atomic(folder / SUMMARY_JSON, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    write_atomic(folder / SUMMARY_MD, summary_markdown(summary))


def read_summary(run: str) -> dict[str, Any]:
    """summary.json of an eval folder (or the file itself)."""
    path = Path(run)
    path = path / SUMMARY_JSON if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{run}: no {SUMMARY_JSON} (is it the output folder of `nemo-lead eval`?)")
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError:
        summary = None
    if not isinstance(summary, dict) or not {"datasets", "sampling", "model"} <= summary.keys():
        raise ValueError(f"{path}: not a summary written by `nemo-lead eval`")
    for scores in summary["datasets"].values():  # older spellings of the three scores
        for old, new in OLD_SCORE_NAMES.items():
            if old in scores:
                scores.setdefault(new, scores.pop(old))
    return summary


def compare_markdown(runs: Sequence[str]) -> str:
    """The paper's table side by side: a row per run, Cons@k / Pass@1 / Len per dataset, then each run's
    settings (runs made with different settings are not comparable cell by cell)."""
    folders = [Path(r) if Path(r).is_dir() else Path(r).parent for r in runs]
    names = [f.name for f in folders]
    labels = [f.name if names.count(f.name) == 1 else str(f) for f in folders]  # full paths when names clash
    summaries = [(label, read_summary(r)) for label, r in zip(labels, runs)]
    datasets: list[str] = []
    for _, s in summaries:
        datasets += [d for d in s["datasets"] if d not in datasets]
    header = ["run"]
    for d in datasets:
        ks = {s["datasets"][d]["samples_per_problem"] for _, s in summaries if d in s["datasets"]}
        header += [f"{d} Cons@{ks.pop() if len(ks) == 1 else 'k'}", f"{d} Pass@1", f"{d} Len"]
    rows = []
    for label, s in summaries:
        row = [label]
        for d in datasets:
            x = s["datasets"].get(d)
            row += [f"{x[CONS_AT_K]:.3f}", f"{x[PASS_AT_1]:.3f}", _fmt_len(x[MEAN_LENGTH])] if x else ["-"] * 3
        rows.append(row)
    notes = "".join(f"- {label}: {settings_line(s)}\n" for label, s in summaries)
    return markdown_table(header, rows) + "\n" + notes


# ----------------------------------------------------------------------------- figure
def plot_accuracy_vs_budget(summary: dict[str, Any], path: Path) -> None:
    """The paper's Figure 3 for one run: accuracy within a token budget, one curve per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, d in summary["datasets"].items():
        points = sorted((int(b), v) for b, v in d["accuracy_vs_budget"].items())
        ax.plot([b for b, _ in points], [v for _, v in points], marker="o", markersize=3, label=name)
    s = summary["sampling"]
    ax.set_xlabel("token budget (response tokens)")
    ax.set_ylabel("accuracy within budget (Pass@1)")
    ax.set_title(f"{Path(summary['model']).name}: T {s['temperature']:g}, top-p {s['top_p']:g}, n {s['n']}", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
