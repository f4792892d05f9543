"""The run folder's summary: OUT/summary.json, OUT/summary.md (a table like the paper's Table 2), and the two
figures: OUT/validation.png (Figure 2: validation Pass@1 and length over the RL stages' steps) and
OUT/accuracy_vs_budget.png (Figure 3: accuracy within a token budget, one curve per evaluated model).

summary.json: {"recipe", "out", "rows": [...], "figures": {...}}, one row per evaluated model and dataset:
name, stage, dataset, checkpoint (the model evaluated), data (the problem file or built-in name), n,
temperature, top_p, max_tokens, seed, cons@k, pass@1, mean_length, complete, eval_folder,
accuracy_vs_budget, and `command`: the `nemo-lead eval` command line that reproduces the row (the flags
above, plus every other setting that differs from `nemo-lead eval`'s defaults). Every number comes from the eval
folders' own summary.json.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from nemo_lead.config.dotted import flatten
from nemo_lead.config.fields import keys_where
from nemo_lead.config.loading import load_config, to_yaml
from nemo_lead.eval.calls import dataset_name
from nemo_lead.eval.metrics import CONS_AT_K, MEAN_LENGTH, PASS_AT_1
from nemo_lead.eval.report import markdown_table, read_summary
from nemo_lead.runtime.files import write_atomic, write_json
from nemo_lead.training.run.folder import VALIDATION_FILE
from nemo_lead.training.run.plot import plot_validation

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
FIGURE2 = "validation.png"
FIGURE3 = "accuracy_vs_budget.png"
EVAL_FLAGS = (("model", "--model"), ("data", "--data"), ("sampling.n", "--samples"), ("sampling.temperature", "--temperature"),
              ("sampling.top_p", "--top-p"), ("sampling.max_tokens", "--max-tokens"), ("sampling.seed", "--seed"))


def eval_command(cfg, data: str) -> str:
    """`nemo-lead eval ...` reproducing `cfg` on `data`: the usual flags, then each other key that differs
    from the command's defaults (prompt, engine, ...)."""
    from nemo_lead.eval.config import EvalConfig

    mine = flatten(yaml.safe_load(to_yaml(cfg)), keep_empty=True)
    base = flatten(yaml.safe_load(to_yaml(load_config(EvalConfig, [], [f"model={cfg.model}"]))), keep_empty=True)
    parts = ["nemo-lead", "eval"]
    values = {**mine, "data": data}
    for key, flag in EVAL_FLAGS:
        parts += [flag, str(values[key])]
    report_only = keys_where(EvalConfig, results=False)  # output folder, report columns, grader processes, ...
    for key, value in mine.items():
        if key in dict(EVAL_FLAGS) or key.split(".")[0] in report_only:
            continue
        if value != base.get(key):
            text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
            parts.append(f"{key}={text[:-4].strip() if text.endswith(chr(10) + '...') else text}")
    return " ".join(shlex.quote(p) for p in parts)


def eval_rows(stage_name: str, configs: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of one eval stage: {row name: its EvalConfig} -> one entry per (row, dataset) with results."""
    from nemo_lead.eval.config import dataset_specs
    rows = []
    for name, cfg in configs.items():
        folder = Path(cfg.out)
        if not (folder / "summary.json").is_file():
            continue
        summary = read_summary(str(folder))
        specs = {dataset_name(s): s for s in dataset_specs(cfg.data)}
        s = summary["sampling"]
        for dataset, d in summary["datasets"].items():
            data = specs.get(dataset, dataset)
            rows.append({
                "name": name, "stage": stage_name, "dataset": dataset, "checkpoint": str(cfg.model), "data": data,
                "n": s["n"], "temperature": s["temperature"], "top_p": s["top_p"], "max_tokens": s["max_tokens"],
                "seed": s["seed"], **{k: d[k] for k in (CONS_AT_K, PASS_AT_1, MEAN_LENGTH)},
                "complete": d["complete"], "problems": d["problems"], "eval_folder": str(folder.resolve()),
                "accuracy_vs_budget": d["accuracy_vs_budget"], "command": eval_command(cfg, data),
            })
    return rows


def table_markdown(rows: list[dict[str, Any]]) -> str:
    """Table 2's shape: a row per model, Cons@k / Pass@1 / mean length per dataset."""
    names = list(dict.fromkeys(r["name"] for r in rows))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    header = ["model"]
    for d in datasets:
        ks = {r["n"] for r in rows if r["dataset"] == d}
        header += [f"{d} Cons@{ks.pop() if len(ks) == 1 else 'k'}", f"{d} Pass@1", f"{d} mean length"]
    body = []
    for name in names:
        line = [name]
        for d in datasets:
            r = next((r for r in rows if r["name"] == name and r["dataset"] == d), None)
            line += ([f"{r[CONS_AT_K]:.3f}", f"{r[PASS_AT_1]:.3f}", f"{r[MEAN_LENGTH]:,.1f}"] if r else ["-"] * 3)
        body.append(line)
    return markdown_table(header, body)


def plot_budget_curves(rows: list[dict[str, Any]], path: Path) -> Path:
    """Figure 3: accuracy within a token budget against the budget, a panel per dataset, a curve per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.6 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for r in (r for r in rows if r["dataset"] == dataset):
            points = sorted((int(b), v) for b, v in r["accuracy_vs_budget"].items())
            ax.plot([b for b, _ in points], [v for _, v in points], marker="o", markersize=3, label=r["name"])
        ax.set_title(f"{dataset}: T {rows[0]['temperature']:g}, n {rows[0]['n']}", fontsize=10)
        ax.set_xlabel("token budget (response tokens)")
        ax.set_ylabel("accuracy within budget (Pass@1)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_summary(out: Path, recipe: str, rows: list[dict[str, Any]], rl_runs: list[tuple[str, str]],
                  stage_times: dict[str, float]) -> str:
    """Write summary.json / summary.md and the figures into `out`; returns the markdown."""
    figures: dict[str, str] = {}
    with_val = [(name, run) for name, run in rl_runs if (Path(run) / VALIDATION_FILE).is_file()]
    if with_val:
        plot_validation([r for _, r in with_val], out / FIGURE2, labels=[n for n, _ in with_val], chain=True,
                        title="validation over the RL stages")
        figures["validation"] = str((out / FIGURE2).resolve())
    if rows:
        plot_budget_curves(rows, out / FIGURE3)
        figures["accuracy_vs_budget"] = str((out / FIGURE3).resolve())
    summary = {"recipe": recipe, "out": str(out.resolve()), "rows": rows, "figures": figures,
               "stage_seconds": stage_times}
    md = [f"# {Path(recipe).stem}: evaluation of each stage's final checkpoint\n"]
    if rows:
        first = rows[0]
        md += [table_markdown(rows),
               f"\nSampling: T {first['temperature']:g}, top-p {first['top_p']:g}, {first['n']} samples per problem, "
               f"max {first['max_tokens']} tokens, seed {first['seed']}. Reproduce a row with its `command` in "
               f"summary.json.\n"]
        if any(not r["complete"] for r in rows):
            md.append("\nSome rows are incomplete (their evaluation was interrupted); rerun to finish them.\n")
    else:
        md.append("No evaluation has finished yet.\n")
    for name, path in figures.items():
        md.append(f"\n![{name}]({Path(path).name})\n")
    if stage_times:
        md.append("\nStage wall times: " + ", ".join(f"{k} {v:.0f} s" for k, v in stage_times.items()) + "\n")
    text = "".join(md)
    write_json(out / SUMMARY_JSON, summary)
    write_atomic(out / SUMMARY_MD, text)
    return text
