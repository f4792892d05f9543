"""Actor train-step throughput: our Megatron actor against transformers' Qwen2ForCausalLM with a plain torch
AdamW loop, and (on a GPU) the actor's model-FLOPs utilisation.

CPU (default): the same random Qwen2 weights (4 layers, hidden 256, 4 heads / 2 KV heads, ffn 1024, the
~100-token character vocabulary of `nemo_lead.models.write_tiny_model`), fp32, one global batch of 8
sequences x 512 tokens per step, the masked next-token loss over all but the first token (SFT):
- ours: `sft_train_step` (megatron's schedule, DDP, megatron's Adam with gradient clipping, one micro-batch
  of 8 x 512 = the token budget), TP1 on one process (gloo), the CPU compatibility layer on;
- baseline: `Qwen2ForCausalLM(input_ids, labels=...)` (its default attention, SDPA), `loss.backward()`,
  `clip_grad_norm_`, `torch.optim.AdamW.step()`, `zero_grad()`.
Both sides use the same torch thread count in one process, alternating blocks of steps (the CPU layer is
switched off while the baseline runs, so it does not tax it; the process-wide glibc malloc thresholds that
`init_parallel` sets on CPU, `nemo_lead.parallel.host_memory`, serve the baseline too); tokens/s = trained tokens per second,
median over blocks. Goal: ours / baseline >= 1.0. Also reported: `policy_train_step` (the GRPO-LEAD loss
with old log-probs and the same batch) at the same shape.

    OMP_NUM_THREADS=1 .venv/bin/python bench/actor_bench.py [--record] [--threads 1] [--steps 3 --repeats 3]

GPU (`--gpu`, needs CUDA and megatron-core there): MFU of one `sft_train_step` of a Qwen2-1.5B-shaped
model (R1-Distill-Qwen-1.5B: 28 layers, hidden 1536, 12 heads / 2 KV heads, ffn 8960, vocabulary 151936,
tied embeddings; random weights), bf16 parameters with fp32 master weights and gradient reduction, local
layer spec (no Transformer Engine), TP1, sequences of 4096 tokens, one sequence per micro-batch, 8 per
step. Model FLOPs per step = tokens x (6 N + 12 L h s) (PaLM's count: N = parameters used in matrix
multiplies, tied embedding counted once as the LM head; the attention term not halved for causality);
MFU = FLOPs / step time / peak (H200 dense bf16: 790 TFLOP/s, `--peak-tflops`). Goal >= 40%.
`--gpu --dry-run` runs the same code path on the CPU with a small shape (to check the script).

    .venv/bin/python bench/actor_bench.py --gpu [--record] [--out /tmp/actor_gpu.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
from results_md import add_gpu_mode_args, cuda_sync, emit_json, machine_line, require_gpu
from results_md import record as record_md

record = partial(record_md, "actor")
SMALL = dict(num_hidden_layers=4, hidden_size=256, intermediate_size=1024, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024)
DRY_RUN_SHAPE = dict(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                     num_key_value_heads=2)


def _batch(n: int, length: int, vocab: int, seed: int = 0):
    from nemo_lead.training.actor.microbatch import SequenceBatch

    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, vocab, (n, length), generator=g)
    return SequenceBatch(tokens=list(tokens), prompt_lens=[1] * n)


# ----------------------------------------------------------------------------- CPU: ours vs transformers
class _Baseline:
    """transformers' model + torch AdamW, the loop a user writes by hand."""

    def __init__(self, folder: Path, optim: dict):
        import transformers

        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).train()
        decay = [p for n, p in self.model.named_parameters() if p.dim() > 1]
        rest = [p for n, p in self.model.named_parameters() if p.dim() <= 1]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": optim["weight_decay"]},
                                      {"params": rest, "weight_decay": 0.0}], lr=optim["lr"])
        self.clip = optim["clip_grad"]

    def step(self, ids: torch.Tensor) -> float:
        loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss)


def _timed(fn, steps: int) -> float:
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t) / steps


