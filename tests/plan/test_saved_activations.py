"""The plan's activation formula (`nemo_lead.plan.activations`) against what the local layer spec keeps for
backward and the transient peaks of a forward + backward, measured on the CPU (`saved_activations`).

Per case, on every TP rank: the bytes the decoder layers keep from the forward to the backward (saved-tensor
hooks, each storage once) against `block_memory(...).saved`, within SAVED_TOL; the peak of the layers'
forward + backward against `saved + working`, and the peak of the log-probs' loss (chunked and unchunked)
against `chunked_logits_peak_bytes` / `logits_peak_bytes`, within PEAK_TOL. Shapes: hidden sizes 64-256
(MHA and GQA), sequences of 64-520 tokens (the CPU path's causal blocks from 256 on), 1-3 rows, bf16 and
fp32, the CPU's attention path and the GPU's (SDPA on megatron's views), no / selective / full
recomputation, TP1 and TP2 (gloo) with and without sequence parallelism. What the CPU cannot run, the GPU's
fused RMSNorm, is the formula's `Kernels(norm="fused")` term, stated from torch's derivatives.yaml; the
recorded H200 rows check the whole (test_h200_rows.py).
"""

import pytest
from distributed import run_distributed
from saved_activations import RECOMPUTE, Case, LossCase

from nemo_lead.models import arch_from_hf
from nemo_lead.plan.activations import (
    CAUSAL_BLOCK,
    CAUSAL_BLOCK_MAX,
    Kernels,
    Recompute,
    Widths,
    block_memory,
    chunked_logits_peak_bytes,
    logits_peak_bytes,
)

SAVED_TOL = 0.001  # byte-exact but for megatron's few-byte checkpoint state under selective recomputation
PEAK_TOL = 0.05
SHAPES = [dict(hidden=64, ffn=160, heads=4, kv_heads=4), dict(hidden=128, ffn=352, heads=4, kv_heads=2),
          dict(hidden=256, ffn=768, heads=8, kv_heads=2)]
BATCHES = [(1, 64), (3, 300), (2, 520)]  # rows x tokens


def _tp1_cases() -> list[Case]:
    """Every shape x batch, with precision, attention path and recomputation taking turns (36 cases)."""
    cases = []
    for i, shape in enumerate(SHAPES):
        for j, (rows, length) in enumerate(BATCHES):
            for k, (precision, attention) in enumerate((("bf16", "cpu"), ("bf16", "gpu"), ("fp32", "cpu"),
                                                         ("fp32", "gpu"))):
                recompute = ("none", "selective", "full")[(i + j + k) % 3]
                cases.append(Case(**shape, rows=rows, length=length, precision=precision, attention=attention,
                                  recompute=recompute))
    return cases


def _tp2_cases() -> list[Case]:
    return [Case(**SHAPES[1 + (i % 2)], rows=2, length=96 if i % 2 else 200, tp=2, sp=sp, precision=precision,
                 attention=attention, recompute=recompute)
            for i, (sp, precision, attention, recompute) in enumerate(
                (sp, p, a, r) for sp in (False, True) for p, a in (("bf16", "gpu"), ("fp32", "cpu"))
                for r in ("none", "selective", "full"))]


def _blocks(cases):
    from megatron.core import parallel_state as ps
    from saved_activations import measure_block

    from nemo_lead.parallel import destroy_parallel, init_parallel

    out = []
    for c in cases:
        init_parallel(c.tp, 1)
        out.append((c, measure_block(c), ps.get_tensor_model_parallel_rank()))
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def planned_block(c: Case, largest_weight: int):
    arch = arch_from_hf(c.hf_config())
    recompute = Recompute(**{k.removeprefix("recompute_"): v for k, v in RECOMPUTE[c.recompute].items()})
    kernels = Kernels.on("cpu", attention="copies" if c.attention == "cpu" else "views")
    return block_memory(Widths.of(arch, c.tp, c.sp), c.rows * c.length, c.length, 2 if c.precision == "bf16" else 4,
                        layers=c.layers, recompute=recompute, largest_weight=largest_weight, kernels=kernels)


