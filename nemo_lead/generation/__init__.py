"""generation layer (docs/design.md): rollout engines behind one interface.

    from nemo_lead.generation import SamplingParams, Rollout, build_engine
    engine = build_engine(EngineConfig(kind="megatron"), actor)          # or kind="trtllm"
    rollouts = engine.generate(prompt_token_ids, SamplingParams(n=8, temperature=0.6, seed=step))
    engine.refit(actor); engine.sleep(); engine.wake()
    metrics = logprob_mismatch([r.policy_logprobs for r in rollouts], actor_logprobs)

Engines (each kind's entry: `nemo_lead.plan.engine_kinds`): `MegatronEngine` (KV-cache sampler on the live actor
modules; CPU and GPU, TP and PP) and
`VllmEngine` (vLLM in every rank's process, refit in memory; GPU image, the vllm extra or vLLM's CPU build,
imported lazily), `TrtllmEngine` (TensorRT-LLM, refit in memory; GPU container only, imported lazily). `sample_tokens` is the
one sampling function, shared with evaluation. Imports models, parallel and the engine kinds' registry (docs/design.md, Layers).
"""

from nemo_lead.algorithms.mismatch import logprob_mismatch  # the engine-side name of the same function
from nemo_lead.generation.engine import FINISH_REASONS, Rollout, RolloutEngine, SamplingParams, check_prompts
from nemo_lead.generation.engine_config import (
    EngineConfig,
    build_engine,
    engine_config_for,
    resolve_engine_kind,
)
from nemo_lead.generation.megatron_engine.engine import MegatronEngine, resolve_model
from nemo_lead.generation.sampling import Draw, make_generator, sample_tokens, truncated_logits
from nemo_lead.models import eval_mode
from nemo_lead.plan.engine_kinds import ENGINE_KINDS, check_engine_layout, has_own_layout

__all__ = [
    "ENGINE_KINDS", "FINISH_REASONS", "Draw", "EngineConfig", "MegatronEngine", "Rollout", "RolloutEngine",
    "SamplingParams", "build_engine", "check_engine_layout", "check_prompts", "engine_config_for", "eval_mode", "has_own_layout", "logprob_mismatch", "resolve_engine_kind", "make_generator", "resolve_model",
    "sample_tokens", "truncated_logits",
]
