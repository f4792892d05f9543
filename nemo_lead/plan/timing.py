"""An RL / SFT step's time, estimated from FLOPs and bytes moved at efficiencies measured on an H200.

    generation   the weights read once per decode step and each live sequence's KV cache read at every step,
                 over HBM bandwidth x DECODE_BANDWIDTH_FRACTION, + EAGER_HOST_S_PER_LAYER x layers per step
                 when the steps are not CUDA graphs, + prefill FLOPs; the decode steps are those of a
                 continuous batch of `rows` slots over the responses' lengths (`response_lengths`,
                 `decode_steps`): a slot takes the next sequence when its own ends, the call ends with the
                 last response to finish
    update       training FLOPs (PaLM's 6 N + 12 L h s per token; + 2 N + 4 L h s per token for a forward of
                 its own: old log-probs recomputed, full activation recomputation) / (GPUs x peak x
                 UPDATE_PEAK_FRACTION), stretched by the pipeline bubble (pp - 1) / micro-batches
    refit        0 for the megatron engine at the actor's layout (it runs on the actor's weights); at TP1 x PP1
                 over a TP x PP actor (engine.tp=1 engine.pp=1) the copy's bytes a GPU receives,
                 (1 - 1 / (TP x PP)) of the model, over the GPU's nominal NVLink bandwidth per direction
                 x LINK_FRACTION (all-gather and broadcast within a node; not measured); offload adds the
                 copies of the optimizer state to the host and back at HOST_LINK_FRACTION of the nominal link

One rule for measured constants: each efficiency is the latest run bench/RESULTS.md records for it, named
beside it as a `Run` (date, commit, megatron-core, GPU, the RESULTS.md block) in `SOURCES`, which the plan's
output prints (`cited`); an older run's figure stays in bench/RESULTS.md as history only. Now (one H200,
local spec, bf16, TP1, megatron-core 0.19.2):
- UPDATE_PEAK_FRACTION (actor:gpu, 2026-12-04): the actor's train step on the R1-Distill-Qwen-1.5B shape
  reached 366 TFLOP/s at 4,096 tokens per micro-batch and 406 at 8,192, i.e. 37.0% / 41.1% of the H200's
  nominal 989 TFLOP/s; applied to each GPU's nominal dense bf16 peak, interpolated in tokens per
  micro-batch. TP / PP communication was not measured (no multi-GPU run yet): these estimates leave it out.
- DECODE_BANDWIDTH_FRACTION (rollout:gpu, 2026-12-04): the engine's CUDA-graph decode at batch 256 read
  3.09 GB of weights and 1.89 GB of KV cache (mean) per step in 10.58 ms against 4.8 TB/s: 9.8% of the
  bandwidth bound; EAGER_HOST_S_PER_LAYER: its eager steps took 89.38 ms, (89.38 - 10.58) / 28 = 2.81 ms of
  host time per layer and step. CUDA graphs are counted at TP = PP = 1
  (the engine's default there); at engine TP > 1 (one stage, `engine.cuda_graphs_tp`) only once a GPU run
  has measured them: TP_GRAPH_DECODE_BANDWIDTH_FRACTION, the fraction of the bandwidth bound the graph decode
  reaches at engine TP2 (bench/gpu_session.sh, step rollout_tp2), is None until bench/RESULTS.md records one,
  and while it is None the switch changes nothing in the plan (`decode_graphs`): TP > 1 counts eager steps.
- The host link (offload) was not measured: NOMINAL, the PCIe generation's per-direction figure.
Response lengths: memory always takes the longest (max_tokens). The time takes a stated mean (a recipe's
`plan.mean_response_tokens`, e.g. the paper's Len_avg; None: every response at max_tokens) and spreads the
lengths around it by one fixed rule, `response_lengths`: L = max_tokens x u^k at the midpoints u of equal
shares, k = max_tokens / mean - 1 (the mean is the stated one, the longest response is near max_tokens, and
a share 1 - q^(1/k) of them is longer than q x max_tokens: `tail_share`), in a fixed order that mixes long
and short (the golden-ratio sequence), as sampling does. The same plan with every response at max_tokens is
the worst case (`JobPlan.worst`). Not measured: the lengths of a real run (its metrics.jsonl has them).
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

from nemo_lead.models.hf_config import Arch
from nemo_lead.plan.engine_kinds import ENGINE_KINDS


@dataclass(frozen=True)
class Run:
    """A measured run an efficiency comes from: its block in bench/RESULTS.md and what it ran on."""

    record: str  # the bench/RESULTS.md block (`layer:name`)
    date: str
    commit: str
    megatron_core: str
    gpu: str

    def cite(self) -> str:
        return (f"measured: bench/RESULTS.md {self.record}, {self.gpu}, {self.date}, commit {self.commit}, "
                f"megatron-core {self.megatron_core}")


ACTOR_GPU_RUN = Run("actor:gpu", "2026-12-04", "c1eb4ee", "0.19.2", "NVIDIA H200")
ROLLOUT_GPU_RUN = Run("rollout:gpu", "2026-12-04", "70fc3db", "0.19.2", "NVIDIA H200")
# tokens per micro-batch -> share of the nominal bf16 peak (366 and 406 of 989 TFLOP/s)
UPDATE_PEAK_FRACTION = {4096: 366 / 989, 8192: 406 / 989}
# bytes read per decode step (weights + mean KV) / seconds per step / the H200's 4.8 TB/s
DECODE_BANDWIDTH_FRACTION = (3.09e9 + 1.89e9) / 10.58e-3 / 4.8e12
EAGER_HOST_S_PER_LAYER = (89.38e-3 - 10.58e-3) / 28
# the CUDA-graph decode at engine TP > 1 as a fraction of the bandwidth bound: None = not measured yet
TP_GRAPH_DECODE_BANDWIDTH_FRACTION: float | None = None
HOST_LINK_FRACTION = 1.0  # nominal (not measured)
# an engine's own decode figure (vllm's: assumed, not measured here) is on its kind's entry (`nemo_lead.plan.engine_kinds`)
LINK_FRACTION = 1.0  # of the nominal NVLink bandwidth reached by the refit's collectives (not measured)

# each efficiency the plan uses and where it comes from (`cited`: the plan's output prints these)
SOURCES = {
    "update_fraction_of_peak": ACTOR_GPU_RUN.cite(),
    "decode_fraction_of_bandwidth": ROLLOUT_GPU_RUN.cite(),
    "eager_decode_host_seconds_per_layer": ROLLOUT_GPU_RUN.cite(),
    # an engine's own decode figure, where it has one (`nemo_lead.plan.engine_kinds`: vllm's, assumed)
    **{f"{k.name}_decode_fraction_of_bandwidth": k.decode.source for k in ENGINE_KINDS.values() if k.decode},
    "host_link_fraction": "assumed: the nominal PCIe figure (not measured)",
    "link_fraction": "assumed: the nominal NVLink figure (not measured)",
}


def cited(engine: str = "megatron") -> str:
    """The efficiencies a plan's step time rests on, each with its source (one line of the plan's output): an
    engine's own decode figure where it has one (`EngineKind.decode`), else the megatron engine's measured ones."""
    lo, hi = UPDATE_PEAK_FRACTION[4096], UPDATE_PEAK_FRACTION[8192]
    update = f"update {lo:.1%}-{hi:.1%} of the bf16 peak ({SOURCES['update_fraction_of_peak']})"
    figure = ENGINE_KINDS[engine].decode
    if figure is not None:
        decode = f"{engine} decode {figure.fraction:.0%} of the HBM bound ({figure.source})"
    else:
        decode = (f"decode {DECODE_BANDWIDTH_FRACTION:.1%} of the HBM bound, {EAGER_HOST_S_PER_LAYER * 1e3:.2f} ms "
                  f"of host time per layer in eager steps ({SOURCES['decode_fraction_of_bandwidth']})")
    return f"{update}; {decode}; host and NVLink copies at nominal speed (assumed)"


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float  # what torch reports as the device's total memory, about
    bf16_tflops: float  # nominal dense bf16 peak
    hbm_tbps: float  # nominal HBM bandwidth
    host_gbps: float  # nominal host link, per direction (PCIe)
    link_gbps: float  # nominal NVLink bandwidth per GPU, per direction (SXM parts)


# Nominal figures from the vendor's datasheets (SXM / HGX parts), checked 2026-12-03: H100 SXM5 80 GB (989
# TFLOP/s dense bf16, 3.35 TB/s, NVLink 900 GB/s both ways, PCIe Gen5); H200 SXM 141 GB (989, 4.8 TB/s);
# A100 SXM4 80 GB / 40 GB (312, 2.039 / 1.555 TB/s, NVLink 600 GB/s both ways, PCIe Gen4); B200 in HGX /
# DGX B200 (2.25 PFLOP/s dense bf16 = half the 4.5 sparse, 8 TB/s, NVLink 1.8 TB/s both ways); H20 (HGX
# H20: 96 GB HBM3, 4.0 TB/s, 148 TFLOP/s dense fp16 / bf16, NVLink 900 GB/s both ways, PCIe Gen5; NVIDIA
# publishes no public datasheet for it, these are the figures of its product brief as widely reported since
# 2024). memory_gib is what torch reports, about 0.5 GiB below nvidia-smi's total (H100 81,559 MiB, H200
# 143,771 MiB, H20 97,871 MiB).
GPUS = {g.name: g for g in (
    GPU("h100", 79.2, 989.0, 3.35, 64.0, 450.0),
    GPU("h200", 139.8, 989.0, 4.8, 64.0, 450.0),
    GPU("h20", 95.0, 148.0, 4.0, 64.0, 450.0),
    GPU("a100", 79.2, 312.0, 2.039, 32.0, 300.0),
    GPU("a100-40", 39.4, 312.0, 1.555, 32.0, 300.0),
    GPU("b200", 178.4, 2250.0, 8.0, 64.0, 900.0),
)}


def gpu_named(name: str) -> GPU:
    """A GPU of `GPUS` by name ("h100", "H200", "NVIDIA H100 80GB HBM3", ...)."""
    key = name.lower().replace("nvidia", "").strip()
    if key in GPUS:
        return GPUS[key]
    # longer names first, so that "h200" (and "gh200") is the H200 before the H20's "h20" is looked for
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


GOLDEN = (math.sqrt(5) - 1) / 2  # the order of the lengths: frac(i x GOLDEN) mixes long and short evenly


def response_lengths(count: int, mean: float | None, max_tokens: int) -> tuple[int, ...]:
    """`count` response lengths with mean about `mean` (None or >= max_tokens: all at max_tokens), in the order
    a batch produces them (module docstring: max_tokens x u^k at midpoints u, shuffled by the golden ratio)."""
    if mean is None or mean >= max_tokens:
        return (max_tokens,) * count
    k = max_tokens / mean - 1
    lengths = [max(1, round(max_tokens * ((j + 0.5) / count) ** k)) for j in range(count)]
    order = sorted(range(count), key=lambda i: (i * GOLDEN) % 1)
    return tuple(lengths[i] for i in order)


def tail_share(mean: float | None, max_tokens: int, q: float = 0.9) -> float:
    """The share of responses longer than q x max_tokens under `response_lengths`' rule (1 when all at max)."""
    if mean is None or mean >= max_tokens:
        return 1.0
    return 1 - q ** (1 / (max_tokens / mean - 1))