def cpu_bench(args) -> None:
    from nemo_lead.algorithms import LeadConfig
    from nemo_lead.models import write_tiny_model
    from nemo_lead.parallel import cpu, destroy_parallel, init_parallel, seed_model_parallel_rng
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor, compute_logprobs
    from nemo_lead.training.actor.rl_update import policy_train_step
    from nemo_lead.training.actor.sft_update import sft_train_step

    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="actor_bench_")) / "qwen2"  # removed at the end
    write_tiny_model(folder, "qwen2", seed=0, **SMALL)
    optim = {"lr": 1e-5, "weight_decay": 0.01, "clip_grad": 1.0}
    baseline = _Baseline(folder, optim)
    vocab = baseline.model.config.vocab_size
    batch = _batch(args.batch, args.seq, vocab)
    ids = torch.stack(batch.tokens)
    tokens_per_step = args.batch * (args.seq - 1)

    info = init_parallel(1, 1)
    try:
        actor = build_actor(ActorConfig(model=str(folder), precision="fp32", micro_batch_tokens=args.batch * args.seq,
                                        optim=optim), info)
        old = compute_logprobs(actor, batch)
        g = torch.Generator().manual_seed(1)
        policy_batch = dataclasses.replace(batch, old_logprobs=[o + 0.05 * torch.randn(o.shape, generator=g) for o in old],
                                           advantages=torch.randn(args.batch, generator=g))
        lead = LeadConfig()
        ours = {"sft": lambda: sft_train_step(actor, batch), "policy": lambda: policy_train_step(actor, policy_batch, lead)}
        runs: dict[str, list[float]] = {"sft": [], "policy": [], "transformers": []}
        for side in ("sft", "policy"):
            ours[side]()  # warm-up
        cpu.disable()
        baseline.step(ids)
        for rep in range(args.repeats):  # alternate the sides so drifting load hits both
            runs["transformers"].append(_timed(lambda: baseline.step(ids), args.steps))
            cpu.enable()
            seed_model_parallel_rng(1234)  # a fresh CPU tracker needs its streams again
            for side in ("sft", "policy"):
                runs[side].append(_timed(ours[side], args.steps))
            cpu.disable()
            print(f"[rep {rep}] " + ", ".join(f"{k} {tokens_per_step / v[-1]:.0f} tok/s" for k, v in runs.items()),
                  flush=True)
        cpu.enable()
    finally:
        destroy_parallel()
        shutil.rmtree(folder.parent, ignore_errors=True)
    rate = {k: tokens_per_step / statistics.median(v) for k, v in runs.items()}
    for k in ("sft", "policy"):
        print(f"{k}: ours {rate[k]:.0f} tok/s, transformers + AdamW {rate['transformers']:.0f} tok/s, "
              f"ratio {rate[k] / rate['transformers']:.2f}x (goal >= 1.0x)")
    if args.record:
        cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/actor_bench.py --record"
        extra = [a for a in sys.argv[1:] if a != "--record"]
        cmd += (" " + " ".join(extra)) if extra else ""
        record("cpu", "Train step: Megatron actor vs transformers + AdamW (CPU)", [
            f"Command: `{cmd}`; {machine_line(args.threads, load_start)}.",
            "",
            f"Qwen2 4 layers, hidden 256, 4 heads / 2 KV heads, ffn 1024, vocabulary {vocab} (random weights, fp32); "
            f"{args.batch} sequences x {args.seq} tokens per step, next-token loss on {tokens_per_step} tokens; "
            f"median of {args.repeats} alternating blocks of {args.steps} steps. Baseline: transformers "
            "`Qwen2ForCausalLM` (SDPA attention) + `clip_grad_norm_` + `torch.optim.AdamW` in a plain loop. One "
            "process; the glibc malloc thresholds `init_parallel` sets on CPU (`nemo_lead.parallel.host_memory`) "
            "apply to both sides.",
            "",
            "| step | ours tok/s | transformers + AdamW tok/s | ratio |",
            "| --- | --- | --- | --- |",
            *(f"| {k} | {rate[k]:.0f} | {rate['transformers']:.0f} | **{rate[k] / rate['transformers']:.2f}x** |"
              for k in ("sft", "policy")),
            "",
            "\"sft\": `sft_train_step` (the same loss as the baseline). \"policy\": `policy_train_step` (GRPO-LEAD "
            "clipped loss, paper aggregation) on the same tokens with given old log-probs.",
        ])


