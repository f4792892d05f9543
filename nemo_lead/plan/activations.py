"""The update phase's working memory on one actor rank: saved activations and the loss's logits temporaries.

Written tensor by tensor from what the local layer spec keeps for backward, and measured so: per decoder
layer and token (`e` = bytes of the parameter dtype; q / kv / f = this TP rank's query, key-value and MLP
widths; h = the hidden size, divided by TP under sequence parallelism):

    the two RMSNorms (`norm_saved_bytes`): the input (torch's fused kernel, GPU bf16) or the
      normalised input (the local fp32 function) and 1 / rms in fp32                             2 (h e + 4)
      (a CPU in bf16 runs torch's composite norm: the fp32 input and fp32 normalised input      2 (8 h + 4))
    the inputs of linear_qkv and linear_fc1 (the norms' outputs; local shards under SP)          2 h e
    attention (`attention_saved_bytes`), GPU: the fused qkv output (alive through v), rotated
      q and k, SDPA's output (also linear_proj's input: it is laid out as its query) and its
      fp32 log-sum-exp per head                                                                  (3q + 3kv) e + 4 heads
      (CPU: contiguous copies for SDPA, its output copied again for linear_proj                  (3q + 2kv) e + 4 heads)
      selective recomputation drops SDPA's output and the log-sum-exp                           (3q + 3kv) e
    the SwiGLU MLP: gate, up, silu(gate), the input of linear_fc2                                4 f e
      (Transformer Engine's spec: megatron's MLP between TE's linears, `mlp_saved_widths`        5 f e)
    per layer, not per token: RoPE's cos and sin over the longest row (and on the CPU path the
      causal blocks' masks, `causal_block_mask_bytes`)                                         2 s d e

Full recomputation (megatron's `uniform` / `block`) keeps each recomputed chunk's input [T, h] instead,
and at the peak one chunk is recomputed. A layer's backward peaks in linear_fc1's backward, with
`backward_temporaries` on top of everything saved: T (f + 2h) e + the largest weight gradient (+ 2 T hidden e
under SP: the input gathered again and the input gradient of all tokens), besides the gradient reaching
the layer. The last stage adds the final norm's tensors and output and the decoder output
(`final_norm_bytes`) and the loss temporaries: unchunked (`logits_peak_bytes`) the whole micro-batch's
logits in fp32, chunked (`chunked_logits_peak_bytes`, the default) one chunk's plus the backward's
accumulators. Pipeline stage i (1F1B) holds the saved tensors of min(pp - i, micro-batches) micro-batches,
plus the received input and the sent output of each (and a later stage the previous micro-batch's input and
its gradient). Under sequence parallelism megatron's linears gather their input into one persistent buffer
of [T, hidden] (`GlobalMemoryBuffer`). The peak is the larger of the loss (all forward tensors + the loss
temporaries) and the first layer backward (the forward tensors without the final norm's + one backward
working set); `UpdateMemory` reports the tensors live at that moment.

Measured: tests/plan/test_saved_activations.py pins `block_memory` (saved-tensor hooks, each storage once,
and the forward + backward's peak) and the loss's peaks to CPU runs of the local spec at several hidden
sizes, sequence lengths and micro-batches, TP1 / TP2 with and without SP, no / selective / full
recomputation, bf16 and fp32, SDPA on the CPU's path and on the GPU's (views); tests/plan/test_estimates.py
pins `update_memory` to whole train steps; bench/activation_memory.py records the grid with larger shapes,
and tests/plan/test_h200_rows.py checks the plan against the H200 peaks bench/plan_check.py recorded.
The GPU's fused norm is the one term the CPU cannot run (stated from torch's derivatives.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nemo_lead.models.hf_config import Arch

BATCH_TENSOR_BYTES = 48  # per token: a micro-batch's own tensors (ids, positions, targets, masks, log-probs)


@dataclass(frozen=True)
class Widths:
    """One TP rank's widths of a layer (elements per token)."""

    h: int  # hidden size as stored between layers (h / tp under sequence parallelism)
    q: int
    kv: int
    f: int
    heads: int
    head_dim: int
    hidden: int  # the full hidden size
    split: int = 1  # the ranks a micro-batch's tokens are split over between the linears (tp under SP, else 1)

    @classmethod
    def of(cls, arch: Arch, tp: int, sequence_parallel: bool) -> Widths:
        hd = arch.head_dim
        sp = sequence_parallel and tp > 1
        return cls(h=arch.hidden_size // tp if sp else arch.hidden_size,
                   q=arch.num_heads * hd // tp, kv=arch.num_kv_heads * hd // tp, f=arch.ffn_hidden_size // tp,
                   heads=arch.num_heads // tp, head_dim=hd, hidden=arch.hidden_size, split=tp if sp else 1)


@dataclass(frozen=True)
class Kernels:
    """Which code path computes a layer's norms, attention and MLP: what a GPU runs (torch's fused RMSNorm for
    bf16 / fp16, SDPA on megatron's views) or a CPU (torch's composite RMSNorm for bf16 / fp16; contiguous copies
    for SDPA); the local spec's SwiGLU or, under Transformer Engine's spec, megatron's own gated MLP.
    `Kernels.on("cpu", attention="views")` is a CPU running SDPA as a GPU does (`SDPAttention.views_on_cpu`),
    how tests/plan measure the GPU's attention term."""

    norm: str = "fused"  # fused (GPU; any device in fp32: the local `_RMSNormFunction`) | composite (CPU, bf16 / fp16)
    attention: str = "views"  # views (GPU) | copies (CPU)
    mlp: str = "local"  # local (`SwiGLUMLP`) | te (megatron's MLP between TE's linears: `mlp_saved_widths`)

    @classmethod
    def on(cls, device: str, attention: str | None = None, layer_spec: str = "local") -> Kernels:
        cpu = device == "cpu"
        return cls(norm="composite" if cpu else "fused", attention=attention or ("copies" if cpu else "views"),
                   mlp="te" if layer_spec == "te" else "local")


def mlp_saved_widths(kernels: Kernels) -> int:
    """[T, f] tensors the MLP between its linears keeps for backward. The local spec's `SwiGLUMLP`: gate, up,
    silu(gate) and linear_fc2's input, 4. Transformer Engine's spec runs megatron's `MLP.forward` between TE's
    linears with `bias_activation_fusion` off (nemo-lead's config): `torch.chunk` of fc1's [T, 2f] output
    (its views keep it whole: SiLU's and the product's saved input), silu(gate), `up + glu_linear_offset`
    (a copy) and fc2's input, 5. TE's LayerNormLinear keeps what the local norm and linear do (its input,
    the normalised output, 1 / rms: `prepare_for_saving(inputmat, ..., ln_out, mu, rsigma)`), and its fused
    attention the same q, k, v, output and statistics as SDPA on views, its [s, b, h d] output being
    linear_proj's input: only the MLP differs (TransformerEngine 2.20.0.dev0's layernorm_linear.py and
    layernorm_mlp.py, megatron-core 0.16.1's mlp.py, read 2026-12-06; not measured: no TE on a CPU)."""
    return 5 if kernels.mlp == "te" else 4


def norm_saved_bytes(w: Widths, tokens: int, e: int, kernels: Kernels = Kernels()) -> int:
    """Bytes one RMSNorm keeps for backward over a micro-batch of `tokens` (this rank's share under SP). torch's
    `_fused_rms_norm` (GPU) keeps its input and 1 / rms in fp32 (derivatives.yaml: input, result1); in fp32
    the local spec's `_RMSNormFunction` keeps the normalised input and 1 / rms, the same bytes. torch's
    composite `rms_norm` (a CPU in bf16 / fp16: its CPU build has no fused kernel) keeps the input upcast to fp32
    and the fp32 normalised input besides 1 / rms."""
    rstd = 4 * tokens // w.split
    if kernels.norm == "composite" and e != 4:
        return tokens * 2 * 4 * w.h + rstd
    return tokens * w.h * e + rstd


def norm_keeps_input(kernels: Kernels, e: int) -> bool:
    """Whether the RMSNorm keeps its input itself (torch's fused kernel, bf16 / fp16) rather than a normalised
    copy (the local fp32 function, torch's composite)."""
    return kernels.norm == "fused" and e != 4


def final_norm_bytes(w: Widths, tokens: int, e: int, kernels: Kernels = Kernels()) -> int:
    """The last stage's end before the loss: the final norm's saved tensors, its output (the loss keeps it)
    and the decoder's output (its input), unless the norm keeps that one itself."""
    decoder_output = 0 if norm_keeps_input(kernels, e) else tokens * w.h * e
    return norm_saved_bytes(w, tokens, e, kernels) + tokens * w.h * e + decoder_output


def attention_saved_bytes(w: Widths, e: int, *, selective: bool = False, kernels: Kernels = Kernels()) -> int:
    """Bytes per token the attention between the two linears keeps for backward, each storage once:
    views (GPU): the fused qkv output (alive through v, a view of it), rotated q and k, SDPA's output (laid
      out as its query, [s, b, heads, d], so linear_proj's input is the same storage, reshaped without a
      copy) and the fp32 log-sum-exp per head: (q + 2kv) + q + kv + q = 3q + 3kv, + 4 heads;
    copies (CPU): SDPA gets contiguous [b, heads, s, d] copies of q, k, v (the rotated q, k and the fused output
      die); its output in that layout is copied once more for linear_proj: 3q + 2kv, + 4 heads;
    selective recomputation (core attention recomputed) keeps the recomputed function's inputs, the rotated
      q, k and the fused output, and linear_proj's input, on either path: 3q + 3kv."""
    if selective:
        return (3 * w.q + 3 * w.kv) * e
    if kernels.attention == "copies":
        return (3 * w.q + 2 * w.kv) * e + 4 * w.heads
    return (3 * w.q + 3 * w.kv) * e + 4 * w.heads


# the CPU path's causal attention in blocks of query rows (`nemo_lead.models.attention.CAUSAL_BLOCK`,
# `CAUSAL_BLOCK_MAX`; tests/plan/test_saved_activations.py checks that they agree)
CAUSAL_BLOCK, CAUSAL_BLOCK_MAX = 128, 1024


def causal_block_mask_bytes(longest: int, e: int, kernels: Kernels = Kernels()) -> int:
    """The CPU path's causal blocks (`block_causal_attention`, 2 x CAUSAL_BLOCK to CAUSAL_BLOCK_MAX tokens):
    SDPA turns each block's boolean mask [rows, keys] after the first into an additive one in the query's dtype
    and keeps it for backward: sum over the blocks of rows x keys x e, per layer (not per token)."""
    if kernels.attention != "copies" or not 2 * CAUSAL_BLOCK <= longest <= CAUSAL_BLOCK_MAX:
        return 0
    return sum((min(start + CAUSAL_BLOCK, longest) - start) * min(start + CAUSAL_BLOCK, longest) * e
               for start in range(CAUSAL_BLOCK, longest, CAUSAL_BLOCK))


def layer_saved_bytes(w: Widths, tokens: int, longest: int, e: int, *, selective: bool = False,
                      kernels: Kernels = Kernels()) -> int:
    """Bytes one decoder layer keeps for backward for a micro-batch of `tokens` (rows x `longest`): the two
    norms, the inputs of linear_qkv and linear_fc1 (the norms' outputs; this rank's tokens under SP), the
    attention, the MLP (gate, up, silu(gate) and linear_fc2's input), RoPE's cos and sin over the longest
    row and, on the CPU path, the causal blocks' masks (these two per layer, not per token)."""
    per_token = (2 * w.h * e + attention_saved_bytes(w, e, selective=selective, kernels=kernels)
                 + mlp_saved_widths(kernels) * w.f * e)
    masks = 0 if selective else causal_block_mask_bytes(longest, e, kernels)
    return 2 * norm_saved_bytes(w, tokens, e, kernels) + tokens * per_token + 2 * longest * w.head_dim * e + masks


def backward_temporaries(w: Widths, tokens: int, e: int, largest_weight: int) -> int:
    """A layer backward's own tensors at its peak (linear_fc1's backward, the layer's first that is not
    small), besides the gradient that reaches the layer: the gradient of fc1's output and of silu(gate)
    ([T, f] each; fc2's saved input [T, f] is freed by then), fc1's input gradient and the layer's output
    ([T, h] each), and fc1's weight gradient, the largest, before DDP adds it to its buffer:
    T (f + 2h) e + largest e. Under sequence parallelism fc1's backward also gathers its saved input again
    and makes the input gradient of all tokens before reducing and scattering it: 2 T hidden e more."""
    gathered = 2 * tokens * w.hidden * e if w.split > 1 else 0
    return tokens * (w.f + 2 * w.h) * e + largest_weight * e + gathered


def logits_peak_bytes(tokens: int, vocab_local: int, logits_e: int, *, temperature: float, padded: bool,
                      entropy: bool) -> int:
    """The unchunked loss's peak over `tokens` x `vocab_local` logits (`nemo_lead.training.actor.logprobs.
    token_logprobs`, actor.logprob_chunk_tokens=0): the output layer's logits, the fp32 copy the softmax runs
    on (none when the logits already are fp32, T = 1 and this rank holds no padded column), the shifted
    logits and, with entropy, the probabilities; the backward keeps both saved tensors, the gradient and two
    temporaries (one tensor and the gradient without entropy)."""
    copy = 0 if (logits_e == 4 and temperature == 1.0 and not padded) else 4
    forward = logits_e + copy + 4 + (4 if entropy else 0)
    backward = 20 if entropy else 8
    return tokens * vocab_local * max(forward, backward)


def chunked_logits_peak_bytes(tokens: int, chunk: int, vocab_local: int, hidden: int, e: int, *,
                              entropy: bool) -> int:
    """The chunked loss's peak (`_ChunkedOutputLogProbs`, actor.logprob_chunk_tokens > 0): one chunk's logits
    in the parameter dtype while they become fp32, and the fp32 shifted logits and probabilities (with
    entropy); its backward adds, for the whole micro-batch, the hidden-state gradient [T, hidden] (parameter
    dtype), the weight gradient accumulated in fp32 [V / tp, hidden] and, for half precision, one product of
    the weight's shape."""
    c = min(chunk, tokens)
    per_column = max(e + 4 if e != 4 else 4, 8 if entropy else 4)
    accumulators = tokens * hidden * e + vocab_local * hidden * 4 + (vocab_local * hidden * e if e != 4 else 0)
    return c * vocab_local * per_column + accumulators


@dataclass(frozen=True)
class Recompute:
    """The actor's activation recomputation (`actor.recompute_*`)."""

    granularity: str | None = None  # None | full | selective
    method: str | None = None  # full: uniform | block
    num_layers: int | None = None

    def chunks(self, layers: int) -> tuple[int, int]:
        """(checkpointed chunks, layers in the largest chunk) for a stage of `layers` layers (full only)."""
        k = min(self.num_layers or 1, layers)
        if self.method == "block":
            return k, 1
        return math.ceil(layers / k), k


@dataclass(frozen=True)
class BlockMemory:
    """A stage's decoder layers for one micro-batch: what they keep from the forward to the backward, and
    what their backward adds at its peak besides the gradient that reaches them."""

    saved: int
    working: int


def block_memory(w: Widths, tokens: int, longest: int, e: int, *, layers: int, recompute: Recompute,
                 largest_weight: int, kernels: Kernels = Kernels()) -> BlockMemory:
    """`layers` decoder layers: each layer's saved tensors (`layer_saved_bytes`), or under full recomputation
    each chunk's input [T, h] with one chunk's layers recomputed at the backward's peak; the backward's own
    tensors (`backward_temporaries`) on top."""
    per_layer = layer_saved_bytes(w, tokens, longest, e, selective=recompute.granularity == "selective",
                                  kernels=kernels)
    temps = backward_temporaries(w, tokens, e, largest_weight)
    if recompute.granularity != "full":
        return BlockMemory(saved=layers * per_layer, working=temps)
    hidden = tokens * w.h * e
    chunks, chunk_layers = recompute.chunks(layers)
    # a recomputed chunk's first norm keeps its input when it keeps inputs (torch's fused kernel): the chunk's
    # saved input, one storage (megatron's checkpoint hands the layers a detached view of it)
    shared = hidden if norm_keeps_input(kernels, e) else 0
    if recompute.method == "block":  # the first `chunks` layers recomputed one at a time, the rest kept
        return BlockMemory(saved=chunks * hidden + (layers - chunks) * per_layer, working=per_layer - shared + temps)
    return BlockMemory(saved=chunks * hidden, working=chunk_layers * per_layer - shared + temps)


@dataclass(frozen=True)
class UpdateMemory:
    """The tensors live at the update's peak on one rank, by component."""

    activations: int
    logits: int


def update_memory(arch: Arch, *, tp: int, pp: int, stage: int, tokens: int, longest: int, microbatches: int,
                  e: int, sequence_parallel: bool, recompute: Recompute, vocab_local: int, padded: bool,
                  temperature: float, entropy: bool, logprob_chunk_tokens: int = 0,
                  largest_weight: int = 0, device: str = "cuda", layer_spec: str = "local") -> UpdateMemory:
    """Peak working memory of a train step on pipeline stage `stage` (see the module docstring)."""
    w = Widths.of(arch, tp, sequence_parallel)
    layers = arch.num_layers // pp
    last = stage == pp - 1
    inflight = min(pp - stage, max(microbatches, 1))
    hidden = tokens * w.h * e
    kernels = Kernels.on(device, layer_spec=layer_spec)
    block = block_memory(w, tokens, longest, e, layers=layers, recompute=recompute, largest_weight=largest_weight,
                         kernels=kernels)
    saved, working = block.saved, block.working + hidden  # + the gradient reaching a layer
    # the received input (stage > 0) and the sent output (all but the last); with full recomputation the
    # received input is the first recomputed chunk's saved input, already counted
    p2p = hidden * ((stage > 0 and recompute.granularity != "full") + (not last))
    batch = tokens * BATCH_TENSOR_BYTES
    # SP: megatron's linears gather their input tokens into one persistent buffer ("mpu"), [T, hidden]
    gathered = tokens * w.hidden * e if sequence_parallel else 0
    held = inflight * (saved + p2p + batch) + gathered
    # a later stage keeps the previous micro-batch's input gradient until the next backward returns, and its
    # received input until the next loss graph replaces the previous one (the 1F1B schedule's references)
    previous = hidden if stage > 0 and microbatches > 1 else 0
    backward_peak = held + previous + working
    if not last:
        return UpdateMemory(activations=backward_peak, logits=0)
    final = final_norm_bytes(w, tokens, e, kernels)
    if logprob_chunk_tokens > 0:
        loss = chunked_logits_peak_bytes(tokens, logprob_chunk_tokens, vocab_local, w.hidden, e, entropy=entropy)
        final += tokens * w.hidden * e if sequence_parallel else 0  # the gathered hidden states, saved for backward
    else:
        loss = logits_peak_bytes(tokens, vocab_local, e, temperature=temperature, padded=padded, entropy=entropy)
    if held + 2 * previous + final + loss >= backward_peak:
        return UpdateMemory(activations=held + 2 * previous + final, logits=loss)
    return UpdateMemory(activations=backward_peak, logits=0)