def _check_blocks(results):
    for c, m, rank in results:
        b = planned_block(c, m.largest_weight)
        assert m.saved == pytest.approx(b.saved, rel=SAVED_TOL), (c, rank, "saved", m.saved, b.saved)
        assert m.peak == pytest.approx(b.saved + b.working, rel=PEAK_TOL), (c, rank, "peak", m.peak, b.saved + b.working)


def test_saved_bytes_and_peaks_of_one_rank_match_the_formula():
    (results,) = run_distributed(_blocks, 1, _tp1_cases(), timeout=600)
    _check_blocks(results)
    # the terms each shape exercises: the causal blocks' masks (CPU path, 300 and 520 tokens), the composite
    # norm (bf16 on the CPU), both attention paths; a case the formula got wrong by one [T, q] fails SAVED_TOL
    assert {c.recompute for c, _, _ in results} == {"none", "selective", "full"}


def test_saved_bytes_and_peaks_at_tp2_with_and_without_sequence_parallelism_match_the_formula():
    for rank in run_distributed(_blocks, 2, _tp2_cases(), timeout=600):
        _check_blocks(rank)


def _losses(cases):
    from saved_activations import measure_loss

    from nemo_lead.parallel import destroy_parallel, init_parallel

    out = []
    for c in cases:
        init_parallel(c.tp, 1)
        out.append((c, *measure_loss(c)))
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_the_loss_peaks_match_the_formula():
    cases = [LossCase(hidden=128, vocab=5000, rows=2, length=300, tp=tp, chunk=chunk, precision=precision,
                      entropy=entropy, temperature=temperature)
             for tp in (1, 2) for chunk in (0, 256) for precision in ("bf16", "fp32") for entropy in (True, False)
             for temperature in ((0.8, 1.0) if tp == 1 and not chunk else (0.8,))]
    for rank in run_distributed(_losses, 2, [c for c in cases if c.tp == 2], timeout=600) + [
            run_distributed(_losses, 1, [c for c in cases if c.tp == 1], timeout=600)[0]]:
        for c, peak, local, padded in rank:
            e, tokens = (2 if c.precision == "bf16" else 4), c.rows * c.length
            planned = (chunked_logits_peak_bytes(tokens, c.chunk, local, c.hidden, e, entropy=c.entropy) if c.chunk
                       else logits_peak_bytes(tokens, local, e, temperature=c.temperature, padded=padded,
                                              entropy=c.entropy))
            assert peak == pytest.approx(planned, rel=PEAK_TOL), (c, peak, planned)


def test_the_causal_block_constants_are_the_attentions():
    from nemo_lead.models import attention

    assert (CAUSAL_BLOCK, CAUSAL_BLOCK_MAX) == (attention.CAUSAL_BLOCK, attention.CAUSAL_BLOCK_MAX)


def test_transformer_engines_spec_keeps_one_more_mlp_tensor_per_layer():
    """actor.layer_spec=te: megatron's MLP between TE's linears keeps a fifth [T, f] tensor per layer (the
    local SwiGLU four), the only difference the code shows; a job's shape carries the spec to the plan."""
    from nemo_lead.models import read_hf_config
    from nemo_lead.plan.activations import update_memory

    arch = arch_from_hf(read_hf_config("r1-distill-qwen-1.5b"))
    common = dict(tp=2, pp=1, stage=0, tokens=8192, longest=4096, microbatches=1, e=2, sequence_parallel=True,
                  recompute=Recompute(), vocab_local=75968, padded=False, temperature=1.0, entropy=False,
                  logprob_chunk_tokens=2048, largest_weight=10**7)
    local, te = update_memory(arch, **common), update_memory(arch, **common, layer_spec="te")
    assert te.activations - local.activations == arch.num_layers * 8192 * (arch.ffn_hidden_size // 2) * 2
