"""What a decoder layer keeps for backward, and the transient peaks of a forward + backward, measured on the CPU.

    info = init_parallel(tp)
    m = measure_block(Case(hidden=128, ffn=384, heads=4, kv_heads=2, rows=2, length=200))
    m.saved        # bytes the layers' forward keeps for backward (each storage once, parameters left out)
    m.peak         # the most bytes alive at once during the forward + backward, beyond what existed before
    measure_loss(LossCase(...)).peak                  # the same for the log-probs' loss on [T, hidden] states

The saved bytes come from torch's saved-tensor hooks (`torch.autograd.graph.saved_tensors_hooks`): every
tensor an autograd node or a custom Function's `save_for_backward` keeps passes the pack hook; views of one
storage (v inside the fused qkv output, the norms' outputs shared by two consumers) count once, by storage.
The peaks come from `tensor_memory.LiveTensorBytes` (every storage an aten op allocates, until it is freed).
Weight gradients are freed as soon as autograd has accumulated them, as megatron's DDP does after adding them
to its buffer (`register_post_accumulate_grad_hook`), so a backward holds one at a time.

A block is `Case.layers` decoder layers of a GPTModel built by `nemo_lead.models.build_gpt` with the local
layer spec (the final norm left out: `measure_loss` covers the last stage's end), driven as megatron's
TransformerBlock drives them (full recomputation included), at TP `Case.tp` (gloo) with or without
sequence parallelism. `Case.attention="gpu"` runs SDPA on megatron's views as on a GPU
(`SDPAttention.views_on_cpu`): the tensors a GPU's SDPA keeps (flash, memory-efficient and cuDNN kernels
all save q, k, v, the output and the log-sum-exp) without the CPU path's contiguous copies.
Used by tests/plan/test_saved_activations.py and bench/activation_memory.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from tensor_memory import LiveTensorBytes

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
RECOMPUTE = {"none": {}, "selective": {"recompute_granularity": "selective"},
             "full": {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}}


@dataclass(frozen=True)
class Case:
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    rows: int
    length: int
    tp: int = 1
    sp: bool = False
    recompute: str = "none"  # none | selective | full (uniform, one layer per chunk)
    precision: str = "bf16"
    attention: str = "cpu"  # cpu (the CPU path: contiguous copies, causal blocks) | gpu (views, as on a GPU)
    layers: int = 2

    def hf_config(self) -> dict:
        from nemo_lead.models import tiny_hf_config

        return tiny_hf_config("qwen2", hidden_size=self.hidden, intermediate_size=self.ffn,
                              num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
                              num_hidden_layers=self.layers)


@dataclass(frozen=True)
class Measured:
    saved: int  # bytes kept for backward between the forward and the backward (unique storages)
    peak: int  # the most bytes alive at once during forward + backward, beyond those before
    largest_weight: int  # elements of the largest parameter of the block (its gradient is a transient)


class SavedBytes:
    """Unique storages kept for backward inside the block (saved-tensor hooks), less `exclude`'s."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.storages: dict[int, int] = {}

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        key = s.data_ptr()
        if key and key not in self.exclude:
            self.storages.setdefault(key, s.nbytes())
        return t

    @property
    def total(self) -> int:
        return sum(self.storages.values())

    @contextlib.contextmanager
    def hooks(self):
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t):
            yield self


def _free_after_accumulation(params) -> list:
    """Free each weight gradient once autograd has accumulated it (megatron's DDP adds it to its buffer)."""
    def drop(p):
        p.grad = None
    return [p.register_post_accumulate_grad_hook(drop) for p in params if p.requires_grad]


@contextlib.contextmanager
def _gpu_attention(on: bool):
    from nemo_lead.models.attention import SDPAttention

    old = SDPAttention.views_on_cpu
    SDPAttention.views_on_cpu = on
    try:
        yield
    finally:
        SDPAttention.views_on_cpu = old


def build_block(case: Case):
    """(GPTModel of `case` on this rank, its decoder block without the final norm), in training mode."""
    from nemo_lead.models import build_gpt

    overrides = dict(RECOMPUTE[case.recompute])
    if case.sp:
        overrides["sequence_parallel"] = True
    model = build_gpt(case.hf_config(), None, case.precision, spec="local", config_overrides=overrides)
    model.train()
    block = model.decoder
    block.final_layernorm = None  # the last stage's end is measure_loss's
    return model, block


