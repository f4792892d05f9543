"""nemo-lead's RL step against TRL's `GRPOTrainer`, both generating with vLLM inside the trainer's process, on
SmolLM2-135M-Instruct after the real-model study's SFT: the same model, prompts, samples, update and engine.

    bash scripts/setup_venv.sh vllm                                        # vLLM's CPU build (.venv-vllm)
    .venv-vllm/bin/python bench/vs_trl_vllm.py --record                    # ~50 minutes on 2 idle cores
    .venv-vllm/bin/python bench/vs_trl_vllm.py --quick --work /tmp/vt      # every piece, a few minutes

TRL is not a dependency of the product: the benchmark installs its pinned release (`TRL_PINS`) into .venv-trl
(pip --target, no dependencies beyond the pins: the rest is .venv-vllm's) the first time and runs its side
with that folder in front of .venv-vllm's packages.

The starting point is the study's SFT model (`bench/real_model.py`: its data and its `nemo-lead sft`, run here
when --study holds none), exported with `nemo-lead convert --to-hf`; both sides start from that HF folder and
take the study's RL problems in file order (no shuffle: the same prompts at every step).

The two sides, run one after the other in subprocesses on `--threads` threads each (set before either builds
its engine: vLLM's CPU worker fixes torch's thread count for the whole process once it starts), alternated
(nemo-lead, TRL, nemo-lead, ...):

- nemo-lead: `nemo-lead rl engine.kind=vllm` with `lead.preset=grpo` (reward 1 correct / 0 otherwise; advantage
  (R - mean) / (std + eps) per group; the loss's mean over each response's tokens, then over responses), token
  TIS against the engine's log-probs (`lead.rollout_correction.mode=tis threshold=2`), its per-phase seconds
  from RUN/metrics.jsonl (`time/generate`, `time/verify`, `time/logprobs`, `time/train`, `time/refit`) and
  its mismatch (`mismatch/logprob_abs_mean`).
- TRL: `GRPOTrainer` with `use_vllm=True, vllm_mode="colocate"` on the same HF folder with the same settings:
  `loss_type="grpo"` (the same aggregation), `beta=0`, `epsilon=0.2`, `scale_rewards="group"`, one optimizer
  step per generation batch (micro-batches of 16 accumulated), `num_iterations=1`, constant learning rate,
  AdamW with the same betas, eps, weight decay (0) and clipping (1.0), the same temperature and top-p, token
  TIS (`vllm_importance_sampling_mode="token_truncate"`, `vllm_importance_sampling_clip_max=2`), `use_cpu`,
  fp32, no gradient checkpointing, no sleep mode. Its reward function is nemo-lead's check (the completion
  decoded as nemo-lead decodes it, graded by the same `MathVerifier`). Two changes TRL needs on vLLM's CPU
  build are made here, from outside (`_patch_trl`): its `LLM` is built with `dtype="float32"` (vLLM would
  downcast the fp32 folder to bf16) and `enforce_eager=True` (vLLM's compile takes ~2 minutes to start on a
  CPU), and its weight sync goes through the worker's `reload_weights` (TRL's `model.load_weights` fails on
  the CPU build), with `lm_head.weight` given beside the tied embedding (else the engine keeps the old output
  layer and samples stale rollouts). Per-phase seconds: its `VLLMGeneration.generate` (generation),
  `sync_weights` (refit), `_calculate_rewards` (scoring), its no-grad log-prob pass (old log-probs, which it
  runs for the importance weights) and the rest of the step (the update); its mismatch is its own
  `sampling/sampling_logp_difference/mean`.

A third side, run once between the two in the first round, is nemo-lead with `skip_zero_advantage=false`
(every response forwarded in the update, as before the skip existed): the split of nemo-lead's step before and after the skip, on the same
settings and batches (step 1 is the same batch from the same weights on both, so its loss and gradient norm
agree to rounding).

Checked: the prompt token ids TRL generates from equal nemo-lead's, for every prompt of every step. Figures:
per phase the median over the steps after the first (warm-up) and runs; steps per second and their ratio;
both final models evaluated by `nemo-lead eval` on the study's 200 held-out problems (the same seed and
sampling for both), paired over problems (bench/study_stats.py). Goal: nemo-lead at >= 1.5x TRL's steps per
second at equal or better held-out accuracy (not lower by more than two paired standard errors).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "bench"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import real_model as study  # noqa: E402
import study_stats as st  # noqa: E402

TRL_PINS = ("trl==1.16.0", "datasets==5.2.0", "multiprocess==0.70.19", "pandas==3.1.1", "accelerate==1.15.0")
OVERLAY = REPO / ".venv-trl"
FULL = dict(steps=5, prompts=8, n=8, max_tokens=192, lr=2e-5, temperature=1.0, tis=2.0, micro=16, repeats=2,
            eval_n=4, kv_cache_gib=2.0)
QUICK = dict(steps=2, prompts=2, n=4, max_tokens=32, lr=2e-5, temperature=1.0, tis=2.0, micro=4, repeats=1,
             eval_n=1, kv_cache_gib=1.0)
SEED = 1234
MD_TAG = ("<!-- vs_trl:generated -->", "<!-- /vs_trl:generated -->")


def env(threads: int, overlay: bool = False) -> dict[str, str]:
    e = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
         "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
         "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "WANDB_DISABLED": "true"}
    paths = [str(OVERLAY)] if overlay else []
    e["PYTHONPATH"] = os.pathsep.join([*paths, str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


def trl_overlay() -> None:
    """TRL_PINS in .venv-trl (installed once; again when the pins change)."""
    stamp = OVERLAY / ".pins"
    if stamp.is_file() and stamp.read_text() == "\n".join(TRL_PINS):
        return
    shutil.rmtree(OVERLAY, ignore_errors=True)
    print(f"installing {' '.join(TRL_PINS)} into {OVERLAY} ...", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--target", str(OVERLAY), *TRL_PINS], check=True)
    stamp.write_text("\n".join(TRL_PINS))


def run(cmd: list[str], log: Path, e: dict[str, str], timeout: float = 7200) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        res = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=e, cwd=REPO, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {res.returncode}); the end of {log}:\n"
                         + "\n".join(log.read_text().splitlines()[-40:]))
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- the starting point
def prepare(work: Path, study_dir: Path, smoke: bool, threads: int) -> dict[str, Path]:
    """The study's data and SFT checkpoint (run here when missing), exported to a HF folder."""
    size = study.SIZES["smoke" if smoke else "full"]
    data = study.write_data(study_dir / "data", size)
    sft = study_dir / "sft"
    if not (sft / "done.json").is_file():
        if smoke:
            model = study.tiny_model(study_dir / "tiny-llama")
        else:
            from smollm2 import smollm2_folder

            model = smollm2_folder(Path("~/.cache/nemo-lead").expanduser())
        study.Stages(study_dir, env(threads)).run("sft", study.sft_cmd(model, data, size, sft), False)
    start = work / "start"
    if not (start / "config.json").is_file():
        run([sys.executable, "-m", "nemo_lead.cli", "convert", "--from-ckpt", study.done_checkpoint(sft), "--to-hf",
             str(start)], work / "convert.log", env(threads))
    return {"start": start, "problems": data["problems"], "heldout": data["heldout"]}