@functools.lru_cache(maxsize=4096)
def decode_steps(lengths: tuple[int, ...], rows: int) -> int:
    """Decode steps of a continuous batch of `rows` slots over `lengths` (in order): each sequence takes the
    first slot to come free and holds it for its length; the call ends when the last one finishes."""
    if not lengths or rows < 1:
        return 0
    slots = [0] * min(rows, len(lengths))
    for length in lengths:
        heapq.heapreplace(slots, slots[0] + length)
    return max(slots)


def kv_positions_read(lengths: tuple[int, ...], prompt_tokens: int) -> int:
    """KV positions the decode steps read, summed over all steps: a sequence at its p-th response token reads
    its prompt and p positions (the same whatever the order of the batch)."""
    return sum(n * prompt_tokens + n * (n + 1) // 2 for n in lengths)


def generation_seconds(arch: Arch, gpu: GPU, *, tp: int, pp: int, weight_bytes: int, slot_bytes: int, rows: int,
                       prompts: int, n: int, prompt_tokens: int, max_tokens: int, mean_tokens: float | None,
                       cuda_graphs: bool, calls: int = 1, engine: str = "megatron") -> float:
    """One replica generating n responses to each of `prompts` prompts in one engine call, `rows` at a time
    (the replicas run in parallel; each prompt is prefilled once), responses of mean `mean_tokens` (None:
    all at max_tokens); `calls` such calls one after the other (eval: a call per group of problems).
    `weight_bytes` / `slot_bytes`: one GPU's weights and KV bytes per row and position (one pipeline stage;
    the engine runs its stages in turn, so a step reads all of them). `engine`: an engine with a decode figure
    of its own (`EngineKind.decode`: vllm's, with CUDA graphs, vLLM's default on a GPU) decodes at it, the rest
    the same."""
    lengths = response_lengths(prompts * n, mean_tokens, max_tokens)
    steps = decode_steps(lengths, rows)
    read = steps * weight_bytes + kv_positions_read(lengths, prompt_tokens) * slot_bytes
    fraction = DECODE_BANDWIDTH_FRACTION
    figure = ENGINE_KINDS[engine].decode
    if figure is not None:
        fraction, cuda_graphs = figure.fraction, figure.cuda_graphs or cuda_graphs
    elif cuda_graphs and tp > 1:  # counted only once measured (`decode_graphs`)
        fraction = TP_GRAPH_DECODE_BANDWIDTH_FRACTION
    decode_s = pp * read / (gpu.hbm_tbps * 1e12 * fraction)
    if not cuda_graphs:
        decode_s += steps * EAGER_HOST_S_PER_LAYER * arch.num_layers
    prefill = forward_flops(arch, prompts * prompt_tokens, prompt_tokens)
    prefill_s = prefill / (tp * pp * gpu.bf16_tflops * 1e12 * update_fraction(8192))
    return calls * (decode_s + prefill_s)


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


def reload_refit_seconds(gpu: GPU, model_bytes: int, copy_bytes: int, actor_ranks: int) -> float:
    """The `reload` refit (`EngineKind.refit`: vllm's) on one GPU, all at nominal link speeds: every rank gathers the whole model in HF
    names from its actor replica (NVLink: the part it does not hold) and streams it through the host
    (`export_hf_weights` yields CPU tensors: the model to the host, the engine's shard back), and sleep level 1
    moves the engine's weights to the host and back once per step."""
    nvlink = model_bytes * (1 - 1 / actor_ranks) / (gpu.link_gbps * 1e9 * LINK_FRACTION)
    host = (model_bytes + copy_bytes + 2 * copy_bytes) / (gpu.host_gbps * 1e9 * HOST_LINK_FRACTION)
    return nvlink + host


def refit_seconds(gpu: GPU, copy_bytes: int, actor_ranks: int) -> float:
    """The engine's TP1 copy gathered from an actor replica of `actor_ranks` GPUs: each receives the part of
    the model it does not hold, over NVLink (module docstring)."""
    return copy_bytes * (1 - 1 / actor_ranks) / (gpu.link_gbps * 1e9 * LINK_FRACTION)
