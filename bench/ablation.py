"""Table 1's ablation ladder on the demo task: GRPO -> + length reward -> + advantage reweighting -> + explicit
penalty (LEAD), plus DGPO and Dr. GRPO, each over several seeds, from one SFT checkpoint (issue 14).

    python bench/ablation.py --out runs/ablation            # the whole study (about 50 minutes on 2 cores)
    python bench/ablation.py --out runs/ablation --report   # tables, plots and ABLATION.md from what finished

1. The demo recipe's `prepare`, `sft` and `stage1_data` stages (`nemo-lead run demo --only ...`) into
   OUT/demo, or an existing demo run folder given with `--demo-run`.
2. For every setting x seed, `nemo-lead rl` from the SFT checkpoint with the demo's stage-1 settings
   (16 prompts x 8 samples, 128 tokens, T 1, lr 3e-5) and the same number of steps; only `--preset` and
   `--seed` differ (Dr. GRPO's constant normaliser is also told the budget: lead.max_response_len=128).
   Validation on the held-out set every `--val-every` steps (2 samples per problem). Then `nemo-lead eval`
   of the final checkpoint on the held-out set (8 samples, T 1, the fixed budget, one sampling seed for all).
   `--jobs` runs at once, one thread each. Each run and evaluation resumes itself in its folder, so a rerun
   of the same command skips what finished and continues what did not.
3. Aggregation over seeds (mean and sample standard deviation), Figure 2 (validation Pass@1 and length over
   steps, seed means) and Figure 3 (accuracy against the token budget) as PNGs, and the generated block of
   bench/ABLATION.md (the text outside that block is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from results_md import machine_line  # noqa: E402

from nemo_lead.training.run.plot import read_validation  # noqa: E402

# (label, preset, extra overrides): the paper's Table 1 ladder, then the two other baselines
SETTINGS = [
    ("GRPO", "grpo", []),
    ("GRPO + length reward", "grpo_length", []),
    ("+ advantage reweighting", "grpo_length_reweight", []),
    ("+ explicit penalty (LEAD)", "lead", []),
    ("DGPO", "dgpo", []),
    ("Dr. GRPO", "dr_grpo", ["lead.max_response_len={max_tokens}"]),
]
PROMPT_SUFFIX = "prompt.suffix==?"  # the demo's prompt (DEMO_PROMPT)
EVAL_SEED = 1234
HARD = (5, 6)  # operands: the held-out set's hard end, for "reweighting raises Pass@1 on the harder set"
MD = REPO / "bench" / "ABLATION.md"
PNG_DIR = REPO / "bench" / "ablation"
BEGIN, END = "<!-- ablation:generated -->", "<!-- /ablation:generated -->"
_print_lock = threading.Lock()
_report_lock = threading.Lock()


def log(msg: str) -> None:
    with _print_lock:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cli() -> list[str]:
    return [sys.executable, "-m", "nemo_lead.cli"]


def run_logged(cmd: list[str], logfile: Path) -> float:
    """Run `cmd` with its output appended to `logfile`; the wall seconds; raises on a non-zero exit."""
    logfile.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(logfile, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if rc:
        raise RuntimeError(f"exit {rc}: {' '.join(cmd)} (log: {logfile})")
    return time.monotonic() - t0


# ----------------------------------------------------------------------------- stage 1: demo data + SFT
def demo_outputs(demo: Path) -> dict:
    state = json.loads((demo / "pipeline_state.json").read_text())["stages"]
    return {name: state[name]["outputs"] for name in ("prepare", "sft", "stage1_data")
            if state.get(name, {}).get("status") == "done"}


def ensure_demo(demo: Path, make: bool) -> dict:
    """Paths of the SFT checkpoint, the RL problems and the held-out set (making the stages when `make`)."""
    for stage in ("prepare", "sft", "stage1_data"):
        done = demo_outputs(demo) if (demo / "pipeline_state.json").exists() else {}
        if stage in done:
            continue
        if not make:
            raise SystemExit(f"{demo}: stage {stage} is not finished (run without --demo-run to make it)")
        log(f"demo: {stage}")
        run_logged(cli() + ["run", "demo", "--out", str(demo), "--only", stage], demo.parent / "logs" / "demo.log")
    out = demo_outputs(demo)
    return {"sft": out["sft"]["checkpoint"], "problems": out["stage1_data"]["data"],
            "heldout": out["prepare"]["heldout"]}


# ----------------------------------------------------------------------------- stage 2: RL + eval per run
def rl_cmd(args, paths: dict, preset: str, extra: list[str], seed: int, folder: Path) -> list[str]:
    return cli() + [
        "rl", "--model", paths["sft"], "--data", paths["problems"], "--val-data", paths["heldout"],
        "--out", str(folder), "--steps", str(args.steps), "--preset", preset, "--seed", str(seed),
        "--prompts-per-step", "16", "--n", "8", "--max-tokens", str(args.max_tokens), "--save-every", "20",
        "actor.optim.lr=3e-5", "rollout.temperature=1.0", "rollout.top_p=1.0",
        f"validation.every={args.val_every}", "validation.n=2", "validation.temperature=1.0",
        "validation.top_p=1.0", PROMPT_SUFFIX, "verify.workers=1", "keep_last=1", "log_rollouts=false",
        "tensorboard=false", "progress=lines",
    ] + [e.format(max_tokens=args.max_tokens) for e in extra]


def eval_cmd(args, paths: dict, checkpoint: str, folder: Path) -> list[str]:
    half = args.max_tokens // 2
    return cli() + [
        "eval", "--model", checkpoint, "--data", paths["heldout"], "--out", str(folder), "--n", "8",
        "--temperature", "1.0", "--top-p", "1.0", "--max-tokens", str(args.max_tokens),
        "--seed", str(EVAL_SEED), "problems_per_call=32", PROMPT_SUFFIX, "verify.workers=1",
        f"report_budgets=[{half // 2},{half},{args.max_tokens}]",
    ]


def eval_done(folder: Path) -> bool:
    s = folder / "summary.json"
    return s.is_file() and all(d.get("complete") for d in json.loads(s.read_text())["datasets"].values())


def one_run(args, paths: dict, out: Path, preset: str, extra: list[str], seed: int, timings: dict) -> None:
    name = f"{preset}-s{seed}"
    run, ev, logfile = out / "rl" / name, out / "eval" / name, out / "logs" / f"{name}.log"
    if not (run / "done.json").is_file():
        log(f"rl {name}: start")
        secs = run_logged(rl_cmd(args, paths, preset, extra, seed, run), logfile)
        timings[f"rl/{name}"] = secs
        log(f"rl {name}: done in {secs:.0f} s")
    checkpoint = json.loads((run / "done.json").read_text())["checkpoint"]
    if not eval_done(ev):
        secs = run_logged(eval_cmd(args, paths, checkpoint, ev), logfile)
        timings[f"eval/{name}"] = secs
        log(f"eval {name}: done in {secs:.0f} s")


# ----------------------------------------------------------------------------- stage 3: report
def mean_sd(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def fmt(values: list[float], digits: int = 3) -> str:
    m, s = mean_sd(values)
    if m != m:
        return "-"
    return f"{m:.{digits}f}" if s != s else f"{m:.{digits}f} ± {s:.{digits}f}"


def eval_metrics(folder: Path, difficulty: dict, half: int) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    d = next(iter(summary["datasets"].values()))
    curve = {int(b): a for b, a in d["accuracy_vs_budget"].items()}
    hard = [json.loads(line)["correct"] for line in (folder / "samples.jsonl").read_text().splitlines()
            if line.strip() and difficulty.get(json.loads(line)["problem_id"]) in HARD]
    return {"cons": d["cons@k"], "pass1": d["pass@1"], "length": d["mean_length"], "half": curve[half],
            "hard": statistics.fmean(hard) if hard else float("nan"), "curve": curve, "k": d["samples_per_problem"]}


def collect(args, out: Path, paths: dict) -> dict:
    """Per setting: finished seeds' eval metrics and validation curves; plus the SFT checkpoint's row."""
    difficulty = {}
    for line in Path(paths["heldout"]).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            difficulty[row["id"]] = row["difficulty"]
    half = args.max_tokens // 2
    res = {"sft": eval_metrics(out / "eval" / "sft", difficulty, half) if eval_done(out / "eval" / "sft") else None,
           "settings": []}
    for label, preset, _ in SETTINGS:
        seeds, metrics, vals = [], [], []
        for seed in args.seeds:
            name = f"{preset}-s{seed}"
            if eval_done(out / "eval" / name):
                seeds.append(seed)
                metrics.append(eval_metrics(out / "eval" / name, difficulty, half))
                vals.append(read_validation(out / "rl" / name))
        res["settings"].append({"label": label, "preset": preset, "seeds": seeds, "metrics": metrics, "val": vals})
    return res


def val_mean(vals: list[list[dict]], key: str) -> tuple[list[int], list[float], list[float]]:
    """Steps common to all seeds; mean and sd of `key` over seeds at each."""
    steps = sorted(set.intersection(*[{r["step"] for r in v} for v in vals])) if vals else []
    means, sds = [], []
    for st in steps:
        xs = [next(r[key] for r in v if r["step"] == st) for v in vals]
        m, s = mean_sd(xs)
        means.append(m)
        sds.append(0.0 if s != s else s)
    return steps, means, sds


def plots(res: dict, png_dir: Path, steps_total: int) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png_dir.mkdir(parents=True, exist_ok=True)
    fig, (acc, length) = plt.subplots(1, 2, figsize=(11, 4))
    for s in res["settings"]:
        if not s["val"]:
            continue
        label = f"{s['label']} (n={len(s['seeds'])})"
        for ax, key in ((acc, "pass@1"), (length, "mean_length")):
            steps, m, sd = val_mean(s["val"], key)
            line, = ax.plot(steps, m, marker="o", markersize=3, label=label)
            ax.fill_between(steps, [a - b for a, b in zip(m, sd)], [a + b for a, b in zip(m, sd)],
                            color=line.get_color(), alpha=0.12)
    for ax, name in ((acc, "validation Pass@1 (held-out, 2 samples)"), (length, "mean response length (tokens)")):
        ax.set_xlabel("RL step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    acc.legend(fontsize=7)
    fig.suptitle(f"Figure 2 on the demo task: mean over seeds (band: ± 1 sd), {steps_total} steps", fontsize=10)
    fig.tight_layout()
    fig2 = png_dir / "validation.png"
    fig.savefig(fig2, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    if res["sft"]:
        c = res["sft"]["curve"]
        ax.plot(sorted(c), [c[b] for b in sorted(c)], "k--", label="SFT checkpoint")
    for s in res["settings"]:
        if not s["metrics"]:
            continue
        budgets = sorted(s["metrics"][0]["curve"])
        ax.plot(budgets, [statistics.fmean(m["curve"][b] for m in s["metrics"]) for b in budgets],
                marker="o", markersize=3, label=f"{s['label']} (n={len(s['seeds'])})")
    ax.set_xlabel("token budget")
    ax.set_ylabel("accuracy (held-out, 8 samples, mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Figure 3 on the demo task: accuracy against budget", fontsize=10)
    fig.tight_layout()
    fig3 = png_dir / "accuracy_vs_budget.png"
    fig.savefig(fig3, dpi=110)
    plt.close(fig)
    return [fig2, fig3]


def diff(a: dict, b: dict, key: str, ratio: bool = False) -> str:
    """b - a (or b / a - 1) on seed means, with each side's sd for scale."""
    xa = [m[key] for m in a["metrics"]]
    xb = [m[key] for m in b["metrics"]]
    if not xa or not xb:
        return "-"
    ma, sa = mean_sd(xa)
    mb, sb = mean_sd(xb)
    d = (mb / ma - 1) * 100 if ratio else mb - ma
    unit = "%" if ratio else ""
    digits = 1 if key == "length" else 3
    sds = "" if sa != sa or sb != sb else f" (sd {sa:.{digits}f} / {sb:.{digits}f})"
    return f"{d:+.{1 if ratio else 3}f}{unit}{sds}"


