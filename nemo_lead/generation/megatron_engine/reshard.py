"""The actor's weights as one full TP1 x PP1 copy on every rank, gathered in memory in bounded buckets.

    tensors, stats = gather_tp1_weights(model, bucket_bytes=512e6)   # collective over the job's ranks
    tensors["decoder.layers.3.self_attention.linear_qkv.weight"]     # the TP1 tensor, global layer index

Why: the megatron engine at TP1 (`engine.tp=1`, `nemo_lead.generation.megatron_engine.model_copy`) decodes on a copy of
the weights in the TP1 layout, rebuilt after every optimizer step, while the actor trains at TP x PP.

How (every rank of the job calls it; each actor replica's TP / PP groups work independently):
- `shard_table` (once per engine): every parameter's local shard shape and dtype, and the PP stage that owns
  it, from one all_gather_object over the world (a stage does not know the shapes of the other stages'
  parameters, e.g. the padded vocabulary on a middle stage). Names are the `nemo_lead.models.hf_weights`
  mapping's first (local spec) names with global layer indices, so a Transformer Engine model's fused norm
  weights (`linear_qkv.layer_norm_weight`) land under `input_layernorm.weight`.
- Buckets: consecutive parameters (mapping order) of one owner stage and one dtype, at most `bucket_bytes`
  of local shard each (at least one parameter). Per bucket the owner stage's ranks flatten their shards
  into one buffer and all-gather it over the TP group ([tp, n]); with PP > 1 the owner stage's TP rank r
  then broadcasts that buffer over its PP group, so every rank of the stage-r column holds it. Only one
  bucket's buffers are alive at a time besides the copy.
- Re-fused in the engine's (TP1) order from the TP shards: column-parallel, vocabulary and fused QKV
  weights are the shards' concatenation along rows (TP splits QKV by whole query groups, each rank's block
  already per-group [q; k; v], so the concatenation is the TP1 layout); row-parallel along columns; the
  gated fc1 [gate_r; up_r] per rank becomes [gate_0 .. gate_T-1; up_0 .. up_T-1]; replicated tensors (norms,
  row-parallel biases) are TP rank 0's. Vocabulary padding rows are kept (the engine masks them).
`stats`: `bytes` (of the gathered buffers on this rank, its own shards included), `buckets`, `seconds`.
Tested against the HF tensors at TP2 and PP2 (tests/generation/test_engine_copy.py).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from nemo_lead.models import model_info, unwrap_model
from nemo_lead.models.hf_weights import COLUMN, FC1, QKV, REPLICATED, ROW, VOCAB, _local_params, mapping


def _named_shards(model) -> dict[str, torch.Tensor]:
    """This rank's parameters under the mapping's canonical names (first candidate, global layer index)."""
    params = _local_params(model)
    out = {}
    for item in mapping(model_info(model).arch):
        name = next((n for n in item.megatron if n in params), None)
        if name is not None:
            out[item.megatron[0]] = params[name].detach()
    return out


def shard_table(model) -> list[tuple[str, str, tuple[int, ...], torch.dtype, int]]:
    """(name, kind, local shard shape, dtype, owner PP stage) of every parameter of the model, mapping order.
    Collective over the world (all_gather_object, once)."""
    from megatron.core import parallel_state as ps

    model = unwrap_model(model)
    stage = ps.get_pipeline_model_parallel_rank()
    mine = {n: (tuple(t.shape), t.dtype, stage) for n, t in _named_shards(model).items()}
    boxes: list[Any] = [mine]
    if dist.is_initialized() and dist.get_world_size() > 1:
        boxes = [None] * dist.get_world_size()
        dist.all_gather_object(boxes, mine)
    known: dict[str, tuple] = {}
    for box in boxes:
        known.update(box)
    return [(item.megatron[0], item.kind, *known[item.megatron[0]])
            for item in mapping(model_info(model).arch) if item.megatron[0] in known]


def _buckets(table, bucket_bytes: float) -> list[list[tuple]]:
    out: list[list[tuple]] = []
    size = 0
    for row in table:
        _, _, shape, dtype, owner = row
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        if out and out[-1][0][4] == owner and out[-1][0][3] == dtype and size + nbytes <= bucket_bytes:
            out[-1].append(row)
            size += nbytes
        else:
            out.append([row])
            size = nbytes
    return out


def _tp1(kind: str, pieces: list[torch.Tensor]) -> torch.Tensor:
    """The TP1 tensor of one parameter from its TP shards (module docstring)."""
    if kind == REPLICATED:
        return pieces[0].clone()
    if kind in (COLUMN, VOCAB, QKV):
        return torch.cat(pieces)
    if kind == ROW:
        return torch.cat(pieces, dim=1)
    if kind == FC1:
        halves = [p.chunk(2) for p in pieces]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    raise AssertionError(kind)


def engine_tp_shards(kind: str, pieces: list[torch.Tensor], engine_tp: int) -> list[torch.Tensor]:
    """One parameter's shards at engine TP `engine_tp` from its actor TP shards (`pieces`, in TP rank order),
    `engine_tp` dividing the actor's TP: engine rank j holds actor ranks j*m .. (j+1)*m - 1 (m = actor TP /
    engine TP), re-fused as `_tp1` does for a whole model. That is the engine's own fused order, because
    every split here is by whole consecutive blocks: QKV by query groups, gate / up each by rows, vocabulary
    rows (padded to the same size at any TP, `nemo_lead.models.hf_config.padded_vocab_size`), column / row
    blocks. engine_tp=1 is the TP1 tensor; engine_tp = the actor's TP gives the shards back. Tested against
    the HF tensors (tests/generation/test_reshard_tp.py). This is the slicing an engine at TP `engine_tp` does on each
    gathered bucket (`gather_tp1_weights`'s `engine_tp`)."""
    if engine_tp < 1 or len(pieces) % engine_tp:
        raise ValueError(f"engine.tp={engine_tp} must divide the actor's TP ({len(pieces)} shards)")
    m = len(pieces) // engine_tp
    return [_tp1(kind, pieces[j * m:(j + 1) * m]) for j in range(engine_tp)]


@torch.no_grad()
def gather_tp1_weights(model, bucket_bytes: float, table=None, engine_tp: int = 1,
                       engine_rank: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every parameter of the whole model in the TP1 layout, on every rank (module docstring). Collective
    over the job's ranks. `table`: `shard_table(model)`, computed here when not given. `engine_tp` > 1 (an
    engine at a TP of its own, dividing the actor's): each rank keeps only engine TP rank `engine_rank`'s
    shard of each parameter (`engine_tp_shards` on the bucket just gathered), except the vocabulary tables,
    kept whole (`nemo_lead.generation.megatron_engine.model_copy`: every rank of an engine replica computes the full
    logits itself)."""
    from megatron.core import parallel_state as ps

    t0 = time.monotonic()
    model = unwrap_model(model)
    table = table if table is not None else shard_table(model)
    tp, tp_group = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_group()
    pp, pp_group = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_group()
    stage = ps.get_pipeline_model_parallel_rank()
    local = _named_shards(model)
    device = next(iter(local.values())).device
    out: dict[str, torch.Tensor] = {}
    stats = {"bytes": 0, "buckets": 0}
    for bucket in _buckets(table, bucket_bytes):
        owner, dtype = bucket[0][4], bucket[0][3]
        sizes = [torch.Size(shape).numel() for _, _, shape, _, _ in bucket]
        n = sum(sizes)
        gathered = torch.empty((tp, n), dtype=dtype, device=device)
        if stage == owner:
            flat = torch.cat([local[name].reshape(-1) for name, *_ in bucket])
            if tp > 1:
                dist.all_gather(list(gathered.unbind(0)), flat, group=tp_group)
            else:
                gathered[0].copy_(flat)
        if pp > 1:
            dist.broadcast(gathered, src=dist.get_global_rank(pp_group, owner), group=pp_group)
        at = 0
        for (name, kind, shape, _, _), size in zip(bucket, sizes):
            pieces = [gathered[r, at:at + size].view(shape) for r in range(tp)]
            if engine_tp == 1 or kind in (VOCAB, REPLICATED):
                out[name] = _tp1(kind, pieces)
            else:
                out[name] = engine_tp_shards(kind, pieces, engine_tp)[engine_rank]
            at += size
        stats["bytes"] += gathered.numel() * gathered.element_size()
        stats["buckets"] += 1
    stats["seconds"] = time.monotonic() - t0
    return out, stats