# ----------------------------------------------------------------------------- nemo-lead
def run_nemo_lead(work: Path, paths: dict, shape: dict, tag: str, threads: int, skip: bool = True) -> dict:
    """One `nemo-lead rl` run; `skip` false: skip_zero_advantage=false, the update forwards every response (the
    step before the skip existed); true: the product's default (null: on where exact, as it is here)."""
    name = "nemo-lead" if skip else "nemo-lead, skip off"
    out = work / (f"nl_{tag}" if skip else f"nl_skip_off_{tag}")
    shutil.rmtree(out, ignore_errors=True)
    wall = run([sys.executable, "-m", "nemo_lead.cli", "rl", "--model", str(paths["start"]), "--data",
                str(paths["problems"]), "--out", str(out), "--steps", str(shape["steps"]), "--save-every",
                str(shape["steps"]), "--prompts-per-step", str(shape["prompts"]), "--n", str(shape["n"]), "--max-tokens",
                str(shape["max_tokens"]), "--seed", str(SEED), "lead.preset=grpo", "data.shuffle=false",
                f"rollout.temperature={shape['temperature']}", "rollout.top_p=1.0", f"actor.optim.lr={shape['lr']}",
                "actor.optim.weight_decay=0.0", "actor.optim.clip_grad=1.0", "lead.rollout_correction.mode=tis",
                f"lead.rollout_correction.threshold={shape['tis']}", "engine.kind=vllm",
                f"engine.kv_cache_gib={shape['kv_cache_gib']}", "verify.workers=1", "log_rollouts=false",
                "tensorboard=false", "keep_last=1", "final_checkpoint=weights", "progress=lines",
                *([] if skip else ["skip_zero_advantage=false"])],
               out.with_suffix(".log"), env(threads))
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [{"generate": r["time/generate"], "score": r["time/verify"], "logprobs": r["time/logprobs"] or 0.0,
              "update": r["time/train"] or 0.0, "refit": r["time/refit"] or 0.0, "step": r["time/step"],
              "accuracy": r["accuracy"], "length": r["response_length/mean"],
              "mismatch": r.get("mismatch/logprob_abs_mean"), "skipped": r.get("update/skipped_zero_advantage") or 0,
              "samples": r["samples"], "loss": r["loss"], "grad_norm": r["grad_norm"]}
             for r in rows]
    return {"side": name, "tag": tag, "steps": steps, "wall_s": wall,
            "final": json.loads((out / "done.json").read_text())["checkpoint"]}