def measure_block(case: Case, repeats: int = 2) -> Measured:
    """`case`'s block: bytes kept for backward and the peak of a forward + backward (the smaller of `repeats`
    runs' peaks after a warm-up run: megatron's persistent SP buffer and first-call caches are made once)."""
    from megatron.core import parallel_state as ps

    torch.manual_seed(0)
    model, block = build_block(case)
    params = [p for p in model.parameters()]
    handles = _free_after_accumulation(params)
    exclude = {p.untyped_storage().data_ptr() for p in params}
    dtype = DTYPES[case.precision]
    tokens_here = case.length // case.tp if case.sp else case.length
    emb = model.rotary_pos_emb(case.length)
    g = torch.Generator().manual_seed(ps.get_tensor_model_parallel_rank() if case.sp else 0)
    x = torch.randn(tokens_here, case.rows, case.hidden, generator=g, dtype=torch.float32).to(dtype).requires_grad_()
    seed = torch.randn(tokens_here, case.rows, case.hidden, generator=g, dtype=torch.float32).to(dtype)

    def run(saved: SavedBytes | None):
        with saved.hooks() if saved is not None else contextlib.nullcontext():
            out = block(hidden_states=x, attention_mask=None, rotary_pos_emb=emb)
        out.backward(seed)
        x.grad = None

    try:
        with _gpu_attention(case.attention == "gpu"):
            run(None)  # warm-up
            saved = SavedBytes(exclude | {emb.untyped_storage().data_ptr()})
            run(saved)
            peaks = []
            for _ in range(repeats):
                with LiveTensorBytes() as m:
                    run(None)
                peaks.append(m.peak)
    finally:
        for h in handles:
            h.remove()
    largest = max(p.numel() for p in block.parameters())
    return Measured(saved=saved.total, peak=min(peaks), largest_weight=largest)


@dataclass(frozen=True)
class LossCase:
    hidden: int
    vocab: int  # the real vocabulary (padded to a multiple of 128 x tp as the model does)
    rows: int
    length: int
    tp: int = 1
    chunk: int = 2048  # actor.logprob_chunk_tokens (0: unchunked)
    precision: str = "bf16"
    entropy: bool = True
    temperature: float = 0.8


def measure_loss(case: LossCase, repeats: int = 2) -> tuple[int, int, bool]:
    """The log-probs' loss on the decoder's final hidden states [T, hidden] of this rank (no SP): the peak of
    its forward + backward (the output layer's product, the log-probs and entropies of
    `nemo_lead.training.actor.logprobs`, chunked or not), this rank's vocabulary columns and whether it holds
    padded ones."""
    from megatron.core import parallel_state as ps

    from nemo_lead.models import padded_vocab_size
    from nemo_lead.training.actor.logprobs import output_token_logprobs, token_logprobs

    tp, rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    dtype = DTYPES[case.precision]
    local = padded_vocab_size(case.vocab) // tp
    g = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter((torch.randn(local, case.hidden, generator=g) * 0.02).to(dtype))
    handles = _free_after_accumulation([weight])
    h = torch.randn(case.length, case.rows, case.hidden, generator=g).to(dtype).requires_grad_()
    targets = torch.randint(0, case.vocab, (case.rows, case.length), generator=g)

    def loss() -> torch.Tensor:  # its own frame: only the loss outlives the forward, as in a train step
        if case.chunk > 0:
            logp, ent = output_token_logprobs(h, weight, targets, case.vocab, chunk_tokens=case.chunk,
                                              temperature=case.temperature, entropy=case.entropy)
        else:
            from megatron.core import tensor_parallel

            hidden = tensor_parallel.copy_to_tensor_model_parallel_region(h)
            # [b, s, V / tp] as megatron's GPTModel returns them (transposed and made contiguous)
            logits = torch.matmul(hidden, weight.t()).transpose(0, 1).contiguous()
            logp, ent = token_logprobs(logits, targets, case.vocab, temperature=case.temperature,
                                       entropy=case.entropy)
        return logp.sum() + (0.01 * ent.sum() if ent is not None else 0)

    def run():
        loss().backward()
        h.grad = None

    try:
        run()
        peaks = []
        for _ in range(repeats):
            with LiveTensorBytes() as m:
                run()
            peaks.append(m.peak)
    finally:
        for x in handles:
            x.remove()
    return min(peaks), local, (rank + 1) * local > case.vocab
