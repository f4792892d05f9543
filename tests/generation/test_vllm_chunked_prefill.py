"""vLLM's CPU build with a batch whose prompts pass its per-step token budget (max_num_batched_tokens, 4,096):
with chunked prefill a prompt is split over two scheduler steps and vLLM rewinds the request's seeded generator,
which a CPU torch.Generator cannot do ("CPU Generator does not use offset"); the engine turns chunked prefill off
on a CPU (`vllm_params.llm_kwargs`), so such a batch generates, and its samples are those of the same prompts
sent a few at a time (each sample is seeded by its prompt and index, not by the batch). The vllm leg runs it."""

import pytest
from distributed import run_distributed
from vllm_leg import needs_vllm

from nemo_lead.models import write_tiny_model

pytestmark = [pytest.mark.slow, needs_vllm]


def _job(hf_dir):
    from nemo_lead.generation import EngineConfig, SamplingParams, build_engine
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel

    info = init_parallel(1, 1)
    model = build_gpt(hf_dir, info, "fp32", init=False)
    load_hf_weights(model, hf_dir)
    engine = build_engine(EngineConfig(kind="vllm", kv_cache_gib=0.5), model)
    prompts = [[5 + (i + j) % 90 for j in range(90)] for i in range(64)]  # 5,760 prompt tokens in one call
    params = SamplingParams(n=2, temperature=0.8, max_tokens=6, seed=7)
    whole = engine.generate(prompts, params)
    parts = [r for start in range(0, 64, 16) for r in engine.generate(prompts[start:start + 16], params, prompt_offset=start)]
    engine.close()
    destroy_parallel()
    return [r.token_ids for r in whole], [r.token_ids for r in parts]


def test_a_batch_past_the_step_token_budget_generates_the_samples_of_smaller_calls(tmp_path):
    hf = write_tiny_model(tmp_path / "qwen2", "qwen2", seed=3, init_std=0.1, hidden_size=128)
    whole, parts = run_distributed(_job, 1, str(hf), timeout=400)[0]
    assert len(whole) == 128 and all(len(t) == 6 for t in whole)
    assert whole == parts
