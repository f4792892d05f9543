"""An RL / SFT step's time, estimated from FLOPs and bytes moved at efficiencies measured on an H200.

    generation   decode steps x (bytes a step reads / (HBM bandwidth x DECODE_BANDWIDTH_FRACTION)
                 + EAGER_HOST_S_PER_LAYER x layers when the steps are not CUDA graphs) + prefill FLOPs
    update       training FLOPs (PaLM's 6 N + 12 L h s per token; + 2 N + 4 L h s per token for a forward of
                 its own: old log-probs recomputed, full activation recomputation) / (GPUs x peak x
                 UPDATE_PEAK_FRACTION), stretched by the pipeline bubble (pp - 1) / micro-batches
    refit        0 for the megatron engine at the actor's layout (it runs on the actor's weights); at TP1 x PP1
                 over a TP x PP actor (engine.tp=1 engine.pp=1) the copy's bytes a GPU receives,
                 (1 - 1 / (TP x PP)) of the model, over the GPU's nominal NVLink bandwidth per direction
                 x LINK_FRACTION (all-gather and broadcast within a node; not measured); offload adds the
                 copies of the optimizer state to the host and back at HOST_LINK_FRACTION of the nominal link

The efficiencies are bench/RESULTS.md's figures of 2026-11-30 (one H200, local spec, bf16, TP1):
- UPDATE_PEAK_FRACTION: the actor's train step on the R1-Distill-Qwen-1.5B shape reached 409 TFLOP/s at
  8,192 tokens per micro-batch and 337 at 4,096 (51.8% / 42.7% "MFU of 790" in RESULTS.md's actor:gpu), i.e.
  41.3% / 34.1% of the H200's nominal 989 TFLOP/s; applied to each GPU's nominal dense bf16 peak,
  interpolated in tokens per micro-batch. TP / PP communication was not measured (no multi-GPU run yet):
  these estimates leave it out.
- DECODE_BANDWIDTH_FRACTION: the engine's CUDA-graph decode at batch 256 moved 12.8% of the bandwidth
  bound (rollout:gpu); EAGER_HOST_S_PER_LAYER: its eager steps took 77.71 ms against 8.10 ms for 28
  layers, (77.71 - 8.10) / 28 = 2.49 ms of host time per layer and step. CUDA graphs are counted at TP = PP = 1
  (the engine's default there); at engine TP > 1 (one stage, `engine.cuda_graphs_tp`) only once a GPU run
  has measured them: TP_GRAPH_DECODE_BANDWIDTH_FRACTION, the fraction of the bandwidth bound the graph decode
  reaches at engine TP2 (bench/gpu_session.sh, step rollout_tp2), is None until bench/RESULTS.md records one,
  and while it is None the switch changes nothing in the plan (`decode_graphs`): TP > 1 counts eager steps.
- The host link (offload) was not measured: NOMINAL, the PCIe generation's per-direction figure.
Response lengths: memory always takes the longest (max_tokens); the time takes `response_fraction` of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from nemo_lead.models.hf_config import Arch

UPDATE_PEAK_FRACTION = {4096: 337 / 989, 8192: 409 / 989}  # tokens per micro-batch -> share of nominal peak
DECODE_BANDWIDTH_FRACTION = 0.128
EAGER_HOST_S_PER_LAYER = (77.71e-3 - 8.10e-3) / 28
# the CUDA-graph decode at engine TP > 1 as a fraction of the bandwidth bound: None = not measured yet
TP_GRAPH_DECODE_BANDWIDTH_FRACTION: float | None = None
HOST_LINK_FRACTION = 1.0  # nominal (not measured)
LINK_FRACTION = 1.0  # of the nominal NVLink bandwidth reached by the refit's collectives (not measured)


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float  # what torch reports as the device's total memory, about
    bf16_tflops: float  # nominal dense bf16 peak
    hbm_tbps: float  # nominal HBM bandwidth
    host_gbps: float  # nominal host link, per direction (PCIe)
    link_gbps: float  # nominal NVLink bandwidth per GPU, per direction (SXM parts)


GPUS = {g.name: g for g in (
    GPU("h100", 79.2, 989.0, 3.35, 64.0, 450.0),
    GPU("h200", 139.8, 989.0, 4.8, 64.0, 450.0),
    GPU("a100", 79.2, 312.0, 2.04, 32.0, 300.0),
    GPU("a100-40", 39.4, 312.0, 1.55, 32.0, 300.0),
    GPU("b200", 178.4, 2250.0, 8.0, 64.0, 900.0),
)}


def gpu_named(name: str) -> GPU:
    """A GPU of `GPUS` by name ("h100", "H200", "NVIDIA H100 80GB HBM3", ...)."""
    key = name.lower().replace("nvidia", "").strip()
    if key in GPUS:
        return GPUS[key]
    for g in sorted(GPUS.values(), key=lambda g: -len(g.name)):
        if g.name.split("-")[0] in key and (g.name != "a100-40" or "40" in key):
            return g
    raise ValueError(f"unknown GPU {name!r}: one of {', '.join(GPUS)} (or give plan.gpu_memory_gib)")


def update_fraction(tokens_per_microbatch: int) -> float:
    lo, hi = UPDATE_PEAK_FRACTION[4096], UPDATE_PEAK_FRACTION[8192]
    t = min(max((tokens_per_microbatch - 4096) / 4096, 0.0), 1.0)
    return lo + t * (hi - lo)


def matmul_parameters(arch: Arch) -> int:
    """Parameters that take part in matrix products per token (the layers and the output layer)."""
    h, hd, f = arch.hidden_size, arch.head_dim, arch.ffn_hidden_size
    per_layer = h * (arch.num_heads + 2 * arch.num_kv_heads) * hd + arch.num_heads * hd * h + 3 * h * f
    return arch.num_layers * per_layer + arch.vocab_size * h


def forward_flops(arch: Arch, tokens: int, seq: float) -> float:
    """A forward pass over `tokens` tokens of sequences of mean length `seq`: 2 N + 4 L h s per token."""
    return tokens * (2 * matmul_parameters(arch) + 4 * arch.num_layers * arch.hidden_size * seq)


def decode_graphs(cuda_graphs: bool | None, *, cuda_graphs_tp: bool, tp: int, pp: int) -> bool:
    """Whether the plan counts the engine's decode steps at engine TP x PP as CUDA graphs: at TP = PP = 1
    unless `cuda_graphs` is False; at TP > 1 with one stage only with `cuda_graphs_tp` and a measured
    TP_GRAPH_DECODE_BANDWIDTH_FRACTION (module docstring); never at PP > 1 (the engine refuses them)."""
    if cuda_graphs is False or pp > 1:
        return False
    return tp == 1 or (cuda_graphs_tp and TP_GRAPH_DECODE_BANDWIDTH_FRACTION is not None)


@dataclass(frozen=True)
class StepTime:
    generation: float
    update: float
    refit: float

    @property
    def total(self) -> float:
        return self.generation + self.update + self.refit


def generation_seconds(arch: Arch, gpu: GPU, *, tp: int, pp: int, weight_bytes: int, slot_bytes: int, rows: int,
                       prompts: int, n: int, prompt_tokens: int, max_tokens: int, response_fraction: float,
                       cuda_graphs: bool) -> float:
    """One DP replica generating n responses to each of `prompts` prompts, `rows` at a time (the replicas
    run in parallel; each prompt is prefilled once).
    `weight_bytes` / `slot_bytes`: one GPU's weights and KV bytes per row and position (one pipeline stage;
    the engine runs its stages in turn, so a step reads all of them)."""
    sequences = prompts * n
    mean_response = response_fraction * max_tokens
    steps = max(max_tokens, sequences * mean_response / rows) if rows else 0
    live = min(rows, sequences)
    kv_read = live * (prompt_tokens + mean_response / 2) * slot_bytes
    fraction = DECODE_BANDWIDTH_FRACTION
    if cuda_graphs and tp > 1:  # counted only once measured (`decode_graphs`)
        fraction = TP_GRAPH_DECODE_BANDWIDTH_FRACTION
    step_s = pp * (weight_bytes + kv_read) / (gpu.hbm_tbps * 1e12 * fraction)
    if not cuda_graphs:
        step_s += EAGER_HOST_S_PER_LAYER * arch.num_layers
    prefill = forward_flops(arch, prompts * prompt_tokens, prompt_tokens)
    prefill_s = prefill / (tp * pp * gpu.bf16_tflops * 1e12 * update_fraction(8192))
    return steps * step_s + prefill_s


def update_seconds(arch: Arch, gpu: GPU, *, gpus: int, pp: int, tokens: int, seq: float, tokens_per_microbatch: int,
                   microbatches: int, forwards: int) -> float:
    """`forwards` forward-pass equivalents over `tokens` tokens (all DP ranks) on `gpus` GPUs: a training pass
    is 3 (the backward costs two), full recomputation adds 1 per pass, a log-prob pass is 1."""
    seconds = forwards * forward_flops(arch, tokens, seq) / (gpus * gpu.bf16_tflops * 1e12 * update_fraction(tokens_per_microbatch))
    bubble = (pp - 1) / max(microbatches, 1)
    return seconds * (1 + bubble)


def offload_seconds(gpu: GPU, bytes_each_way: int) -> float:
    """Optimizer state to the host before generation and back after it."""
    return 2 * bytes_each_way / (gpu.host_gbps * 1e9 * HOST_LINK_FRACTION)


def refit_seconds(gpu: GPU, copy_bytes: int, actor_ranks: int) -> float:
    """The engine's TP1 copy gathered from an actor replica of `actor_ranks` GPUs: each receives the part of
    the model it does not hold, over NVLink (module docstring)."""
    return copy_bytes * (1 - 1 / actor_ranks) / (gpu.link_gbps * 1e9 * LINK_FRACTION)
