"""The plan's generation-phase memory against the megatron engine on the CPU.

- Exact: `kv_cache_bytes` equals the bytes of the cache tensors the engine allocates (`KVCache` with its
  stage runner's layers, KV heads per TP rank, head size and dtype) at TP1, TP2 and PP2, and
  `grown_capacities` the capacity `KVCache.reserve` reaches.
- Estimated: the peak of live tensor bytes during `generate` (tracked exactly, weights left out) against
  `engine_memory` (without a KV budget the cache grows by half, so the peak holds two sizes; with one it
  is allocated once at the rows the budget admits),
  within TOL; also with a 16k vocabulary, where the sampling temporaries are the peak.
"""

import pytest
from distributed import run_distributed

from nemo_lead.models import arch_from_hf, read_hf_config, write_tiny_model
from nemo_lead.plan.engine_memory import engine_memory, grown_capacities, kv_cache_bytes

TOL = 0.05
PROMPT, MAX_TOKENS, N, PROMPTS, BATCH = 8, 60, 4, 8, 16


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("engine") / "m", "qwen2", seed=1, num_hidden_layers=4,
                                hidden_size=64, num_attention_heads=4, num_key_value_heads=2))


def _job(hf_dir, layouts, run=(PROMPT, MAX_TOKENS, N, PROMPTS, BATCH), budget=None):
    from megatron.core import parallel_state as ps
    from tensor_memory import LiveTensorBytes

    from nemo_lead.generation import MegatronEngine, SamplingParams
    from nemo_lead.generation.megatron_engine.kv_cache import KVCache
    from nemo_lead.generation.megatron_engine.stage import StageRunner
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel, seed_model_parallel_rng

    prompt, max_tokens, n, count, batch = run
    out = {}
    for tp, pp in layouts:
        init_parallel(tp, pp)
        if isinstance(hf_dir, dict):  # a config only: random weights
            seed_model_parallel_rng(0)
            model = build_gpt(hf_dir, init=True)
        else:
            model = build_gpt(hf_dir, init=False)
            load_hf_weights(model, hf_dir)
        r = StageRunner(model)
        cache = KVCache(len(r.layers), 5, r.groups, r.head_dim, 37, r.dtype, r.device)
        grown = KVCache(len(r.layers), 2, r.groups, r.head_dim, 25, r.dtype, r.device)
        for needed in range(26, PROMPT + MAX_TOKENS + 1):
            grown.reserve(needed)
        engine = MegatronEngine(model, max_batch_size=batch, kv_cache_gib=budget)
        prompts = [[3 + i] * prompt for i in range(count)]
        params = SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, seed=0)  # no stop token: full length
        with LiveTensorBytes() as m:
            engine.generate(prompts, params)
        out[(tp, pp)] = {"cache": cache.nbytes(), "grown": grown.capacity, "peak": m.peak,
                         "rows": engine.last_stats["kv_rows"],
                         "stage": ps.get_pipeline_model_parallel_rank(), "tp_rank": ps.get_tensor_model_parallel_rank()}
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def _plan(hf_dir, tp, pp, stage, run=(PROMPT, MAX_TOKENS, N, PROMPTS, BATCH), budget=None):
    prompt, max_tokens, n, count, batch = run
    return engine_memory(arch_from_hf(read_hf_config(hf_dir)), tp=tp, pp=pp, stage=stage, e=4,
                         sequences=count * n, n=n, prompt_tokens=prompt, max_tokens=max_tokens,
                         max_batch_size=batch, max_prefill_tokens=16384, sync_every=1,
                         kv_budget_bytes=None if budget is None else int(budget * 2**30), device="cpu")


def _check(hf_dir, results, run=(PROMPT, MAX_TOKENS, N, PROMPTS, BATCH), budget=None):
    arch = arch_from_hf(read_hf_config(hf_dir))
    for rank in results:
        for (tp, pp), r in rank.items():
            assert r["cache"] == kv_cache_bytes(arch, tp=tp, pp=pp, e=4, rows=5, capacity=37)
            assert r["grown"] == grown_capacities(25, PROMPT + MAX_TOKENS)[1]
            if r["tp_rank"] == 0:  # the sampler's TP rank (the plan's worst rank)
                planned = _plan(hf_dir, tp, pp, r["stage"], run, budget)
                assert planned.rows == r["rows"]
                assert planned.total == pytest.approx(r["peak"], rel=TOL), ((tp, pp), r, planned)


def test_engine_cache_and_peak_on_one_rank(hf_dir):
    _check(hf_dir, run_distributed(_job, 1, hf_dir, [(1, 1)]))


def test_engine_cache_and_peak_at_tp2_and_pp2(hf_dir):
    _check(hf_dir, run_distributed(_job, 2, hf_dir, [(2, 1), (1, 2)]))


def test_engine_cache_and_peak_under_a_kv_budget(hf_dir):
    """engine.kv_cache_gib for 10 rows of prompt + max_tokens positions (1,024 bytes each at 4 layers, 2 KV heads
    of 16, fp32): the cache is allocated once at 10 rows and never grows."""
    budget = 10 * (PROMPT + MAX_TOKENS) * 1024 / 2**30
    results = run_distributed(_job, 1, hf_dir, [(1, 1)], (PROMPT, MAX_TOKENS, N, PROMPTS, BATCH), budget)
    assert results[0][(1, 1)]["rows"] == 10
    _check(hf_dir, results, budget=budget)


def test_peak_with_a_large_vocabulary_is_the_sampling():
    """A 16k vocabulary: at 16 rows the sampler's fp32 temporaries are the peak next to the cache."""
    from nemo_lead.models import tiny_hf_config

    cfg = tiny_hf_config("qwen2", vocab_size=16384, num_hidden_layers=2)
    run = (8, 20, 4, 4, 16)
    results = run_distributed(_job, 1, cfg, [(1, 1)], run)
    assert _plan(cfg, 1, 1, 0, run).logits > 0
    _check(cfg, results, run)


def test_grown_capacities_follow_the_caches_growth_by_half():
    assert grown_capacities(25, 68) == (55, 82)  # 25 -> 37 -> 55 -> 82
    assert grown_capacities(40, 30) == (0, 40)  # large enough from the start: no growth