# ----------------------------------------------------------------------------- GPU: MFU
def model_flops_per_token(hf_config: dict, seq: int) -> float:
    """PaLM's training FLOPs per token: 6 N + 12 L h s (N = matrix-multiply parameters incl. the LM head)."""
    h, L, ffn = hf_config["hidden_size"], hf_config["num_hidden_layers"], hf_config["intermediate_size"]
    heads, kv = hf_config["num_attention_heads"], hf_config["num_key_value_heads"]
    d = h // heads
    per_layer = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * ffn
    n = L * per_layer + hf_config["vocab_size"] * h
    return 6 * n + 12 * L * h * seq


def measured_gemm_tflops(n: int = 8192, reps: int = 10) -> float:
    """The same run's baseline: dense bf16 n x n x n matrix products on this GPU (random data), TFLOP/s."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e12


def _time_steps(step, steps: int) -> list[float]:
    step()  # warm-up: allocator, kernels
    times = []
    for _ in range(steps):
        cuda_sync()
        t = time.perf_counter()
        step()
        cuda_sync()
        times.append(time.perf_counter() - t)
    return times


def _profile_table(step, path: str) -> None:
    """Top kernels of one step by device time (torch profiler), to see where the step goes."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        step()
        cuda_sync()
    key = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    Path(path).write_text(prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=60))


