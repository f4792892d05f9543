"""The update phase's working memory on one actor rank: saved activations and the loss's logits temporaries.

An estimate, written tensor by tensor from what the local layer spec saves for backward (per decoder layer
and token; `e` = bytes of the parameter dtype, q / kv / f = this TP rank's query, key-value and MLP widths,
hs = the hidden size, divided by TP under sequence parallelism):

    the two RMSNorms: the normalised input (or the input itself, torch's kernel) + 1/rms      2 (hs e + 4)
    the inputs of linear_qkv and linear_fc1 (the norms' outputs; local shards under SP)        2 hs e
    attention (GPU): the fused qkv output (alive through v), rotated q and k, SDPA's output    (4q + 3kv) e
      and its log-sum-exp per head (fp32), the input of linear_proj (the output reshaped)      + heads 4
      (CPU: SDPA gets contiguous copies, so the fused output and rotated q, k are freed:       (3q + 2kv) e)
      selective recomputation drops SDPA's output and log-sum-exp                             (3q + 3kv) e
    the SwiGLU MLP: gate, up, silu(gate), the input of linear_fc2                             4 f e
    per layer, not per token: RoPE's cos and sin over the longest row                         2 s d e

Full recomputation (megatron's `uniform` / `block`) keeps each recomputed chunk's input [T, hs] instead,
and at the peak one chunk is recomputed. The backward of a layer needs on top: the incoming gradient and
the MLP's and a projection's input gradients, T (f + 3 hs) e, and the largest weight gradient before
DDP adds it to its buffer. The last stage adds the final norm's two tensors and the decoder output
(3 hs e per token) and the loss temporaries: unchunked (`logits_peak_bytes`) the whole micro-batch's logits in
fp32, chunked (`chunked_logits_peak_bytes`, the default) one chunk's plus the backward's accumulators.
Pipeline stage i (1F1B) holds the saved tensors of min(pp - i, micro-batches) micro-batches, plus the received input and the sent output
of each (and a later stage the previous micro-batch's input and its gradient). Under sequence parallelism
megatron's linears gather their input into one persistent buffer of [T, hidden] (`GlobalMemoryBuffer`). The peak is the larger of the loss (all forward tensors + the loss temporaries) and the
first layer backward (the forward tensors without the final norm's + one backward working set);
`UpdateMemory` reports the tensors live at that moment.

Checked against the live tensor bytes measured while a tiny model's train step runs on the CPU (every
storage the step allocates, tracked exactly by a dispatch-mode tracker), with the CPU variant of the
attention term: tests/plan/test_estimates.py states the tolerance. On GPUs the same accounting is checked
against `torch.cuda.max_memory_allocated` by bench/plan_check.py (bench/gpu_session.sh).
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

    @classmethod
    def of(cls, arch: Arch, tp: int, sequence_parallel: bool) -> Widths:
        hd = arch.head_dim
        return cls(h=arch.hidden_size // tp if sequence_parallel else arch.hidden_size,
                   q=arch.num_heads * hd // tp, kv=arch.num_kv_heads * hd // tp, f=arch.ffn_hidden_size // tp,
                   heads=arch.num_heads // tp, head_dim=hd, hidden=arch.hidden_size)


def layer_saved_bytes(w: Widths, tokens: int, longest: int, e: int, *, selective: bool = False,
                      device: str = "cuda") -> int:
    """Bytes one decoder layer saves for backward for a micro-batch of `tokens` (rows x `longest`)."""
    norms = 2 * (w.h * e + 4)
    inputs = 2 * w.h * e
    if selective:
        attention = (3 * w.q + 3 * w.kv) * e
    elif device == "cpu":
        attention = (3 * w.q + 2 * w.kv) * e + 4 * w.heads
    else:
        attention = (4 * w.q + 3 * w.kv) * e + 4 * w.heads
    mlp = 4 * w.f * e
    return tokens * (norms + inputs + attention + mlp) + 2 * longest * w.head_dim * e


def backward_temporaries(w: Widths, tokens: int, e: int, largest_weight: int) -> int:
    """A layer backward's own tensors: incoming and input gradients, and the largest weight gradient."""
    return tokens * (w.f + 3 * w.h) * e + largest_weight * e


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
class UpdateMemory:
    """The tensors live at the update's peak on one rank, by component."""

    activations: int
    logits: int


def update_memory(arch: Arch, *, tp: int, pp: int, stage: int, tokens: int, longest: int, microbatches: int,
                  e: int, sequence_parallel: bool, recompute: Recompute, vocab_local: int, padded: bool,
                  temperature: float, entropy: bool, logprob_chunk_tokens: int = 0,
                  largest_weight: int = 0, device: str = "cuda") -> UpdateMemory:
    """Peak working memory of a train step on pipeline stage `stage` (see the module docstring)."""
    w = Widths.of(arch, tp, sequence_parallel)
    layers = arch.num_layers // pp
    last = stage == pp - 1
    inflight = min(pp - stage, max(microbatches, 1))
    per_layer = layer_saved_bytes(w, tokens, longest, e, selective=recompute.granularity == "selective",
                                  device=device)
    hidden = tokens * w.h * e
    temps = backward_temporaries(w, tokens, e, largest_weight)
    if recompute.granularity == "full":
        chunks, chunk_layers = recompute.chunks(layers)
        if recompute.method == "block":
            saved = chunks * hidden + (layers - chunks) * per_layer
        else:
            saved = chunks * hidden
        working = chunk_layers * per_layer + temps
    else:
        saved = layers * per_layer
        working = temps
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
    final = 3 * hidden
    if logprob_chunk_tokens > 0:
        loss = chunked_logits_peak_bytes(tokens, logprob_chunk_tokens, vocab_local, w.hidden, e, entropy=entropy)
        final += tokens * w.hidden * e if sequence_parallel else 0  # the gathered hidden states, saved for backward
    else:
        loss = logits_peak_bytes(tokens, vocab_local, e, temperature=temperature, padded=padded, entropy=entropy)
    if held + 2 * previous + final + loss >= backward_peak:
        return UpdateMemory(activations=held + 2 * previous + final, logits=loss)
    return UpdateMemory(activations=backward_peak, logits=0)