# ----------------------------------------------------------------------------- TRL
def run_trl(work: Path, paths: dict, shape: dict, tag: str, threads: int) -> dict:
    out = work / f"trl_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    spec = {**shape, "start": str(paths["start"]), "problems": str(paths["problems"]), "out": str(out),
            "threads": threads}
    (out / "spec.json").write_text(json.dumps(spec))
    # the same KV cache as nemo-lead's engine (vLLM's CPU build reads it in whole GiB); without it vLLM reserves
    # a share of the machine's memory (TRL's vllm_gpu_memory_utilization, 0.3) and refuses to start below it
    e = {**env(threads, overlay=True), "VLLM_CPU_KVCACHE_SPACE": str(round(shape["kv_cache_gib"]))}
    wall = run([sys.executable, str(Path(__file__).resolve()), "--trl-worker", str(out / "spec.json")],
               work / f"trl_{tag}.log", e)
    result = json.loads((out / "result.json").read_text())
    return {"side": "TRL", "tag": tag, "wall_s": wall, "final": str(out / "final"), **result}


def _patch_trl(tied: bool) -> None:
    """The two changes TRL's colocated vLLM needs on vLLM's CPU build (module docstring), made from outside."""
    import trl.generation.vllm_generation as vg

    real_llm = vg.LLM

    def llm(*args, **kwargs):
        return real_llm(*args, **{**kwargs, "dtype": "float32", "enforce_eager": True})

    def sync_weights(self):
        def stream():
            for name, param in self._iter_named_params():
                yield name, param
                if tied and name == "model.embed_tokens.weight":
                    yield "lm_head.weight", param  # vLLM's reload redoes the output layer's packing only when given it

        self.llm.llm_engine.model_executor.driver_worker.worker.reload_weights(weights_iterator=stream())
        self.llm.reset_prefix_cache()

    vg.LLM = llm
    vg.VLLMGeneration.sync_weights = sync_weights


