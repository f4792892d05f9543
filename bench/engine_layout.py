"""The megatron engine at the actor's layout (TP2) against its own layout (engine.tp=1: a TP1 copy of the
weights on each of the 2 ranks, each generating half the prompts), CPU, gloo, one RL step's rollouts.

Model: Qwen2 4 layers, hidden 256, 4 heads / 2 KV heads, ffn 1024, the tiny character vocabulary (random
fp32 weights, `nemo_lead.models.write_tiny_model`); `--prompts` prompts of 8-40 tokens x `--n` samples,
`--max-tokens` new tokens, temperature 1, the end token as stop token, `generate_all` as the RL loop calls
it. Per layout: the median over `--repeats` runs (alternating) of the step's generation; for engine.tp=1
also the refit (the copy gathered from the TP2 shards: seconds, and the bytes of the gathered buffers per
rank, its own shards included). The tokens
of both layouts are checked equal (each sample draws from the same stream in either layout).

    OMP_NUM_THREADS=1 .venv/bin/python bench/engine_layout.py [--record]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from results_md import machine_line
from results_md import record as record_md

record = functools.partial(record_md, "rollout")


def _prompts(count: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(8, 41, (count,), generator=g).tolist()
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def _rank(folder: str, args: dict) -> dict:
    from nemo_lead.generation import MegatronEngine, SamplingParams
    from nemo_lead.models import build_gpt, load_hf_weights, model_info
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.rl.rollouts import RolloutContext, generate_all

    torch.set_num_threads(1)
    info = init_parallel(2, 1)
    model = build_gpt(folder, info, "fp32", init=False)
    load_hf_weights(model, folder)
    vocab = model_info(model).arch.vocab_size
    prompts = _prompts(args["prompts"], vocab)
    params = SamplingParams(n=args["n"], temperature=1.0, max_tokens=args["max_tokens"], seed=5, stop_token_ids=[2])
    engines = {"actor": MegatronEngine(model, max_batch_size=256),
               "tp1": MegatronEngine(model, max_batch_size=256, own_copy=True)}
    times: dict[str, list[float]] = {k: [] for k in engines}
    refit, tokens = [], {}
    for _ in range(args["repeats"]):
        for name, engine in engines.items():
            if name == "tp1":
                engine.refit(model)
                refit.append(engine.refit_stats)
            ctx = RolloutContext(info=info, engine=engine, tokenizer=None, prompt_cfg=None, verifier=None,
                                 think_open=False)
            torch.distributed.barrier()
            t0 = time.monotonic()
            out = generate_all(ctx, prompts, params)
            torch.distributed.barrier()
            times[name].append(time.monotonic() - t0)
            tokens[name] = [[r.token_ids for r in rs] for rs in out]
    destroy_parallel()
    return {"times": times, "refit": refit, "same": tokens["actor"] == tokens["tp1"],
            "generated": sum(len(t) for rs in tokens["actor"] for t in rs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--record", action="store_true", help="write the figures into bench/RESULTS.md")
    args = ap.parse_args()
    from nemo_lead.models import write_tiny_model
    from nemo_lead.parallel.local import run_local

    load_start = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="engine_layout_")) / "qwen2"
    write_tiny_model(folder, "qwen2", seed=0, num_hidden_layers=4, hidden_size=256, intermediate_size=1024,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    ranks = run_local(_rank, 2, (str(folder), vars(args)), timeout=3600)
    r0 = ranks[0]
    assert all(r["same"] for r in ranks), "the two engine layouts sampled different tokens"
    gen = {k: statistics.median(v) for k, v in r0["times"].items()}
    refit_s = statistics.median(s["seconds"] for s in r0["refit"])
    refit_mb = r0["refit"][-1]["bytes"] / 1e6
    copy_mb = r0["refit"][-1]["copy_bytes"] / 1e6
    cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if line.startswith("Model name")), "unknown CPU")
    cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/engine_layout.py --record" + (
        f" --prompts {args.prompts} --n {args.n} --max-tokens {args.max_tokens} --repeats {args.repeats}")
    rows = [
        f"Command: `{cmd}`; {machine_line(threads=1, load_start=load_start)}; CPU: {cpu}.",
        "",
        f"Qwen2 4 layers, hidden 256, 4 heads / 2 KV heads, ffn 1024 (random fp32 weights), 2 ranks (gloo), the actor at "
        f"TP2; one RL step's rollouts: {args.prompts} prompts of 8-40 tokens x {args.n} samples, up to {args.max_tokens} "
        f"new tokens, temperature 1, stop token on ({r0['generated']} tokens generated); median of {args.repeats} "
        "alternating runs. Same tokens in both layouts: checked.",
        "",
        "| engine layout | generation s | refit s | refit MB gathered per rank | copy MB per rank |",
        "| --- | --- | --- | --- | --- |",
        f"| engine.tp=actor (TP2, one engine) | {gen['actor']:.2f} | 0 | 0 | 0 |",
        f"| engine.tp=1 (TP1 x 2 replicas) | {gen['tp1']:.2f} | {refit_s:.3f} | {refit_mb:.1f} | {copy_mb:.1f} |",
        "",
        f"Generation at TP1 x 2 replicas vs TP2: **{gen['actor'] / gen['tp1']:.2f}x** faster; with the refit "
        f"counted, **{gen['actor'] / (gen['tp1'] + refit_s):.2f}x**.",
    ]
    print("\n".join(rows))
    if args.record:
        record("engine-layout", "Engine at the actor's TP2 vs its own TP1 x 2 replicas (CPU)", rows)


if __name__ == "__main__":
    main()
