"""`nemo-lead plot`: validation Pass@1 and mean response length over RL steps (the paper's Figure 2), a PNG.

    nemo-lead plot --runs runs/grpo runs/grpo-length runs/lead --out figure2.png     # runs side by side
    nemo-lead plot --runs RUN_STAGE1 RUN_STAGE2 chain=true --out stages.png           # one run after another

Each run folder's val.jsonl (written by `nemo-lead rl`: one line per validation with "step", "pass@1",
"mean_length", ...) gives one curve per panel. With `chain`, the runs are consecutive stages of one training
(stage 2 starting from stage 1's final checkpoint): each run's steps are drawn after the previous run's last
step, so the x axis counts RL steps from the start of the first.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from nemo_lead.eval.metrics import MEAN_LENGTH, PASS_AT_1
from nemo_lead.training.run.folder import VALIDATION_FILE, read_validation


@dataclass
class PlotConfig:
    runs: list[str] = field(default_factory=list)  # RL run folders (with val.jsonl)
    out: Optional[str] = None  # the PNG; None: validation.png in the first run folder
    labels: list[str] = field(default_factory=list)  # one per run; []: the folder names
    chain: bool = False  # the runs are consecutive stages: steps continue from one run to the next
    title: str = ""

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("runs must name at least one RL run folder (--runs RUN [RUN ...])")
        if self.labels and len(self.labels) != len(self.runs):
            raise ValueError(f"labels: {len(self.labels)} given for {len(self.runs)} runs")


def validation_rows(run: str | Path) -> list[dict]:
    """The rows of RUN/val.jsonl in step order (`run_folder.read_validation`); an error when there are none."""
    rows = read_validation(run)
    if not rows:
        raise FileNotFoundError(f"{Path(run) / VALIDATION_FILE}: no validation log (an RL run folder with "
                                "validation.data set has one)")
    return rows


def curves(runs: list[str], chain: bool = False) -> list[list[tuple[int, float, float]]]:
    """Per run: (x step, pass@1, mean length) points; with `chain`, x continues after the previous run."""
    out, offset = [], 0
    for run in runs:
        rows = validation_rows(run)
        if chain and out and out[-1] and rows and rows[0]["step"] == 0:
            rows = rows[1:]  # a stage's step-0 validation is the previous stage's final model again
        points = [(offset + int(r["step"]), float(r[PASS_AT_1]), float(r[MEAN_LENGTH])) for r in rows]
        out.append(points)
        if chain and points:
            offset = points[-1][0]
    return out


def default_labels(runs: list[str]) -> list[str]:
    """Folder names; where they clash (OUT/stages/rl of several recipe runs), the run folder's name too."""
    paths = [Path(r).resolve() for r in runs]
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    longer = [f"{p.parent.parent.name}/{p.name}" if p.parent.name == "stages" else str(p) for p in paths]
    return longer if len(set(longer)) == len(longer) else [str(p) for p in paths]


def plot_validation(runs: list[str], out: str | Path, labels: list[str] | None = None, chain: bool = False,
                    title: str = "") -> Path:
    """Two panels, validation Pass@1 and mean response length against RL steps; one curve per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(labels) if labels else default_labels(runs)
    fig, (acc, length) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, points in zip(labels, curves(runs, chain)):
        if not points:
            continue
        steps = [p[0] for p in points]
        acc.plot(steps, [p[1] for p in points], marker="o", markersize=3, label=label)
        length.plot(steps, [p[2] for p in points], marker="o", markersize=3, label=label)
    for ax, name in ((acc, "validation Pass@1"), (length, "mean response length (tokens)")):
        ax.set_xlabel("RL step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def run_plot(cfg: PlotConfig) -> int:
    out = cfg.out or str(Path(cfg.runs[0]) / "validation.png")
    try:
        path = plot_validation(cfg.runs, out, cfg.labels, cfg.chain, cfg.title)
    except (OSError, ValueError, KeyError) as e:
        print(f"nemo-lead plot: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0
