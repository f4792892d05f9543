"""The plan of a stage that only generates (a recipe's `distill` and `eval` stages, `nemo-lead eval`): the
engine's memory per GPU and the stage's time, from the same engine model as an RL step's generation.

    p = plan_engine_stage(arch, gpu_named("h100"), gpus=8, tp=2, pp=1, precision="bf16", problems=(30, 30), n=32,
                          prompt_tokens=1024, max_tokens=14336, mean_tokens=9054, problems_per_call=8, models=5)
    p.fits, p.seconds, p.worst_seconds

How the stage runs (`nemo_lead/eval/runner.py`): gpus / (tp x pp) data-parallel replicas, each taking one
group of `problems_per_call` problems of one dataset at a time (one engine call of problems_per_call x n
sequences, which ends with its longest response), the replicas in step; an eval stage runs its models one
after the other. So the time is models x ceil(groups / replicas) x one call's time (`timing.generation_seconds`, the lengths
spread around the stated mean as for RL; the last group counted full). Memory per GPU: the weights of one
pipeline stage and the engine's cache and temporaries (`engine_memory`: every row reserved at full length,
engine.kv_cache_gib when set); a layout that does not fit gets no time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from nemo_lead.models.hf_config import Arch
from nemo_lead.plan.engine_memory import engine_memory, kv_slot_bytes
from nemo_lead.plan.parameters import DTYPE_BYTES, static_bytes
from nemo_lead.plan.timing import GPU, decode_graphs, generation_seconds

GIB = 1 << 30


@dataclass(frozen=True)
class EngineStagePlan:
    gpu: GPU
    replicas: int
    rows: int  # sequences a replica decodes at once
    calls: int  # engine calls per replica and model
    models: int
    per_gpu: dict[str, int]  # weights, kv_cache, activations, logits (the worst pipeline stage)
    usable_bytes: int
    mean_tokens: Optional[float]
    max_tokens: int
    call_seconds: float  # one call at the stated mean
    worst_call_seconds: float  # one call with every response at max_tokens

    @property
    def total_bytes(self) -> int:
        return sum(self.per_gpu.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes

    @property
    def seconds(self) -> Optional[float]:
        """The stage at the stated mean response (None: it does not fit)."""
        return self.models * self.calls * self.call_seconds if self.fits else None

    @property
    def worst_seconds(self) -> Optional[float]:
        return self.models * self.calls * self.worst_call_seconds if self.fits else None


def plan_engine_stage(arch: Arch, gpu: GPU, *, gpus: int, tp: int, pp: int, precision: str, problems: tuple[int, ...],
                      n: int,
                      prompt_tokens: int, max_tokens: int, mean_tokens: Optional[float], problems_per_call: int,
                      models: int = 1, max_batch_size: int = 256, max_prefill_tokens: int = 16384, sync_every: int = 8,
                      kv_cache_gib: Optional[float] = None, cuda_graphs: Optional[bool] = None,
                      cuda_graphs_tp: bool = False, top_p: float = 1.0,
                      memory_gib: Optional[float] = None, reserve_gib: float = 3.0,
                      vocab_divisible_by: int = 128) -> EngineStagePlan:
    """The stage of `models` models generating n responses to each problem of datasets of `problems` problems
    each, on `gpus` GPUs."""
    if gpus % (tp * pp):
        raise ValueError(f"{gpus} GPUs are not a multiple of tp x pp = {tp * pp}")
    if mean_tokens is not None and mean_tokens > max_tokens:
        raise ValueError(f"plan.mean_response_tokens ({mean_tokens:,}) exceeds sampling.max_tokens ({max_tokens:,})")
    e = DTYPE_BYTES[precision]
    replicas = gpus // (tp * pp)
    per_call = min(max(problems), problems_per_call)
    sequences = per_call * n
    budget = int(kv_cache_gib * GIB) if kv_cache_gib is not None else None
    worst: dict[str, int] = {}
    rows = 0
    for stage in range(pp):
        weights = static_bytes(arch, tp=tp, pp=pp, dp=1, stage=stage, precision=precision, distributed_optimizer=False,
                               dp_rank=0, vocab_divisible_by=vocab_divisible_by).weights
        g = engine_memory(arch, tp=tp, pp=pp, stage=stage, e=e, sequences=sequences, n=n, prompt_tokens=prompt_tokens,
                          max_tokens=max_tokens, max_batch_size=max_batch_size, max_prefill_tokens=max_prefill_tokens,
                          sync_every=sync_every, kv_budget_bytes=budget, top_p=top_p)
        parts = {"weights": weights, "kv_cache": g.kv_cache, "activations": g.activations, "logits": g.logits}
        rows = g.rows
        if sum(parts.values()) > sum(worst.values()):
            worst = parts
    memory = int((memory_gib if memory_gib is not None else gpu.memory_gib) * GIB)
    calls = math.ceil(sum(math.ceil(p / problems_per_call) for p in problems) / replicas)
    graphs = decode_graphs(cuda_graphs, cuda_graphs_tp=cuda_graphs_tp, tp=tp, pp=pp)
    slot = kv_slot_bytes(arch, tp=tp, pp=pp, e=e)

    def call(mean: Optional[float]) -> float:
        return generation_seconds(arch, gpu, tp=tp, pp=pp, weight_bytes=worst["weights"], slot_bytes=slot, rows=rows,
                                  prompts=per_call, n=n, prompt_tokens=prompt_tokens,
                                  max_tokens=max_tokens, mean_tokens=mean, cuda_graphs=graphs)

    return EngineStagePlan(gpu=gpu, replicas=replicas, rows=rows, calls=calls, models=models, per_gpu=worst,
                           usable_bytes=memory - int(reserve_gib * GIB), mean_tokens=mean_tokens, max_tokens=max_tokens,
                           call_seconds=call(mean_tokens), worst_call_seconds=call(None))