def gpu_bench(args) -> dict:
    """MFU of `sft_train_step` at each token budget of `--gpu-budgets` (tokens per micro-batch), against
    the H200's nominal bf16 peak and against the dense GEMM rate measured in the same run."""
    import gc

    from nemo_lead.models import read_hf_config
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.sft_update import sft_train_step

    require_gpu(args)
    if args.dry_run:  # a small random HF folder, fp32 on the CPU
        model, precision, seq, per_step = _dry_run_folder(), "fp32", 128, 2
    else:  # the preset: random initialisation on the GPU, no weights to read
        model, precision, seq, per_step = "r1-distill-qwen-1.5b", "bf16", args.gpu_seq, args.gpu_batch
    budgets = [int(b) * seq // 4096 if args.dry_run else int(b) for b in args.gpu_budgets.split(",")]
    hf_config = read_hf_config(model)
    flops = model_flops_per_token(hf_config, seq) * per_step * seq
    peak = args.peak_tflops * 1e12
    gemm = measured_gemm_tflops() if torch.cuda.is_available() else None
    batch = _batch(per_step, seq, hf_config["vocab_size"])
    rows = []
    info = init_parallel(1, 1)
    try:
        for i, budget in enumerate(budgets):
            cfg = ActorConfig(model=model, precision=precision, layer_spec="local", micro_batch_tokens=budget,
                              optim={"lr": 1e-6})
            actor = build_actor(cfg, info)
            metrics = {}
            step = partial(sft_train_step, actor, batch)
            times = _time_steps(lambda step=step, metrics=metrics: metrics.update(step()), args.gpu_steps)
            if i == 0 and args.profile:
                _profile_table(step, args.profile)
            step_s = statistics.median(times)
            rows.append({
                "micro_batch_tokens": budget, "microbatches": int(metrics["microbatches"]), "step_s": step_s,
                "tokens_per_s": per_step * seq / step_s, "achieved_tflops": flops / step_s / 1e12,
                "mfu": flops / step_s / peak, "fraction_of_measured_gemm": flops / step_s / 1e12 / gemm if gemm else None,
                "max_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None,
            })
            print(json.dumps(rows[-1]), flush=True)
            del actor, step
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
    finally:
        destroy_parallel()
        if args.dry_run:
            shutil.rmtree(Path(model).parent, ignore_errors=True)
    best = max(rows, key=lambda r: r["mfu"])
    out = {
        "model": ("dry run: small shape on CPU" if args.dry_run else "Qwen2-1.5B shape (R1-Distill)")
                 + f", {precision}, random weights, local spec, TP1, one process",
        "seq": seq, "sequences_per_step": per_step, "model_tflops_per_step": flops / 1e12,
        "peak_tflops": args.peak_tflops, "measured_gemm_tflops": gemm, "rows": rows, "best": best,
        "device": "cpu (dry run)" if args.dry_run else torch.cuda.get_device_name(), "torch": torch.__version__,
    }
    emit_json(out, args.out)
    if args.record and not args.dry_run:
        argv, shown = sys.argv[1:], []
        for i, a in enumerate(argv):  # leave out where this run wrote its files
            if not (a.startswith(("--out", "--profile")) or (i and argv[i - 1] in ("--out", "--profile"))):
                shown.append(a)
        cmd = "python bench/actor_bench.py " + " ".join(shown)
        record("gpu", "Train-step MFU on a GPU", [
            f"Command: `{cmd}` (bench/gpu_session.sh); {datetime.date.today().isoformat()}, {out['device']}, "
            f"torch {out['torch']}.",
            "",
            f"{out['model']}; {per_step} sequences x {seq} tokens per step, `sft_train_step` (megatron's schedule, "
            f"DDP with fp32 gradient buffers, megatron's optimizer with fp32 master weights, gradient clipping); "
            f"median of {args.gpu_steps} steps after a warm-up. Model FLOPs per step {flops / 1e12:.0f} TFLOP "
            "(PaLM count 6N + 12Lhs per token). Baseline measured in the same run: dense bf16 8192^3 matrix "
            f"products, {gemm:.0f} TFLOP/s.",
            "",
            "| tokens per micro-batch | micro-batches | step s | tokens/s | TFLOP/s | MFU (of 790) | of measured GEMM | peak memory GB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *(f"| {r['micro_batch_tokens']} | {r['microbatches']} | {r['step_s']:.3f} | {r['tokens_per_s']:.0f} | "
              f"{r['achieved_tflops']:.0f} | **{100 * r['mfu']:.1f}%** | {r['fraction_of_measured_gemm']:.2f}x | "
              f"{r['max_memory_gb']:.1f} |" for r in rows),
            "",
            f"Goal: MFU >= 40% of {args.peak_tflops:.0f} TFLOP/s; best {100 * best['mfu']:.1f}% "
            f"({'met' if best['mfu'] >= 0.4 else 'not met'}).",
        ])
    return out


def _dry_run_folder() -> str:
    from nemo_lead.models import write_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="actor_bench_dry_")) / "qwen2"
    return str(write_tiny_model(folder, "qwen2", seed=0, tie_word_embeddings=True, **DRY_RUN_SHAPE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gpu_mode_args(ap, "GPU MFU benchmark (1.5B shape, seq 4096, bf16)")
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    ap.add_argument("--threads", type=int, default=1, help="CPU: torch threads for both sides")
    ap.add_argument("--batch", type=int, default=8, help="CPU: sequences per step")
    ap.add_argument("--seq", type=int, default=512, help="CPU: tokens per sequence")
    ap.add_argument("--steps", type=int, default=3, help="CPU: steps per timed block")
    ap.add_argument("--repeats", type=int, default=3, help="CPU: alternating blocks per side")
    ap.add_argument("--gpu-seq", type=int, default=4096)
    ap.add_argument("--gpu-batch", type=int, default=8, help="GPU: sequences per step")
    ap.add_argument("--gpu-steps", type=int, default=3, help="GPU: timed steps (after one warm-up)")
    ap.add_argument("--gpu-budgets", default="4096,8192", help="GPU: tokens per micro-batch, comma-separated")
    ap.add_argument("--profile", default=None, help="GPU: write the first budget's kernel table here")
    ap.add_argument("--peak-tflops", type=float, default=790.0, help="GPU: dense bf16 peak (H200: ~790)")
    args = ap.parse_args()
    (gpu_bench if args.gpu else cpu_bench)(args)


if __name__ == "__main__":
    main()
