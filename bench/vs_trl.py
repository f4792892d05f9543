"""nemo-lead's RL step against TRL's `GRPOTrainer`: the same model, prompts, reward, group size and update.

    OMP_NUM_THREADS=1 .venv/bin/python bench/vs_trl.py [--steps 10] [--repeats 2] [--record]     # ~8 minutes
    OMP_NUM_THREADS=1 .venv/bin/python bench/vs_trl.py --quick        # a smoke run of every piece, ~1 minute

Needs the `bench` extra (`pip install -e '.[bench]'`: the pinned TRL); the product does not depend on it.

The shared starting point, built in a temporary folder (or `--work DIR`, reused when it already holds it):
the embedded demo task (`nemo_lead.data.demo_task`: chains of one-digit additions and subtractions with
R1-format traces), its tiny Qwen2-shaped model (`DEMO_MODEL`, character vocabulary) from random weights,
a short `nemo-lead sft` so that the model answers some problems and misses others, then `nemo-lead convert
--to-hf`. Both sides start from that HF folder.

The two sides, run one after the other in subprocesses, each on one torch thread (`--repeats` alternates
them: nemo-lead, TRL, nemo-lead, TRL, ...):

- nemo-lead: `nemo-lead rl` with `lead.preset=grpo` (reward 1 for a correct answer, 0 otherwise; advantage
  (R - mean) / (std + eps) per group, no reweighting), no data shuffle, the per-phase seconds of its
  RUN/metrics.jsonl (`time/generate`, `time/verify`, `time/logprobs` + `time/train` + `time/refit`).
- TRL: `GRPOTrainer` on the same HF folder, configured as closely as it allows: `beta=0` (no KL, no
  reference model), `epsilon=0.2`, `loss_type="grpo"` (mean over each sequence's tokens, then over
  sequences: nemo-lead's `lead.loss_agg=seq_mean_token_mean`), `scale_rewards="group"`, `num_iterations=1`,
  one generation batch of prompts x n per optimizer step, constant learning rate, AdamW with the same betas,
  eps, weight decay (0) and gradient clipping (1.0), the same sampling temperature and top-p, no dataset
  shuffle (so both sides see the same prompts at every step), `use_cpu`, fp32, no gradient checkpointing.
  Its reward function is the same check as nemo-lead's: the completion decoded as nemo-lead decodes it
  (special tokens kept, the stop token dropped, `<think>` prepended when the prompt opened it), graded by
  the same `MathVerifier`, 1 if correct else 0; truncated completions score 0 on both sides. Per-phase
  seconds: `transformers.generate` (TRL's `_generate_single_turn`), the reward function
  (`_calculate_rewards`), and the rest of the optimizer step (log-probs, backward, optimizer) measured
  between the trainer's `on_step_begin` and `on_step_end` callbacks, the window nemo-lead's `time/step`
  covers.

Prompts: TRL renders conversational prompts with the tokenizer's chat template; nemo-lead with its
`PromptConfig`. The TRL worker checks that the prompt token ids it generates from equal nemo-lead's
(`prompt_token_ids`) for every prompt of every step, and the run fails otherwise.

Figures: per phase, the median seconds over the steps after the first (warm-up); steps per second and the
ratio nemo-lead / TRL; accuracy and mean response length of each side's training rollouts over the last
steps; and both final models (and the starting one) evaluated the same way, with `nemo-lead eval` on the
demo's held-out problems (disjoint from the RL problems) with one sampling seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
TRL_VERSION = "1.16.0"  # the `bench` extra's pin

FULL = dict(steps=10, prompts=16, n=8, max_tokens=128, lr=1e-4, temperature=1.0, sft_steps=600, sft_batch=32,
            sft_lr=3e-3, eval_n=8, eval_limit=None, repeats=2)
QUICK = dict(steps=3, prompts=4, n=4, max_tokens=32, lr=1e-4, temperature=1.0, sft_steps=20, sft_batch=16,
             sft_lr=3e-3, eval_n=2, eval_limit=10, repeats=1)
SEED = 1234
UPDATE_PHASES = ("time/logprobs", "time/train", "time/refit")


def _env(threads: int = 1) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "WANDB_DISABLED": "true",
            "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)}


def _cli(args: list[str], log: Path, timeout: float) -> None:
    """Run `nemo-lead ARGS` (one thread), output to `log`; fail with its tail."""
    with open(log, "w") as f:
        res = subprocess.run([sys.executable, "-m", "nemo_lead.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                             env=_env(), timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"nemo-lead {args[0]} failed (exit {res.returncode}); last lines of {log}:\n"
                         + "\n".join(log.read_text().splitlines()[-30:]))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# ----------------------------------------------------------------------------- the shared starting point
def prepare(work: Path, shape: dict) -> dict[str, Path]:
    """Demo data, the tiny model, a short SFT, the HF export. Reused when `work` already holds them."""
    from nemo_lead.data.demo_task import DEMO_EXTRA_TOKENS, DEMO_MODEL, write_demo_data
    from nemo_lead.models import write_tiny_model

    data = work / "data"
    start = work / f"start_sft{shape['sft_steps']}"
    paths = {"rl_problems": data / "rl_problems.jsonl", "heldout": data / "heldout.jsonl", "start": start}
    if (start / "config.json").is_file() and paths["rl_problems"].is_file():
        print(f"reusing the starting model {start}", flush=True)
        return paths
    need = shape["steps"] * shape["prompts"] * max(shape["repeats"], 1)
    files = write_demo_data(data, seed=0, sft_traces=shape["sft_steps"] * shape["sft_batch"],
                            rl_stage1=max(need, 64), rl_stage2_extra=0)
    # the RL problems in file order: both sides take prompts_per_step of them per step, unshuffled
    shutil.copy2(files["rl_stage1"], paths["rl_problems"])
    model = write_tiny_model(work / "init", family="qwen2", seed=0, extra_tokens=DEMO_EXTRA_TOKENS, **DEMO_MODEL)
    t0 = time.perf_counter()
    sft_out = work / f"sft{shape['sft_steps']}"
    shutil.rmtree(sft_out, ignore_errors=True)
    _cli(["sft", "--model", str(model), "--data", str(files["sft_traces"]), "--out", str(sft_out),
          "--steps", str(shape["sft_steps"]), "--save-every", str(shape["sft_steps"]),
          f"global_batch={shape['sft_batch']}", "data.max_seq_len=128", f"actor.optim.lr={shape['sft_lr']}",
          f"actor.optim.min_lr={shape['sft_lr'] / 10}", "actor.optim.lr_warmup_steps=10",
          "actor.optim.lr_decay_style=cosine", "actor.optim.weight_decay=0.0", "prompt.suffix='=?'",
          "progress=lines", "tensorboard=false", "keep_last=1"], sft_out.with_suffix(".log"), timeout=1800)
    _cli(["convert", "--from-ckpt", str(sft_out / "checkpoints" / f"step_{shape['sft_steps']:06d}"),
          "--to-hf", str(start)], work / "convert.log", timeout=600)
    print(f"starting model: SFT {shape['sft_steps']} steps + export in {time.perf_counter() - t0:.0f} s", flush=True)
    return paths


# ----------------------------------------------------------------------------- nemo-lead
def run_nemo_lead(work: Path, paths: dict, shape: dict, tag: str) -> dict:
    out = work / f"nl_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    _cli(["rl", "--model", str(paths["start"]), "--data", str(paths["rl_problems"]), "--out", str(out),
          "--steps", str(shape["steps"]), "--save-every", str(shape["steps"]), "--prompts-per-step", str(shape["prompts"]),
          "--n", str(shape["n"]), "--max-tokens", str(shape["max_tokens"]), "--seed", str(SEED), "lead.preset=grpo",
          f"rollout.temperature={shape['temperature']}", "rollout.top_p=1.0", f"actor.optim.lr={shape['lr']}",
          "actor.optim.weight_decay=0.0", "actor.optim.clip_grad=1.0", "data.shuffle=false", "prompt.suffix='=?'",
          "verify.workers=2", "log_rollouts=false", "tensorboard=false", "keep_last=1", "progress=lines"],
         work / f"nl_{tag}.log", timeout=1800)
    wall = time.perf_counter() - t0
    rows = _jsonl(out / "metrics.jsonl")
    steps = [{"generate": r["time/generate"], "score": r["time/verify"],
              "update": sum(r.get(k, 0.0) for k in UPDATE_PHASES), "step": r["time/step"],
              "logprobs": r.get("time/logprobs", 0.0), "train": r.get("time/train", 0.0),
              "accuracy": r["accuracy"], "length": r["response_length/mean"]} for r in rows]
    return {"side": "nemo-lead", "tag": tag, "steps": steps, "wall_s": wall,
            "final": str(out / "checkpoints" / f"step_{shape['steps']:06d}")}


# ----------------------------------------------------------------------------- TRL
def run_trl(work: Path, paths: dict, shape: dict, tag: str) -> dict:
    out = work / f"trl_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    spec = {**shape, "start": str(paths["start"]), "problems": str(paths["rl_problems"]), "out": str(out)}
    (out / "spec.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    with open(work / f"trl_{tag}.log", "w") as f:
        res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--trl-worker", str(out / "spec.json")],
                             stdout=f, stderr=subprocess.STDOUT, env=_env(), timeout=3600)
    if res.returncode != 0:
        log = work / f"trl_{tag}.log"
        raise SystemExit(f"the TRL run failed (exit {res.returncode}); last lines of {log}:\n"
                         + "\n".join(log.read_text().splitlines()[-40:]))
    result = json.loads((out / "result.json").read_text())
    return {"side": "TRL", "tag": tag, "wall_s": time.perf_counter() - t0, "final": str(out / "final"), **result}


def trl_worker(spec_path: str) -> None:
    """One TRL GRPOTrainer run (a subprocess of the benchmark); writes OUT/result.json and OUT/final/."""
    import torch

    torch.set_num_threads(1)
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])

    import transformers
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from nemo_lead.data import chat_messages, format_prompt, load_problems, prompt_token_ids
    from nemo_lead.data.demo_task import DEMO_PROMPT
    from nemo_lead.models import load_tokenizer
    from nemo_lead.verify import MathVerifier
    from nemo_lead.verify.extract import THINK_OPEN, ends_inside_think

    if trl.__version__ != TRL_VERSION:
        print(f"warning: TRL {trl.__version__} installed; the benchmark pins {TRL_VERSION}", flush=True)
    transformers.utils.logging.disable_progress_bar()
    # nemo-lead's tokenizer of the folder, as `nemo-lead rl` loads it (AutoTokenizer would read this folder as a
    # Qwen2Tokenizer, whose pre-tokenizer drops the newline that ends the prompt)
    tok = load_tokenizer(spec["start"])
    problems = load_problems(spec["problems"])
    used = problems[: spec["steps"] * spec["prompts"]]
    expected = {p.id: ids for p, ids in zip(used, prompt_token_ids(tok, used, DEMO_PROMPT))}
    dataset = Dataset.from_list([{"prompt": chat_messages(p, DEMO_PROMPT), "answer": p.answer, "pid": p.id}
                                 for p in used])
    think_prefix = THINK_OPEN if ends_inside_think(format_prompt(tok, "x", DEMO_PROMPT)) else ""
    stop_ids = {tok.eos_token_id}
    verifier = MathVerifier(2, 5.0, "after_think")
    per_step: list[dict] = []
    checked = {"prompts": 0}

    correct = correctness_reward(tok, verifier, stop_ids, think_prefix, per_step)

    class Timed(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            t0 = time.perf_counter()
            result = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            per_step[-1]["generate"] += time.perf_counter() - t0
            per_step[-1]["prompt_ids"] += [list(p) for p in prompt_ids]
            return result

        def _calculate_rewards(self, *args, **kwargs):
            t0 = time.perf_counter()
            result = super()._calculate_rewards(*args, **kwargs)
            per_step[-1]["score"] += time.perf_counter() - t0
            return result

        def _generate_and_score_completions(self, inputs):
            per_step[-1]["pids"] += [x["pid"] for x in inputs]
            return super()._generate_and_score_completions(inputs)

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            per_step.append({"generate": 0.0, "score": 0.0, "t0": time.perf_counter(), "prompt_ids": [], "pids": []})

        def on_step_end(self, args, state, control, **kwargs):
            s = per_step[-1]
            s["step"] = time.perf_counter() - s.pop("t0")
            s["update"] = s["step"] - s["generate"] - s["score"]
            for ids, pid in zip(s.pop("prompt_ids"), s.pop("pids")):
                if ids != expected[pid]:
                    raise RuntimeError(f"TRL's prompt for {pid} differs from nemo-lead's: {ids} != {expected[pid]}")
                checked["prompts"] += 1

    batch = spec["prompts"] * spec["n"]
    config = GRPOConfig(
        output_dir=str(out / "trainer"), max_steps=spec["steps"], seed=1234, data_seed=1234,
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, dataloader_num_workers=0,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, num_generations=spec["n"],
        max_completion_length=spec["max_tokens"], temperature=spec["temperature"], top_p=1.0, top_k=0,
        beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group", num_iterations=1,
        mask_truncated_completions=False, shuffle_dataset=False,
        learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
    )
    trainer = train_and_save(Timed, spec["start"], tok, correct, config, dataset, Clock(), verifier, out / "final")
    (out / "result.json").write_text(json.dumps({
        "steps": per_step, "prompts_checked": checked["prompts"], "trl": trl.__version__,
        "transformers": transformers.__version__, "optim": str(config.optim), "dtype": str(trainer.model.dtype),
    }))


def correctness_reward(tok, verifier, stop_ids: set[int], think_prefix: str, per_step: list[dict]):
    """TRL's reward function: 1 for a correct answer, 0 otherwise, by nemo-lead's decoding (special tokens kept,
    the stop token dropped, `think_prefix` prepended) and `verifier` (lead.preset=grpo); the step's accuracy and
    mean length go into per_step[-1]."""
    from nemo_lead.algorithms import Outcome

    def correct(prompts, completions, completion_ids, answer, **_):
        finished = [bool(ids) and ids[-1] in stop_ids for ids in completion_ids]
        texts = [tok.decode(ids[:-1] if f else ids, skip_special_tokens=False)
                 for ids, f in zip(completion_ids, finished)]
        grades = verifier.grade([think_prefix + t for t in texts], list(answer), finished)
        rewards = [1.0 if g.outcome == Outcome.CORRECT else 0.0 for g in grades]
        per_step[-1].update(accuracy=sum(rewards) / len(rewards),
                            length=sum(len(ids) for ids in completion_ids) / len(completion_ids))
        return rewards

    return correct


def train_and_save(trainer_cls, start: str, tok, reward, config, dataset, clock, verifier, final: Path):
    """Build the trainer on the HF folder `start`, train (the verifier's workers closed however it ends) and
    save the final model with the tokenizer into `final`; the trainer."""
    trainer = trainer_cls(model=start, processing_class=tok, reward_funcs=[reward], args=config, train_dataset=dataset,
                          callbacks=[clock])
    try:
        trainer.train()
    finally:
        verifier.close()
    trainer.save_model(str(final))
    tok.save_pretrained(str(final))
    return trainer


# ----------------------------------------------------------------------------- evaluation
def evaluate(model: str, paths: dict, shape: dict, out: Path) -> dict:
    """Pass@1 and mean length on the held-out problems with nemo-lead's eval (one seed for every model)."""
    shutil.rmtree(out, ignore_errors=True)
    args = ["eval", "--model", model, "--data", str(paths["heldout"]), "--out", str(out), "--n", str(shape["eval_n"]),
            "--temperature", str(shape["temperature"]), "--top-p", "1.0", "--max-tokens", str(shape["max_tokens"]),
            "--seed", "1", "prompt.suffix='=?'", "plot=false", "report_budgets=[]"]
    if shape["eval_limit"]:
        args += ["--limit", str(shape["eval_limit"])]
    _cli(args, out.with_suffix(".log"), timeout=1200)
    d = next(iter(json.loads((out / "summary.json").read_text())["datasets"].values()))
    per_problem: dict[str, list[bool]] = {}
    for row in _jsonl(out / "samples.jsonl"):
        per_problem.setdefault(row["problem_id"], []).append(bool(row["correct"]))
    return {"pass_at_1": d["pass@1"], "len_avg": d["mean_length"], "samples": d["samples"], "problems": d["problems"],
            "per_problem": {k: sum(v) / len(v) for k, v in per_problem.items()}}


def paired_difference(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    """Mean over problems of a's pass rate minus b's (the same problems), and its standard error."""
    diffs = [a[k] - b[k] for k in sorted(a)]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("inf")
    return statistics.mean(diffs), se


# ----------------------------------------------------------------------------- figures
def _median(runs: list[dict], key: str) -> float:
    """Median over every run's steps after the first (warm-up)."""
    return statistics.median(s[key] for r in runs for s in r["steps"][1:])


def _last(runs: list[dict], key: str, k: int) -> float:
    """Mean of `key` over the last `k` steps of every run (training rollouts)."""
    return statistics.mean(s[key] for r in runs for s in r["steps"][-k:])


def summarise(runs: list[dict], evals: dict, shape: dict) -> dict:
    sides = {side: [r for r in runs if r["side"] == side] for side in ("nemo-lead", "TRL")}
    last = max(1, shape["steps"] // 2)
    out = {"shape": shape, "evals": evals, "sides": {}}
    for side, rs in sides.items():
        out["sides"][side] = {
            **{k: _median(rs, k) for k in ("generate", "score", "update", "step", "logprobs", "train")
               if k in rs[0]["steps"][0]},
            "per_run_step_median": [statistics.median(s["step"] for s in r["steps"][1:]) for r in rs],
            "train_accuracy_first": statistics.mean(r["steps"][0]["accuracy"] for r in rs),
            "train_accuracy_last": _last(rs, "accuracy", last), "train_length_last": _last(rs, "length", last),
            "wall_s": [r["wall_s"] for r in rs],
        }
    nl, tr = out["sides"]["nemo-lead"], out["sides"]["TRL"]
    out["ratio"] = tr["step"] / nl["step"]  # (nemo-lead steps/s) / (TRL steps/s)
    out["ratio_per_repeat"] = [t / n for n, t in zip(nl["per_run_step_median"], tr["per_run_step_median"])]
    out["phase_ratios"] = {k: tr[k] / nl[k] for k in ("generate", "score", "update") if nl[k] > 0}
    # held-out Pass@1, nemo-lead - TRL, paired over problems; "equal or better": not lower beyond sampling noise
    diff, se = paired_difference(evals["nemo-lead"]["per_problem"], evals["TRL"]["per_problem"])
    out["accuracy_diff"] = {"diff": diff, "se": se, "equal_or_better": diff >= -2 * se}
    out["trl_meta"] = {k: sides["TRL"][0][k] for k in ("trl", "transformers", "optim", "dtype", "prompts_checked")}
    return out


def print_table(s: dict) -> None:
    nl, tr = s["sides"]["nemo-lead"], s["sides"]["TRL"]
    print("\nmedian seconds per step (steps after the first):")
    print(f"{'phase':<10}{'nemo-lead':>12}{'TRL':>12}{'TRL/nemo-lead':>16}")
    for k in ("generate", "score", "update", "step"):
        print(f"{k:<10}{nl[k]:>12.3f}{tr[k]:>12.3f}{tr[k] / nl[k] if nl[k] else float('nan'):>15.2f}x")
    print(f"steps/s: nemo-lead {1 / nl['step']:.3f}, TRL {1 / tr['step']:.3f}; ratio {s['ratio']:.2f}x "
          f"(per repeat: {', '.join(f'{x:.2f}x' for x in s['ratio_per_repeat'])})")
    for name, e in s["evals"].items():
        print(f"held-out eval, {name}: Pass@1 {e['pass_at_1']:.3f}, mean length {e['len_avg']:.1f} ({e['samples']} samples)")
    diff, se = s["accuracy_diff"]["diff"], s["accuracy_diff"]["se"]
    print(f"held-out Pass@1, nemo-lead - TRL (paired over problems): {diff:+.3f} (standard error {se:.3f})")
    for side, v in s["sides"].items():
        print(f"training rollouts, {side}: accuracy step 1 {v['train_accuracy_first']:.3f}, "
              f"last steps {v['train_accuracy_last']:.3f}, mean length {v['train_length_last']:.1f}")


def record(s: dict, command: str, load_start: tuple[float, ...]) -> None:
    import torch
    from results_md import machine_line
    from results_md import record as record_md

    sh, nl, tr, ev = s["shape"], s["sides"]["nemo-lead"], s["sides"]["TRL"], s["evals"]
    diff, se, equal_or_better = (s["accuracy_diff"][k] for k in ("diff", "se", "equal_or_better"))
    goal = "met" if s["ratio"] >= 2.0 and equal_or_better else "not met"
    reps = len(nl["per_run_step_median"])
    body = [
        f"Command: `{command}`; {machine_line(1, load_start)}; torch {torch.__version__}, "
        f"TRL {s['trl_meta']['trl']}, transformers {s['trl_meta']['transformers']} (TRL optimizer "
        f"`{s['trl_meta']['optim']}`).",
        "",
        f"Setup: the demo task's tiny Qwen2 (`DEMO_MODEL`, character vocabulary) after {sh['sft_steps']} SFT steps, "
        f"exported with `nemo-lead convert --to-hf`; {sh['steps']} RL steps per side and run, {reps} run(s) per side "
        f"alternated; {sh['prompts']} prompts x {sh['n']} samples, at most {sh['max_tokens']} new tokens, "
        f"T {sh['temperature']}, lr {sh['lr']}, reward 1 correct / 0 otherwise (`lead.preset=grpo`; TRL: a reward "
        "function on the same MathVerifier), no KL, clip 0.2, sequence-mean token-mean loss (TRL "
        f"`loss_type=\"grpo\"`), one optimizer step per step; prompt token ids checked identical "
        f"(all {s['trl_meta']['prompts_checked']} generation inputs). One torch thread per side.",
        "",
        "| phase (median s, steps after the first) | nemo-lead | TRL GRPOTrainer | TRL / nemo-lead |",
        "| --- | --- | --- | --- |",
        f"| generation | {nl['generate']:.3f} | {tr['generate']:.3f} | {tr['generate'] / nl['generate']:.2f}x |",
        f"| scoring (MathVerifier) | {nl['score']:.3f} | {tr['score']:.3f} | {tr['score'] / nl['score']:.2f}x |",
        f"| update (nemo-lead: old log-probs + train + refit; TRL: the rest of the step) | {nl['update']:.3f} | "
        f"{tr['update']:.3f} | {tr['update'] / nl['update']:.2f}x |",
        f"| **whole step** | {nl['step']:.3f} | {tr['step']:.3f} | **{s['ratio']:.2f}x** |",
        "",
        f"- nemo-lead's update in parts: old log-probs {nl['logprobs']:.3f} s, train step {nl['train']:.3f} s.",
        f"- Steps per second: nemo-lead {1 / nl['step']:.3f}, TRL {1 / tr['step']:.3f}: **{s['ratio']:.2f}x** "
        f"(per alternated pair: {', '.join(f'{x:.2f}x' for x in s['ratio_per_repeat'])}).",
        f"- Held-out evaluation after {sh['steps']} steps (`nemo-lead eval`, same problems, seed and sampling for "
        f"every model; {ev['start']['problems']} problems x {sh['eval_n']} samples, T {sh['temperature']}): "
        f"start Pass@1 {ev['start']['pass_at_1']:.3f} / mean length {ev['start']['len_avg']:.1f}; "
        f"nemo-lead {ev['nemo-lead']['pass_at_1']:.3f} / {ev['nemo-lead']['len_avg']:.1f}; "
        f"TRL {ev['TRL']['pass_at_1']:.3f} / {ev['TRL']['len_avg']:.1f}. nemo-lead - TRL, paired over problems: "
        f"{diff:+.3f} (standard error {se:.3f}): {'equal or better' if diff >= 0 else 'lower'}"
        f"{'' if diff >= 0 else (', within two standard errors' if equal_or_better else ', beyond two standard errors')}.",
        f"- Training rollouts (each side's own, mean over the last {max(1, sh['steps'] // 2)} steps): nemo-lead "
        f"accuracy {nl['train_accuracy_last']:.3f}, length {nl['train_length_last']:.1f}; TRL "
        f"{tr['train_accuracy_last']:.3f}, {tr['train_length_last']:.1f} (step 1: {nl['train_accuracy_first']:.3f} "
        f"and {tr['train_accuracy_first']:.3f}).",
        f"- Goal (>= 2x TRL's steps/s at equal or better held-out accuracy, read as not lower by more than two "
        f"paired standard errors): {goal}.",
        "- Both take the ratio against the detached log-probs of the update's own forward pass (one generation "
        "batch per optimizer step; nemo-lead's `old_logprobs=auto`), so neither spends a forward pass on old "
        "log-probs. Where the two differ: nemo-lead cuts the update's batch into length-sorted micro-batches "
        "(`actor.micro_batch_overhead_tokens`: few padded tokens) and its engine drops finished sequences from "
        "the decode batch, where TRL pads the generation batch's completions to the longest; the advantage's eps "
        "is 1e-6 in nemo-lead and 1e-4 in TRL; the optimizers are megatron's Adam and torch's AdamW; each side "
        "draws its own samples (own RNG), so the accuracy and length figures differ by sampling noise as well.",
        "- TRL is handed nemo-lead's tokenizer object: transformers' `AutoTokenizer` reads the exported folder as a "
        "`Qwen2Tokenizer`, which drops the newline that ends the prompt; with it, TRL sampled from a prompt the model "
        "was not trained on, and its longer responses made its step several times slower (not a speed difference).",
    ]
    record_md("rl", "vs-trl", "RL step: nemo-lead vs TRL GRPOTrainer (CPU)", body)


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="RL steps per side and run (first one is warm-up)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per side, alternated (nemo-lead first)")
    ap.add_argument("--sft-steps", type=int, default=None, help="SFT steps of the starting model")
    ap.add_argument("--quick", action="store_true", help="a smoke run: small batch, few steps, tiny SFT")
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md (rl:vs-trl)")
    ap.add_argument("--work", default=None, help="keep the work here (the starting model is reused if present)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trl_worker:
        trl_worker(args.trl_worker)
        return
    shape = dict(QUICK if args.quick else FULL)
    for key in ("steps", "repeats", "sft_steps"):
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    if shape["steps"] < 2:
        raise SystemExit("--steps must be >= 2 (the first step is warm-up)")
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("TRL is not installed: pip install -e '.[bench]'") from None
    if args.record and args.quick:
        raise SystemExit("--record takes the full run, not --quick")
    load_start = os.getloadavg()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="vs-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        paths = prepare(work, shape)
        runs = []
        for rep in range(shape["repeats"]):
            for side, fn in (("nemo-lead", run_nemo_lead), ("TRL", run_trl)):
                r = fn(work, paths, shape, str(rep))
                med = statistics.median(s["step"] for s in r["steps"][1:])
                print(f"{side} run {rep}: {len(r['steps'])} steps, median step {med:.3f} s, "
                      f"wall {r['wall_s']:.0f} s", flush=True)
                runs.append(r)
        finals = {"nemo-lead": runs[-2]["final"], "TRL": runs[-1]["final"]}  # the last run of each side
        evals = {name: evaluate(model, paths, shape, work / f"eval_{name}")
                 for name, model in (("start", str(paths["start"])), *finals.items())}
        summary = summarise(runs, evals, shape)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print_table(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    if args.record:
        record(summary, "OMP_NUM_THREADS=1 .venv/bin/python bench/vs_trl.py " + " ".join(sys.argv[1:]), load_start)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