def report(args, out: Path, paths: dict, timings: dict, wall: float | None, machine: str) -> str:
    res = collect(args, out, paths)
    figs = plots(res, PNG_DIR, args.steps)
    half = args.max_tokens // 2
    expected = len(SETTINGS) * len(args.seeds)
    finished = sum(len(s["seeds"]) for s in res["settings"])
    k = next((m["k"] for s in res["settings"] for m in s["metrics"]), 8)
    lines = []
    if finished < expected:
        missing = [f"{s['preset']} seed {seed}" for s in res["settings"] for seed in args.seeds
                   if seed not in s["seeds"]]
        lines += [f"**PARTIAL RESULTS: {finished} of {expected} runs finished.** Missing: {', '.join(missing)}. "
                  "The numbers below average only the finished seeds (column n); rerun the command to finish.", ""]
    else:
        lines += [f"All {expected} runs finished ({len(SETTINGS)} settings x {len(args.seeds)} seed"
                  f"{'s' if len(args.seeds) > 1 else ''}).", ""]
    lines += [
        f"Held-out set: 160 problems (32 per chain length 2-6), {k} samples each at T 1, budget {args.max_tokens} "
        f"tokens, sampling seed {EVAL_SEED}. Mean ± sample sd over seeds; n = seeds. Acc@{half} = accuracy when "
        f"every response is cut at {half} tokens (half the budget); hard = Pass@1 on the chains of "
        f"{HARD[0]}-{HARD[1]} operands (64 problems).", "",
        f"| setting | preset | n | Cons@{k} | Pass@1 | mean length | Acc@{half} | Pass@1 hard |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    if res["sft"]:
        m = res["sft"]
        lines.append(f"| SFT checkpoint (start of every run) | - | - | {m['cons']:.3f} | {m['pass1']:.3f} | "
                     f"{m['length']:.1f} | {m['half']:.3f} | {m['hard']:.3f} |")
    for s in res["settings"]:
        ms = s["metrics"]
        lines.append(f"| {s['label']} | `{s['preset']}` | {len(ms)} | {fmt([m['cons'] for m in ms])} | "
                     f"{fmt([m['pass1'] for m in ms])} | {fmt([m['length'] for m in ms], 1)} | "
                     f"{fmt([m['half'] for m in ms])} | {fmt([m['hard'] for m in ms])} |")
    by = {s["preset"]: s for s in res["settings"]}
    for s in res["settings"]:  # mean validation Pass@1 over the run's validation points (Figure 2's area)
        for m, v in zip(s["metrics"], s["val"]):
            m["val"] = statistics.fmean(r["pass@1"] for r in v if r["step"] > 0)

    lines += [
        "", "Differences between consecutive rungs (seed means; each side's sd in brackets):", "",
        f"| step of the ladder | mean length | Pass@1 | Pass@1 hard | Acc@{half} | mean validation Pass@1 over steps |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for a, b, name in (("grpo", "grpo_length", "GRPO -> + length reward"),
                       ("grpo_length", "grpo_length_reweight", "-> + advantage reweighting"),
                       ("grpo_length_reweight", "lead", "-> + explicit penalty (LEAD)"),
                       ("grpo", "lead", "GRPO -> LEAD")):
        lines.append(f"| {name} | {diff(by[a], by[b], 'length', ratio=True)} | {diff(by[a], by[b], 'pass1')} | "
                     f"{diff(by[a], by[b], 'hard')} | {diff(by[a], by[b], 'half')} | {diff(by[a], by[b], 'val')} |")
    lines += ["", "Per seed (Pass@1 / mean length):", "",
              "| setting | " + " | ".join(f"seed {seed}" for seed in args.seeds) + " |",
              "| --- |" + " --- |" * len(args.seeds)]
    for s in res["settings"]:
        cells = []
        for seed in args.seeds:
            if seed in s["seeds"]:
                m = s["metrics"][s["seeds"].index(seed)]
                cells.append(f"{m['pass1']:.3f} / {m['length']:.1f}")
            else:
                cells.append("not finished")
        lines.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    rl_times = [v for key, v in timings.items() if key.startswith("rl/")]
    ev_times = [v for key, v in timings.items() if key.startswith("eval/")]
    lines += ["", "![Figure 2: validation Pass@1 and length over steps](ablation/validation.png)", "",
              "![Figure 3: accuracy against budget](ablation/accuracy_vs_budget.png)", "",
              "Command (from the repository root):", "", "```bash",
              command_line(args),
              "```", "",
              f"Each RL run: {args.steps} steps x 16 prompts x 8 samples ({args.steps * 128:,} rollouts), max "
              f"{args.max_tokens} tokens, T 1, lr 3e-5, validation every {args.val_every} steps (160 held-out "
              f"problems x 2 samples); {args.jobs} run{'s' if args.jobs > 1 else ''} at once, OMP_NUM_THREADS=1 "
              "each.", "",
              "Machine: " + machine + ".", ""]
    if rl_times:
        lines.append(f"Timings: RL run {statistics.fmean(rl_times):.0f} s mean "
                     f"({min(rl_times):.0f}-{max(rl_times):.0f} s, {len(rl_times)} runs), evaluation "
                     f"{statistics.fmean(ev_times):.0f} s mean" + (f"; study wall time {wall / 60:.1f} min."
                                                                  if wall else "."))
    block = "\n".join(lines)
    write_md(block)
    (out / "report.json").write_text(json.dumps({"timings": timings, "wall_s": wall, "finished": finished,
                                                 "expected": expected, "machine": machine}, indent=1))
    log(f"report: {finished}/{expected} runs; {MD.relative_to(REPO)}, {', '.join(str(f.name) for f in figs)}")
    return block


def command_line(args) -> str:
    """The study's command with the options that differ from the defaults."""
    parts = [f"python bench/ablation.py --out {args.out}"]
    if args.demo_run:
        parts.append(f"--demo-run {args.demo_run}")
    for flag, value, default in (("--seeds", args.seeds, [1, 2, 3]), ("--steps", args.steps, 60),
                                 ("--max-tokens", args.max_tokens, 128), ("--val-every", args.val_every, 5),
                                 ("--jobs", args.jobs, 2)):
        if value != default:
            parts.append(f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}")
    return " ".join(parts)


def write_md(block: str) -> None:
    generated = f"{BEGIN}\n{block}\n{END}"
    if MD.exists() and BEGIN in MD.read_text():
        text = MD.read_text()
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + generated + text[end:]
    else:
        text = ("# Ablation: Table 1's ladder on the demo task\n\n" + generated +
                "\n\n## Reading\n\n(not written yet)\n")
    MD.write_text(text)


# ----------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/ablation", help="study folder (resumable)")
    ap.add_argument("--demo-run", default=None, help="a demo run folder with prepare, sft and stage1_data done")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=128, help="rollout and evaluation budget")
    ap.add_argument("--val-every", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--report", action="store_true", help="only aggregate what finished")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    out = Path(args.out).resolve()
    load_start = os.getloadavg()
    demo = Path(args.demo_run).resolve() if args.demo_run else out / "demo"
    paths = ensure_demo(demo, make=not args.demo_run and not args.report)
    tfile = out / "timings.json"
    timings = json.loads(tfile.read_text()) if tfile.exists() else {}
    wall = None
    if not args.report:
        t0 = time.monotonic()
        if not eval_done(out / "eval" / "sft"):
            run_logged(eval_cmd(args, paths, paths["sft"], out / "eval" / "sft"), out / "logs" / "sft-eval.log")
        # seed-major: every setting gets its first seed before any gets its second
        jobs = [(preset, extra, seed) for seed in args.seeds for _, preset, extra in SETTINGS]
        errors = []

        def work(job):
            try:
                one_run(args, paths, out, *job, timings)
            except Exception as e:  # keep the other runs going; reported at the end
                errors.append(str(e))
                log(f"FAILED: {e}")
            tfile.write_text(json.dumps(timings, indent=1))
            try:
                with _report_lock:
                    report(args, out, paths, timings, None, machine_line(load_start=load_start))
            except Exception as e:
                log(f"report failed: {e!r}")

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(work, jobs))
        wall = time.monotonic() - t0
        if errors:
            log(f"{len(errors)} runs failed: " + "; ".join(errors))
    machine = machine_line(load_start=load_start)
    if args.report:  # the machine as the study that ran saw it
        previous = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
        wall = previous.get("wall_s")
        machine = previous.get("machine") or machine_line() + " (when the report was made)"
    report(args, out, paths, timings, wall, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