def trl_worker(spec_path: str) -> None:
    """One TRL GRPOTrainer run (a subprocess of the benchmark); writes OUT/result.json and OUT/final/."""
    import torch

    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])  # before vLLM starts (it fixes the count for the process)
    out = Path(spec["out"])

    import transformers
    import trl
    import trl.generation.vllm_generation as vg
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from vs_trl import correctness_reward, train_and_save

    from nemo_lead.data import PromptConfig, chat_messages, load_problems, prompt_token_ids
    from nemo_lead.models import load_tokenizer
    from nemo_lead.verify import MathVerifier

    tied = json.loads((Path(spec["start"]) / "config.json").read_text()).get("tie_word_embeddings", False)
    _patch_trl(tied)
    tok = load_tokenizer(spec["start"])
    prompt = PromptConfig()
    problems = load_problems(spec["problems"])
    used = problems[: spec["steps"] * spec["prompts"]]
    expected = {p.id: ids for p, ids in zip(used, prompt_token_ids(tok, used, prompt))}
    dataset = Dataset.from_list([{"prompt": chat_messages(p, prompt), "answer": p.answer, "pid": p.id} for p in used])
    stop_ids = {tok.eos_token_id}
    verifier = MathVerifier(1, 5.0, "after_think")
    per_step: list[dict] = []
    checked = {"prompts": 0}

    def timed(key, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                per_step[-1][key] += time.perf_counter() - t0
        return wrapper

    vg.VLLMGeneration.generate = timed("generate", vg.VLLMGeneration.generate)
    vg.VLLMGeneration.sync_weights = timed("refit", vg.VLLMGeneration.sync_weights)

    correct = correctness_reward(tok, verifier, stop_ids, "", per_step)

    class Timed(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            per_step[-1]["prompt_ids"] += [list(p) for p in prompt_ids]
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

        def _calculate_rewards(self, *args, **kwargs):
            return timed("score", super()._calculate_rewards)(*args, **kwargs)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            if torch.is_grad_enabled():  # the update's own forward pass
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            return timed("logprobs", super()._get_per_token_logps_and_entropies)(*args, **kwargs)

        def _generate_and_score_completions(self, inputs):
            per_step[-1]["pids"] += [x["pid"] for x in inputs]
            return super()._generate_and_score_completions(inputs)

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            per_step.append({k: 0.0 for k in ("generate", "refit", "score", "logprobs")}
                            | {"t0": time.perf_counter(), "prompt_ids": [], "pids": []})

        def on_step_end(self, args, state, control, **kwargs):
            s = per_step[-1]
            s["step"] = time.perf_counter() - s.pop("t0")
            s["update"] = s["step"] - s["generate"] - s["refit"] - s["score"] - s["logprobs"]
            for ids, pid in zip(s.pop("prompt_ids"), s.pop("pids")):
                if ids != expected[pid]:
                    raise RuntimeError(f"TRL's prompt for {pid} differs from nemo-lead's: {ids} != {expected[pid]}")
                checked["prompts"] += 1

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and per_step and "sampling/sampling_logp_difference/mean" in logs:
                per_step[-1]["mismatch"] = logs["sampling/sampling_logp_difference/mean"]

    batch = spec["prompts"] * spec["n"]
    config = GRPOConfig(
        output_dir=str(out / "trainer"), max_steps=spec["steps"], seed=SEED, data_seed=SEED,
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, dataloader_num_workers=0,
        per_device_train_batch_size=spec["micro"], gradient_accumulation_steps=batch // spec["micro"],
        num_generations=spec["n"], max_completion_length=spec["max_tokens"], temperature=spec["temperature"],
        top_p=1.0, beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group", num_iterations=1,
        mask_truncated_completions=False, shuffle_dataset=False,
        use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False,
        vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="token_truncate",
        vllm_importance_sampling_clip_max=spec["tis"],
        learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
    )
    trainer = train_and_save(Timed, spec["start"], tok, correct, config, dataset, Clock(), verifier, out / "final")
    gen = Path(spec["start"]) / "generation_config.json"
    if gen.is_file():
        shutil.copy2(gen, out / "final" / "generation_config.json")
    (out / "result.json").write_text(json.dumps({
        "steps": per_step, "prompts_checked": checked["prompts"], "trl": trl.__version__,
        "transformers": transformers.__version__, "optim": str(config.optim), "dtype": str(trainer.model.dtype),
        "threads": torch.get_num_threads(),
    }))
    os._exit(0)  # vLLM's engine and the trainer's threads: nothing more to run; leave without their teardown


# ----------------------------------------------------------------------------- evaluation and figures
def evaluate(model: str, paths: dict, shape: dict, out: Path, threads: int, limit: int | None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    args = [sys.executable, "-m", "nemo_lead.cli", "eval", "--model", model, "--data", str(paths["heldout"]), "--out",
            str(out), "--n", str(shape["eval_n"]), "--temperature", str(study.EVAL_T), "--top-p", str(study.EVAL_TOP_P),
            "--max-tokens", str(shape["max_tokens"]), "--seed", str(SEED), "engine.kind=vllm",
            f"engine.kv_cache_gib={shape['kv_cache_gib']}", "problems_per_call=50", "verify.workers=1",
            f"report_budgets=[{shape['max_tokens']}]", "plot=false", "progress=lines"]
    args += ["--limit", str(limit)] if limit else []
    run(args, out.with_suffix(".log"), env(threads))
    probs = st.per_problem(out)
    return {"rates": st.pass_rates(probs), "lengths": st.mean_lengths(probs)}


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(s[key] for r in runs for s in r["steps"][1:])


def summarise(runs: list[dict], evals: dict, shape: dict) -> dict:
    names = dict.fromkeys(r["side"] for r in runs)  # nemo-lead, [nemo-lead, skip off,] TRL
    sides = {side: [r for r in runs if r["side"] == side] for side in names}
    out: dict = {"shape": shape, "sides": {}}
    for side, rs in sides.items():
        mism = [s["mismatch"] for r in rs for s in r["steps"] if s.get("mismatch") is not None]
        out["sides"][side] = {
            **{k: _median(rs, k) for k in ("generate", "refit", "score", "logprobs", "update", "step")},
            "per_run_step_median": [statistics.median(s["step"] for s in r["steps"][1:]) for r in rs],
            "accuracy": statistics.mean(s["accuracy"] for r in rs for s in r["steps"]),
            "length": statistics.mean(s["length"] for r in rs for s in r["steps"]),
            "mismatch_mean": statistics.mean(mism) if mism else None, "mismatch_max": max(mism) if mism else None,
            "wall_s": [r["wall_s"] for r in rs],
        }
        if side.startswith("nemo-lead"):  # responses the update forwarded, and step 1 (the same batch on both)
            out["sides"][side]["forwarded"] = (sum(s["samples"] - s["skipped"] for r in rs for s in r["steps"])
                                               / sum(s["samples"] for r in rs for s in r["steps"]))
            out["sides"][side]["step1"] = {k: [r["steps"][0][k] for r in rs] for k in ("loss", "grad_norm")}
    nl, tr = out["sides"]["nemo-lead"], out["sides"]["TRL"]
    out["ratio"] = tr["step"] / nl["step"]  # nemo-lead's steps/s over TRL's
    out["ratio_per_repeat"] = [t / n for n, t in zip(nl["per_run_step_median"], tr["per_run_step_median"])]
    a, b = evals["nemo-lead"]["rates"], evals["TRL"]["rates"]
    diffs = [a[k] - b[k] for k in sorted(a)]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("inf")
    interval = st.paired(a, b)
    out["eval"] = {name: {"pass_at_1": statistics.mean(e["rates"].values()),
                          "mean_length": statistics.mean(e["lengths"].values()), "problems": len(e["rates"])}
                   for name, e in evals.items()}
    out["accuracy_diff"] = {**vars(interval), "se": se, "equal_or_better": interval.estimate >= -2 * se}
    out["goal_met"] = out["ratio"] >= 1.5 and out["accuracy_diff"]["equal_or_better"]
    out["trl_meta"] = {k: sides["TRL"][0][k] for k in ("trl", "transformers", "optim", "dtype", "prompts_checked",
                                                       "threads")}
    return out


def body(s: dict, command: str, load_start: tuple) -> list[str]:
    import torch
    from results_md import machine_line

    sh, nl, tr, ev, acc = s["shape"], s["sides"]["nemo-lead"], s["sides"]["TRL"], s["eval"], s["accuracy_diff"]
    reps = len(nl["per_run_step_median"])

    def row(name, key):
        ratio = f"{tr[key] / nl[key]:.2f}x" if nl[key] > 0 else "-"
        return f"| {name} | {nl[key]:.2f} | {tr[key]:.2f} | {ratio} |"

    def mism(side):
        return "-" if side["mismatch_mean"] is None else f"{side['mismatch_mean']:.2e} (max of the steps {side['mismatch_max']:.2e})"

    m = s["trl_meta"]
    off = s["sides"].get("nemo-lead, skip off")
    skip_lines = []
    if off is not None:
        def phases(side):
            return ", ".join(f"{k} {side[k]:.1f} s" for k in ("generate", "score", "logprobs", "update", "refit"))

        skip_lines = [
            "",
            f"The zero-advantage skip (in the same run: `skip_zero_advantage=false` alternated with the default): "
            f"per step without it {phases(off)}, whole step {off['step']:.1f} s; with it {phases(nl)}, whole step "
            f"{nl['step']:.1f} s: **{off['step'] / nl['step']:.2f}x** steps/s, the update "
            f"{off['update'] / nl['update']:.2f}x faster; the update forwarded {nl['forwarded']:.0%} of the "
            f"responses (without the skip {off['forwarded']:.0%}). Step 1 (the same batch, the same weights): loss "
            f"{', '.join(f'{x:.6g}' for x in nl['step1']['loss'])} with the skip, "
            f"{', '.join(f'{x:.6g}' for x in off['step1']['loss'])} without; gradient norm "
            f"{', '.join(f'{x:.6g}' for x in nl['step1']['grad_norm'])} and "
            f"{', '.join(f'{x:.6g}' for x in off['step1']['grad_norm'])}.",
        ]
    return [
        f"Command: `{command}`; {study.lscpu_model()}; {machine_line(m['threads'], load_start)}; torch "
        f"{torch.__version__}, TRL {m['trl']}, transformers {m['transformers']}, vLLM's CPU build on both sides.",
        "",
        f"Setup: SmolLM2-135M-Instruct after the real-model study's SFT (bench/real_model.py), exported to HF; "
        f"{sh['steps']} RL steps per side and run, {reps} run(s) per side alternated; {sh['prompts']} prompts x "
        f"{sh['n']} samples of the study's RL problems in file order, at most {sh['max_tokens']} new tokens, T "
        f"{sh['temperature']}, top-p 1, lr {sh['lr']} constant, AdamW (weight decay 0, clip 1.0), reward 1 correct / "
        f"0 otherwise (same MathVerifier), no KL, clip 0.2, per-response token mean then mean over responses "
        f"(TRL `loss_type=\"grpo\"`), token TIS at {sh['tis']} against vLLM's log-probs, one optimizer step per "
        f"step (TRL: micro-batches of {sh['micro']} accumulated); prompt token ids checked identical (all "
        f"{m['prompts_checked']} of TRL's generation inputs).",
        "",
        "| phase (median s, steps after the first) | nemo-lead | TRL GRPOTrainer | TRL / nemo-lead |",
        "| --- | --- | --- | --- |",
        row("generation (vLLM)", "generate"), row("scoring (MathVerifier)", "score"),
        row("old log-probs (TRL: a no-grad pass for the weights; nemo-lead: from the update's pass)", "logprobs"),
        row("update (forward, backward, optimizer)", "update"), row("refit (weights into vLLM)", "refit"),
        f"| **whole step** | {nl['step']:.2f} | {tr['step']:.2f} | **{s['ratio']:.2f}x** |",
        "",
        f"- Steps per second: nemo-lead {1 / nl['step']:.4f}, TRL {1 / tr['step']:.4f}: **{s['ratio']:.2f}x** "
        f"(per alternated pair: {', '.join(f'{x:.2f}x' for x in s['ratio_per_repeat'])}).",
        f"- Train / inference log-prob mismatch (mean |actor - vLLM| over sampled tokens, per step, averaged): "
        f"nemo-lead {mism(nl)}; TRL {mism(tr)}.",
        f"- Held-out evaluation (`nemo-lead eval engine.kind=vllm`, {ev['nemo-lead']['problems']} problems x "
        f"{sh['eval_n']} samples, T {study.EVAL_T}, top-p {study.EVAL_TOP_P}, the same seed for both): nemo-lead "
        f"Pass@1 {ev['nemo-lead']['pass_at_1']:.3f}, mean length {ev['nemo-lead']['mean_length']:.1f}; TRL "
        f"{ev['TRL']['pass_at_1']:.3f}, {ev['TRL']['mean_length']:.1f}. nemo-lead - TRL, paired over problems: "
        f"{acc['estimate']:+.3f} [{acc['low']:+.3f}, {acc['high']:+.3f}] (standard error {acc['se']:.3f}).",
        f"- Training rollouts, mean over every step: nemo-lead accuracy {nl['accuracy']:.3f}, length "
        f"{nl['length']:.1f}; TRL {tr['accuracy']:.3f}, {tr['length']:.1f} (each side draws its own samples).",
        f"- Goal (>= 1.5x TRL's steps/s at equal or better held-out accuracy, not lower by more than two paired "
        f"standard errors): **{'met' if s['goal_met'] else 'missed'}**.",
        *skip_lines,
    ]


def record(s: dict, command: str, load_start: tuple) -> None:
    from results_md import record as record_md

    lines = body(s, command, load_start)
    record_md("rl", "vs-trl-vllm", "RL step on vLLM: nemo-lead vs TRL GRPOTrainer colocated (CPU, SmolLM2-135M)",
              lines)
    text = study.MD.read_text()
    begin, end = MD_TAG
    head, rest = text.split(begin, 1)
    study.MD.write_text(head + begin + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1])


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="RL steps per side and run (the first is warm-up)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per side, alternated (nemo-lead first)")
    ap.add_argument("--quick", action="store_true", help="every piece at a small size (the study's smoke model)")
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md and REAL_MODEL.md")
    ap.add_argument("--work", default=str(REPO / "runs" / "vs_trl_vllm"), help="the runs (runs/ is ignored by git)")
    ap.add_argument("--study", default=None, help="the study's folder (its data and SFT); default runs/real_model")
    ap.add_argument("--threads", type=int, default=2, help="threads of each side")
    ap.add_argument("--no-skip-ab", action="store_true",
                    help="leave out the third side (nemo-lead with skip_zero_advantage=false: the skip's before / after)")
    ap.add_argument("--trl-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trl_worker:
        trl_worker(args.trl_worker)
        return
    if args.record and args.quick:
        raise SystemExit("--record takes the full run, not --quick")
    shape = dict(QUICK if args.quick else FULL)
    for key in ("steps", "repeats"):
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    if shape["steps"] < 2:
        raise SystemExit("--steps must be >= 2 (the first step is warm-up)")
    load_start = os.getloadavg()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # what the machine line records: each side's threads
    trl_overlay()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    study_dir = Path(args.study) if args.study else (work / "study" if args.quick else REPO / "runs" / "real_model")
    paths = prepare(work, study_dir, args.quick, args.threads)
    runs = []
    skip_off = [] if args.no_skip_ab else [lambda rep: run_nemo_lead(work, paths, shape, rep, args.threads, skip=False)]
    for rep in range(shape["repeats"]):
        # the skip's before / after once (in the first round), nemo-lead and TRL alternated every round
        for fn in [lambda rep: run_nemo_lead(work, paths, shape, rep, args.threads), *(skip_off if rep == 0 else []),
                   lambda rep: run_trl(work, paths, shape, rep, args.threads)]:
            r = fn(str(rep))
            med = statistics.median(s["step"] for s in r["steps"][1:])
            print(f"{r['side']} run {rep}: {len(r['steps'])} steps, median step {med:.1f} s, wall {r['wall_s']:.0f} s",
                  flush=True)
            runs.append(r)
    last = {r["side"]: r["final"] for r in runs}  # the last run of each side
    finals = {"nemo-lead": last["nemo-lead"], "TRL": last["TRL"]}
    limit = 8 if args.quick else None
    evals = {name: evaluate(model, paths, shape, work / f"eval_{name}", args.threads, limit)
             for name, model in finals.items()}
    summary = summarise(runs, evals, shape)
    (work / "summary.json").write_text(json.dumps({**summary, "runs": runs}, indent=1))
    command = (f"OMP_NUM_THREADS={args.threads} .venv-vllm/bin/python bench/vs_trl_vllm.py " + " ".join(sys.argv[1:])).strip()
    print("\n".join(body(summary, command, load_start)))
    if args.record:
        record(summary, command, load_start)


if __name__ == "__main__":
    main()
