"""Rollout throughput: the `megatron` engine against transformers' `generate` (with its KV cache).

CPU (default): the same tiny-to-small Qwen2 weights (4 layers, hidden 256, 4 heads / 2 KV heads, ffn 1024, the
~100-token character vocabulary) written by `nemo_lead.models.write_tiny_model`; 32 prompts of 8-40 tokens
x 8 samples, 256 new tokens, temperature 1, one thread on both sides in the same run (docs/design.md: threads).
Two workloads: "eos" (sequences may stop on the end token; the random weights emit it about 1% of the time,
so lengths spread out as in RL) and "full" (no stop token: every sequence runs 256 tokens, pure decode).
Tokens/s counts generated tokens (stop token included) of both engines. Goal: >= 1.5x transformers.

    OMP_NUM_THREADS=1 .venv/bin/python bench/rollout_bench.py [--record]

GPU (`--gpu`, needs a CUDA device and megatron-core there): decode tokens/s of a Qwen2-1.5B-shaped model
(random bf16 weights, local layer spec) at batch 256, and its fraction of the memory-bandwidth bound:
per decode step the weights and the live KV cache are read once, so bound = (weight bytes + KV bytes)
/ HBM bandwidth (H200: 4.8 TB/s, `--bandwidth-tbs`). Decode time = time(prompt + T tokens) - time(prompt
+ 1 token), so prefill is not counted. Writes JSON to `--out` when given.

    .venv/bin/python bench/rollout_bench.py --gpu --out /tmp/rollout_gpu.json [--record]

`--vllm` (CPU, in the vllm leg's virtualenv): the vllm engine on vLLM's CPU build against the megatron engine,
vLLM's own `LLM.generate` and transformers on SmolLM2-135M (bench/rollout_vllm.py).

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/rollout_bench.py --vllm --record

`--tp 2` (GPU, under torchrun, one process per GPU): the same at TP2, the engine on the TP2 model's modules,
eager steps against CUDA graphs with the TP all-reduces captured (`engine.cuda_graphs_tp`); bytes and the
bound per GPU (its shards of the weights and of the KV heads). Rank 0 records and writes the JSON.

    python -m torch.distributed.run --standalone --nproc-per-node 2 bench/rollout_bench.py --gpu --tp 2 --record
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from results_md import add_gpu_mode_args, cuda_sync, emit_json, machine_line, require_gpu
from results_md import record as record_md

record = functools.partial(record_md, "rollout")
QWEN2_1P5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, model_type="qwen2", hidden_act="silu")
# --gpu --dry-run: the same code path on the CPU with a small shape, to check the script before a GPU session
DRY_RUN_SHAPE = dict(QWEN2_1P5B, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=1000)


# ----------------------------------------------------------------------------- CPU: megatron vs transformers
def make_prompts(count: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 41, (count,), generator=g).tolist()
    return [torch.randint(6, vocab, (n,), generator=g).tolist() for n in lengths]


def run_megatron(model, prompts, n, new_tokens, eos, seed):
    from nemo_lead.generation import MegatronEngine, SamplingParams

    engine = MegatronEngine(model, max_batch_size=len(prompts) * n)
    params = SamplingParams(n=n, temperature=1.0, max_tokens=new_tokens, stop_token_ids=[eos] if eos is not None else [],
                            seed=seed)
    t = time.perf_counter()
    rollouts = engine.generate(prompts, params)
    return sum(r.num_tokens for r in rollouts), time.perf_counter() - t


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [batch, longest] padded on the left with `pad`, and the attention mask (transformers' generate)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def run_transformers(hf, prompts, n, new_tokens, eos, pad, seed):
    """transformers' generate with its KV cache, prompts left-padded, the same sampling (T = 1, no top-k/p)."""
    from transformers import GenerationConfig

    ids, mask = left_padded(prompts, pad)
    width = ids.shape[1]
    cfg = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                           num_return_sequences=n, eos_token_id=eos, pad_token_id=pad, use_cache=True)
    torch.manual_seed(seed)
    t = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    elapsed = time.perf_counter() - t
    gen = out[:, width:]
    if eos is None:
        return gen.numel(), elapsed
    tokens = 0
    for row in gen.tolist():  # count up to and including the first eos, as the engine does
        tokens += row.index(eos) + 1 if eos in row else len(row)
    return tokens, elapsed


def cpu_bench(args) -> None:
    import transformers

    from nemo_lead.models import build_gpt, load_hf_weights, write_tiny_model
    from nemo_lead.parallel import destroy_parallel, init_parallel

    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="rollout_bench_")) / "qwen2"
    write_tiny_model(folder, "qwen2", seed=0, num_hidden_layers=4, hidden_size=256, intermediate_size=1024,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    eos = pad = hf.config.eos_token_id
    info = init_parallel(1, 1)
    model = build_gpt(str(folder), info, "fp32", init=False)
    load_hf_weights(model, str(folder))
    prompts = make_prompts(args.prompts, hf.config.vocab_size, seed=1)
    results = {}
    try:
        for workload, stop in (("eos", eos), ("full", None)):
            runs = {"megatron": [], "transformers": []}
            for rep in range(args.repeats):  # alternate the two sides so drifting load hits both
                tok, sec = run_megatron(model, prompts, args.n, args.new_tokens, stop, seed=rep)
                runs["megatron"].append((tok, sec))
                tok, sec = run_transformers(hf, prompts, args.n, args.new_tokens, stop, pad, seed=rep)
                runs["transformers"].append((tok, sec))
                print(f"[{workload} rep {rep}] megatron {runs['megatron'][-1][0] / runs['megatron'][-1][1]:.0f} tok/s, "
                      f"transformers {runs['transformers'][-1][0] / runs['transformers'][-1][1]:.0f} tok/s", flush=True)
            rates = {k: statistics.median(t / s for t, s in v) for k, v in runs.items()}
            tokens = {k: statistics.mean(t for t, _ in v) for k, v in runs.items()}
            results[workload] = (rates, tokens)
    finally:
        destroy_parallel()
    lines = []
    for workload, (rates, tokens) in results.items():
        ratio = rates["megatron"] / rates["transformers"]
        lines.append(f"| {workload} | {tokens['megatron']:.0f} | {rates['megatron']:.0f} | {tokens['transformers']:.0f} | "
                     f"{rates['transformers']:.0f} | **{ratio:.2f}x** |")
        print(f"{workload}: megatron {rates['megatron']:.0f} tok/s, transformers {rates['transformers']:.0f} tok/s, "
              f"ratio {ratio:.2f}x (goal >= 1.5x)")
    if args.record:
        cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/rollout_bench.py --record"
        extra = [a for a in sys.argv[1:] if a != "--record"]
        if extra:
            cmd += " " + " ".join(extra)
        record("cpu", "Megatron engine vs transformers generate (CPU)", [
            f"Command: `{cmd}`; {machine_line(args.threads, load_start)}.",
            "",
            f"Qwen2 4 layers, hidden 256, 4 heads / 2 KV heads, ffn 1024, vocabulary {hf.config.vocab_size} (random "
            f"weights, fp32); {args.prompts} prompts of 8-40 tokens x {args.n} samples, {args.new_tokens} new tokens, "
            f"temperature 1; median of {args.repeats} alternating runs. Tokens = generated tokens (stop token "
            "included). Baseline: transformers `generate` (KV cache, left padding) on the same weights.",
            "",
            "| workload | megatron tokens | megatron tok/s | transformers tokens | transformers tok/s | speed-up |",
            "| --- | --- | --- | --- | --- | --- |",
            *lines,
            "",
            "\"eos\": sequences stop on the end token (finished ones leave the engine's batch; transformers keeps "
            "computing them until all finish). \"full\": no stop token, every sequence decodes all tokens.",
        ])


# ----------------------------------------------------------------------------- GPU: decode rate vs bandwidth
VLLM_ROW = "vLLM (engine.kind=vllm)"


def with_vllm() -> bool:
    """vLLM imports here (the GPU bench then adds its row)."""
    from nemo_lead.generation.vllm_engine import vllm_importable

    return vllm_importable()


def gpu_bench(args) -> dict:
    from nemo_lead.generation import MegatronEngine, SamplingParams
    from nemo_lead.models import build_gpt
    from nemo_lead.parallel import destroy_parallel, init_parallel

    require_gpu(args)
    cfg = DRY_RUN_SHAPE if args.dry_run else QWEN2_1P5B
    tp = args.tp
    info = init_parallel(tp, 1)
    lead = torch.distributed.get_rank() == 0  # records and writes (every rank runs the same steps)
    try:
        model = build_gpt(dict(cfg), info, "bf16", spec="local")
        prompts = [[(7 * i + j) % (cfg["vocab_size"] - 10) + 10 for j in range(args.prompt_len)] for i in range(args.batch)]
        weight_bytes = sum(p.numel() for p in model.parameters()) * 2  # this GPU's shards
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        kv_per_token = cfg["num_hidden_layers"] * 2 * (cfg["num_key_value_heads"] // tp) * head_dim * 2
        steps = args.decode_tokens
        kv_bytes = args.batch * (args.prompt_len + 1 + steps / 2) * kv_per_token  # mean live KV read per step
        bytes_per_step = weight_bytes + kv_bytes
        rows = {}
        engines = [("eager steps", lambda: MegatronEngine(model, max_batch_size=args.batch, sync_every=args.sync_every,
                                                          cuda_graphs=False, cuda_graphs_tp=tp > 1)),
                   ("CUDA graphs", lambda: MegatronEngine(model, max_batch_size=args.batch, sync_every=args.sync_every,
                                                          cuda_graphs=True, cuda_graphs_tp=tp > 1))]
        if with_vllm():  # the vllm engine on the same weights (its own copy), where vLLM is installed
            from nemo_lead.generation import EngineConfig, build_engine

            engines.append((VLLM_ROW, lambda: build_engine(EngineConfig(kind="vllm", max_batch_size=args.batch), model)))
        elif lead:
            print("vLLM is not installed here: no engine.kind=vllm row", flush=True)
        sync_every = args.sync_every
        for name, make in engines:  # baseline first, same run
            engine = make()
            sync_every = getattr(engine, "_sync_every", sync_every)

            def timed(tokens: int, engine=engine) -> float:
                params = SamplingParams(temperature=1.0, max_tokens=tokens, seed=0)  # no stop ids: all run to the end
                cuda_sync()
                t = time.perf_counter()
                engine.generate(prompts, params)
                cuda_sync()
                return time.perf_counter() - t

            timed(8)  # warm-up: allocator, kernels
            prefill = min(timed(1) for _ in range(2))
            decode_s = timed(steps + 1) - prefill
            step_s = decode_s / steps
            rows[name] = {
                "prefill_plus_first_token_s": prefill, "decode_s": decode_s, "decode_tokens_per_s": args.batch * steps / decode_s,
                "ms_per_step": 1000 * step_s, "achieved_tb_per_s": bytes_per_step / step_s / 1e12,
                "fraction_of_bandwidth_bound": bytes_per_step / step_s / (args.bandwidth_tbs * 1e12),
                "graph_captures": getattr(engine, "graph_stats", {}).get("captures", "-"),
                "graph_replays": getattr(engine, "graph_stats", {}).get("replays", "-"),
            }
            if hasattr(engine, "close"):
                engine.close()
            if lead:
                print(name, json.dumps(rows[name]), flush=True)
        out = {
            "model": ("dry run: small shape on CPU" if args.dry_run else "Qwen2-1.5B shape") + f", bf16, random weights, local spec, TP{tp}",
            "batch": args.batch, "prompt_len": args.prompt_len, "decode_tokens": steps, "sync_every": sync_every,
            "weight_gb": weight_bytes / 1e9, "mean_kv_gb_per_step": kv_bytes / 1e9, "bandwidth_tb_per_s": args.bandwidth_tbs,
            "rows": rows, "speedup": rows["eager steps"]["decode_s"] / rows["CUDA graphs"]["decode_s"],
            "device": "cpu (dry run)" if args.dry_run else torch.cuda.get_device_name(), "torch": torch.__version__,
        }
    finally:
        destroy_parallel()
    if not lead:
        return out
    emit_json(out, args.out)
    if args.record and not args.dry_run:
        command = "python bench/rollout_bench.py --gpu --record" if tp == 1 else \
            f"python -m torch.distributed.run --standalone --nproc-per-node {tp} bench/rollout_bench.py --gpu --tp {tp} --record"
        record("gpu" if tp == 1 else f"gpu-tp{tp}", "Megatron engine decode on a GPU" + (f", TP{tp}" if tp > 1 else ""), [
            f"Command: `{command}` (bench/gpu_session.sh); {datetime.date.today().isoformat()}, "
            f"{out['device']}, torch {out['torch']}.",
            "",
            f"{out['model']}; batch {out['batch']}, prompts of {out['prompt_len']} tokens, {steps} decode steps (no stop "
            f"token). Bytes read per step: {out['weight_gb']:.2f} GB weights + {out['mean_kv_gb_per_step']:.2f} GB KV "
            f"(mean){' per GPU' if tp > 1 else ''}, against {args.bandwidth_tbs} TB/s. Baseline, same run: the same engine "
            "with eager decode steps.",
            "",
            "| decode steps | tokens/s | ms per step | TB/s | of bandwidth bound | graph captures / replays |",
            "| --- | --- | --- | --- | --- | --- |",
            *(f"| {k} | {r['decode_tokens_per_s']:.0f} | {r['ms_per_step']:.2f} | {r['achieved_tb_per_s']:.2f} | "
              f"**{100 * r['fraction_of_bandwidth_bound']:.1f}%** | {r['graph_captures']} / {r['graph_replays']} |"
              for k, r in out["rows"].items()),
            "",
            f"CUDA graphs vs eager steps: **{out['speedup']:.1f}x** decode speed.",
            *([f"The vllm engine's fraction, {out['rows'][VLLM_ROW]['fraction_of_bandwidth_bound']:.3f}, is what the plan's "
               "`VLLM_DECODE_BANDWIDTH_FRACTION` (nemo_lead/plan/engine_kinds.py) assumes from a published figure until measured."]
              if VLLM_ROW in out["rows"] else []),
            *([f"The plan's `TP_GRAPH_DECODE_BANDWIDTH_FRACTION` (nemo_lead/plan/timing.py) is the CUDA graphs row's "
               f"fraction, {out['rows']['CUDA graphs']['fraction_of_bandwidth_bound']:.3f}, once graph captures > 0."]
              if tp > 1 else []),
        ])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gpu_mode_args(ap, "GPU decode benchmark (1.5B shape, batch 256)")
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    ap.add_argument("--threads", type=int, default=1, help="CPU: torch threads for both sides")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256, help="GPU: sequences")
    ap.add_argument("--prompt-len", type=int, default=128, help="GPU: prompt tokens")
    ap.add_argument("--decode-tokens", type=int, default=256, help="GPU: decode steps")
    ap.add_argument("--sync-every", type=int, default=None, help="GPU: engine host-sync interval")
    ap.add_argument("--bandwidth-tbs", type=float, default=4.8, help="GPU: HBM bandwidth (H200: 4.8)")
    ap.add_argument("--tp", type=int, default=1, help="GPU: tensor-parallel ranks (> 1: under torchrun, one per GPU)")
    ap.add_argument("--vllm", action="store_true", help="CPU, in .venv-vllm: the vllm engine against the megatron "
                    "engine, vLLM's LLM.generate and transformers on SmolLM2-135M (bench/rollout_vllm.py); "
                    "--new-tokens 128 there by default")
    args = ap.parse_args()
    if args.vllm:
        from rollout_vllm import vllm_cpu_bench

        if "--new-tokens" not in sys.argv:
            args.new_tokens = 128
        return vllm_cpu_bench(args, record, machine_line)
    (gpu_bench if args.gpu else cpu_bench)(args)


if __name__ == "__main__":
    main()
