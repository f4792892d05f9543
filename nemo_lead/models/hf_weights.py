"""HF <-> Megatron weights for the Qwen2 / Llama families, TP- and PP-aware (docs/design.md, decision 4).

Load: `load_hf_weights(model, hf_dir)` - every rank reads only the slices its parameters hold, straight
from the safetensors files (single file or `model.safetensors.index.json` shards), so peak memory is one
rank's shard, not the model.

Export: `export_hf_weights(model)` - a collective iterator of `(hf_name, full tensor)` in HF order
(embedding, then layer by layer, then final norm and lm_head): every rank of the job must iterate it to the
end in step; every rank receives every tensor. Shards are all-gathered over TP and the tensor is broadcast
over PP from the stage that owns it. Only one HF tensor (plus its TP shards) is alive at a time, so the
stream is memory-bounded; a consumer that wants "one layer at a time" groups by the `model.layers.{i}.`
prefix. This stream feeds HF export (`save_hf_folder`) and, later, TensorRT-LLM refit.

Layouts megatron uses, and how they map (d = head_dim, T = TP size, r = TP rank):
- linear_qkv.weight [ng * (q_per_group + 2) * d, h]: per query group g, the group's q heads, then its k head,
  then its v head (`_fuse_qkv`). TP splits whole groups: rank r holds groups [r*ng/T, (r+1)*ng/T).
- linear_fc1.weight [2 * ffn, h] = [gate; up] at TP1; rank r holds [gate_r; up_r] (each half split by rows).
- linear_proj / linear_fc2: row-parallel (split along the input dim 1); their biases are replicated.
- embedding / output_layer: [V_pad, h] split by rows over TP; rows >= vocab_size are padding: zero on
  load, dropped on export. Tied embeddings: `lm_head.weight` is not exported (HF ties it); with PP > 1 the
  last stage's output-layer copy is loaded from `model.embed_tokens.weight`.
- Transformer Engine's spec fuses the norms into the next linear (`linear_qkv.layer_norm_weight`,
  `linear_fc1.layer_norm_weight`); both naming schemes are handled.

Tested (tests/models/test_hf_parity.py): HF -> Megatron -> HF bit-identical at TP2 and PP2 (tied and untied),
sharded index files, logits parity with transformers at TP1 / TP2 / PP2.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from nemo_lead.models.gpt import model_info, unwrap_model
from nemo_lead.models.hf_config import Arch, arch_from_hf
from nemo_lead.models.tokenizer import tokenizer_files

# ----------------------------------------------------------------------------- the mapping table
REPLICATED, COLUMN, ROW, QKV, FC1, VOCAB = "replicated", "column", "row", "qkv", "fc1", "vocab"


@dataclass(frozen=True)
class Item:
    """One Megatron parameter and the HF tensor(s) it is made of."""

    megatron: tuple[str, ...]  # candidate parameter names (local spec first, then TE's fused-norm name)
    hf: tuple[str, ...]  # HF names; several for fused QKV (q, k, v) and fc1 (gate, up)
    kind: str
    layer: int | None = None  # global layer index; None for embedding / final norm / output layer
    stage: str = ""  # "first" | "last" for non-layer items


def mapping(arch: Arch) -> list[Item]:
    """All parameters of the full model, in HF export order."""
    items = [Item(("embedding.word_embeddings.weight",), ("model.embed_tokens.weight",), VOCAB, stage="first")]
    for i in range(arch.num_layers):
        mg, hf = f"decoder.layers.{i}.", f"model.layers.{i}."
        attn, mlp = mg + "self_attention.", mg + "mlp."
        items += [
            Item((attn + "linear_qkv.weight",), tuple(hf + f"self_attn.{p}_proj.weight" for p in "qkv"), QKV, i),
        ]
        if arch.qkv_bias:
            items.append(Item((attn + "linear_qkv.bias",), tuple(hf + f"self_attn.{p}_proj.bias" for p in "qkv"), QKV, i))
        items.append(Item((attn + "linear_proj.weight",), (hf + "self_attn.o_proj.weight",), ROW, i))
        if arch.linear_bias:
            items.append(Item((attn + "linear_proj.bias",), (hf + "self_attn.o_proj.bias",), REPLICATED, i))
        items.append(Item((mlp + "linear_fc1.weight",), (hf + "mlp.gate_proj.weight", hf + "mlp.up_proj.weight"), FC1, i))
        if arch.linear_bias:
            items.append(Item((mlp + "linear_fc1.bias",), (hf + "mlp.gate_proj.bias", hf + "mlp.up_proj.bias"), FC1, i))
        items.append(Item((mlp + "linear_fc2.weight",), (hf + "mlp.down_proj.weight",), ROW, i))
        if arch.linear_bias:
            items.append(Item((mlp + "linear_fc2.bias",), (hf + "mlp.down_proj.bias",), REPLICATED, i))
        items += [
            Item((mg + "input_layernorm.weight", attn + "linear_qkv.layer_norm_weight"),
                 (hf + "input_layernorm.weight",), REPLICATED, i),
            Item((mg + "pre_mlp_layernorm.weight", mlp + "linear_fc1.layer_norm_weight"),
                 (hf + "post_attention_layernorm.weight",), REPLICATED, i),
        ]
    items.append(Item(("decoder.final_layernorm.weight",), ("model.norm.weight",), REPLICATED, stage="last"))
    lm_head = "model.embed_tokens.weight" if arch.tied_embeddings else "lm_head.weight"
    items.append(Item(("output_layer.weight",), (lm_head,), VOCAB, stage="last"))
    return items


def hf_names(arch: Arch) -> list[str]:
    """HF tensor names in the order `export_hf_weights` yields them (tied models have no lm_head.weight)."""
    names = []
    for item in mapping(arch):
        if not (item.kind == VOCAB and item.stage == "last" and arch.tied_embeddings):
            names.extend(item.hf)
    return names


def hf_shapes(arch: Arch) -> dict[str, tuple[int, ...]]:
    """Full HF tensor shapes by name (what export yields; also what receivers allocate)."""
    h, d = arch.hidden_size, arch.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (arch.vocab_size, h), "model.norm.weight": (h,)}
    if not arch.tied_embeddings:
        shapes["lm_head.weight"] = (arch.vocab_size, h)
    for i in range(arch.num_layers):
        p = f"model.layers.{i}."
        q, kv = arch.num_heads * d, arch.num_kv_heads * d
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (arch.ffn_hidden_size, h), p + "mlp.up_proj.weight": (arch.ffn_hidden_size, h),
            p + "mlp.down_proj.weight": (h, arch.ffn_hidden_size),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
        if arch.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
        if arch.linear_bias:
            shapes.update({p + "self_attn.o_proj.bias": (h,), p + "mlp.gate_proj.bias": (arch.ffn_hidden_size,),
                           p + "mlp.up_proj.bias": (arch.ffn_hidden_size,), p + "mlp.down_proj.bias": (h,)})
    return shapes


# ----------------------------------------------------------------------------- fused layouts
def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
    """HF q/k/v (rows = heads x d) -> megatron's per-group interleaved [q_g; k_g; v_g] for `groups` groups."""
    qs, ks, vs = q.chunk(groups), k.chunk(groups), v.chunk(groups)
    return torch.cat([t for g in range(groups) for t in (qs[g], ks[g], vs[g])])


def _split_qkv(fused: torch.Tensor, arch: Arch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of `_fuse_qkv` over all query groups."""
    ng, d = arch.num_kv_heads, arch.head_dim
    qpg = arch.num_heads // ng
    per = fused.reshape(ng, (qpg + 2) * d, *fused.shape[1:])
    q = per[:, : qpg * d].reshape(ng * qpg * d, *fused.shape[1:])
    k = per[:, qpg * d : (qpg + 1) * d].reshape(ng * d, *fused.shape[1:])
    v = per[:, (qpg + 1) * d :].reshape(ng * d, *fused.shape[1:])
    return q, k, v


# ----------------------------------------------------------------------------- reading HF files
class HFReader:
    """Named tensors (and slices of them) from a HF folder's safetensors files, opened lazily."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        index = self.folder / "model.safetensors.index.json"
        single = self.folder / "model.safetensors"
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.file_of = {name: self.folder / f for name, f in weight_map.items()}
        elif single.is_file():
            from safetensors import safe_open

            with safe_open(single, framework="pt") as f:
                self.file_of = {name: single for name in f.keys()}
        else:
            raise FileNotFoundError(f"{self.folder}: no model.safetensors or model.safetensors.index.json")
        self._open: dict[Path, object] = {}

    def _handle(self, name: str):
        from safetensors import safe_open

        if name not in self.file_of:
            raise KeyError(f"{self.folder}: the checkpoint has no tensor {name!r}")
        path = self.file_of[name]
        if path not in self._open:
            self._open[path] = safe_open(path, framework="pt")
        return self._open[path]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._handle(name).get_slice(name).get_shape())

    def read(self, name: str, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None):
        """The tensor, or rows [a, b) / columns [a, b) of it (only those bytes are read)."""
        sl = self._handle(name).get_slice(name)
        if rows is not None:
            return sl[rows[0] : rows[1]]
        if cols is not None:
            return sl[:, cols[0] : cols[1]]
        return sl[:]


# ----------------------------------------------------------------------------- load
def _tp() -> tuple[int, int]:
    from megatron.core import parallel_state as ps

    return ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()


def _local_params(model) -> dict[str, torch.nn.Parameter]:
    """This stage's parameters, with local layer indices renamed to global ones (decoder.layers.{global})."""
    params = dict(model.named_parameters())
    out = {}
    offsets = {str(j): layer.layer_number - 1 for j, layer in enumerate(model.decoder.layers)}
    for name, p in params.items():
        parts = name.split(".")
        if parts[:2] == ["decoder", "layers"]:
            parts[2] = str(offsets[parts[2]])
        out[".".join(parts)] = p
    return out


def _shard_from_hf(item: Item, arch: Arch, reader: HFReader, rank: int, size: int, rows_total: int) -> torch.Tensor:
    """This TP rank's slice of `item`, read from the HF files."""
    name = item.hf[0]
    if item.kind == REPLICATED:
        return reader.read(name)
    if item.kind == COLUMN:
        n = reader.shape(name)[0] // size
        return reader.read(name, rows=(rank * n, (rank + 1) * n))
    if item.kind == ROW:
        n = reader.shape(name)[1] // size
        return reader.read(name, cols=(rank * n, (rank + 1) * n))
    if item.kind == FC1:
        n = arch.ffn_hidden_size // size
        return torch.cat([reader.read(nm, rows=(rank * n, (rank + 1) * n)) for nm in item.hf])
    if item.kind == QKV:
        ng = arch.num_kv_heads // size  # query groups on this rank
        d, qpg = arch.head_dim, arch.num_heads // arch.num_kv_heads
        g0 = rank * ng
        q = reader.read(item.hf[0], rows=(g0 * qpg * d, (g0 + ng) * qpg * d))
        k = reader.read(item.hf[1], rows=(g0 * d, (g0 + ng) * d))
        v = reader.read(item.hf[2], rows=(g0 * d, (g0 + ng) * d))
        return _fuse_qkv(q, k, v, ng)
    if item.kind == VOCAB:
        n = rows_total // size  # padded rows per rank
        start, stop = rank * n, min((rank + 1) * n, arch.vocab_size)
        real = reader.read(name, rows=(start, stop)) if stop > start else None
        shard = torch.zeros((n, arch.hidden_size), dtype=real.dtype if real is not None else torch.float32)
        if real is not None:
            shard[: stop - start] = real
        return shard
    raise AssertionError(item.kind)


@torch.no_grad()
def load_hf_weights(model, hf_dir: str | Path) -> None:
    """Fill this rank's stage of `model` (from `build_gpt`) with the weights of a HF folder.

    Every parameter of the stage must be covered by the mapping and every HF tensor it needs must exist
    with the expected shape; otherwise this raises, naming the tensor. `model` may be wrapped (DDP).
    """
    model = unwrap_model(model)
    arch = model_info(model).arch
    reader = HFReader(hf_dir)
    for name, shape in hf_shapes(arch).items():
        if name in reader.file_of and reader.shape(name) != shape:
            raise ValueError(f"{hf_dir}: {name} has shape {reader.shape(name)}, the config implies {shape}")
    rank, size = _tp()
    params = _local_params(model)
    used = set()
    for item in mapping(arch):
        mg = next((n for n in item.megatron if n in params), None)
        if mg is None:
            continue  # not on this stage (or the tied output layer of a single stage)
        param = params[mg]
        shard = _shard_from_hf(item, arch, reader, rank, size, rows_total=param.shape[0] * size)
        if tuple(shard.shape) != tuple(param.shape):
            raise ValueError(f"{mg}: HF {item.hf} give a shard of shape {tuple(shard.shape)}, "
                             f"the model expects {tuple(param.shape)}")
        param.copy_(shard)
        used.add(mg)
    left = sorted(set(params) - used)
    if left:
        raise ValueError(f"parameters not covered by the HF mapping: {left}")


# ----------------------------------------------------------------------------- export
def _stage_of(item: Item, arch: Arch, pp: int) -> int:
    if item.layer is not None:
        return item.layer // (arch.num_layers // pp)
    return 0 if item.stage == "first" else pp - 1


def _gather_tp(t: torch.Tensor) -> list[torch.Tensor]:
    from megatron.core import parallel_state as ps

    size = ps.get_tensor_model_parallel_world_size()
    if size == 1:
        return [t]
    out = [torch.empty_like(t) for _ in range(size)]
    dist.all_gather(out, t.contiguous(), group=ps.get_tensor_model_parallel_group())
    return out


def _full_hf_tensors(item: Item, arch: Arch, local: torch.Tensor) -> list[torch.Tensor]:
    """The full HF tensors of `item` from this rank's shard (collective over TP for sharded kinds)."""
    if item.kind == REPLICATED:
        return [local]
    shards = _gather_tp(local)
    if item.kind in (COLUMN, VOCAB):
        full = torch.cat(shards)
        return [full[: arch.vocab_size] if item.kind == VOCAB else full]
    if item.kind == ROW:
        return [torch.cat(shards, dim=1)]
    if item.kind == FC1:
        halves = [s.chunk(2) for s in shards]
        return [torch.cat([h[0] for h in halves]), torch.cat([h[1] for h in halves])]
    if item.kind == QKV:
        return list(_split_qkv(torch.cat(shards), arch))
    raise AssertionError(item.kind)


@torch.no_grad()
def export_hf_weights(model, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(hf_name, full tensor)` for the whole model, on every rank (a collective: iterate it fully
    on all ranks). `dtype`: cast to this (default: the parameters' dtype). Tensors are on the CPU.
    `model` may be wrapped (DDP)."""
    from megatron.core import parallel_state as ps

    model = unwrap_model(model)
    arch = model_info(model).arch
    pp, pp_rank = ps.get_pipeline_model_parallel_world_size(), ps.get_pipeline_model_parallel_rank()
    params = _local_params(model)
    param_dtype = next(iter(params.values())).dtype
    dtype = dtype or param_dtype
    shapes = hf_shapes(arch)
    for item in mapping(arch):
        if item.kind == VOCAB and item.stage == "last" and arch.tied_embeddings:
            continue  # HF ties lm_head to embed_tokens (see hf_names)
        owner = _stage_of(item, arch, pp)
        if owner == pp_rank:
            mg = next(n for n in item.megatron if n in params)
            tensors = [t.to(dtype) for t in _full_hf_tensors(item, arch, params[mg].detach())]
        else:
            tensors = [torch.empty(shapes[n], dtype=dtype, device=_params_device(params)) for n in item.hf]
        if pp > 1:
            src = dist.get_global_rank(ps.get_pipeline_model_parallel_group(), owner)
            for t in tensors:
                dist.broadcast(t, src=src, group=ps.get_pipeline_model_parallel_group())
        for name, t in zip(item.hf, tensors):
            yield name, t.cpu()


def _params_device(params: dict[str, torch.Tensor]) -> torch.device:
    return next(iter(params.values())).device


# ----------------------------------------------------------------------------- writing a HF folder
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def save_hf_folder(
    folder: str | Path,
    tensors: Iterable[tuple[str, torch.Tensor]],
    hf_config: dict,
    *,
    dtype: torch.dtype,
    tokenizer_dir: str | Path | None = None,
    max_shard_bytes: int = 5 * 2**30,
    write: bool = True,
    log=print,
) -> Path:
    """Write a HF model folder from a `(name, tensor)` stream (e.g. `export_hf_weights`), shard by shard.

    Only one shard's tensors are held at a time. Shards are planned from the config (names in export order,
    sizes from shapes x dtype) so file names `model-0000i-of-0000n.safetensors` are final when written; one
    shard is written as `model.safetensors` without an index, as transformers does. config.json gets the
    written dtype; tokenizer files of `tokenizer_dir` are copied. With `write=False` the stream is consumed
    and nothing is written (the other ranks of a collective export).
    """
    from safetensors.torch import save_file

    arch = arch_from_hf(hf_config)
    shapes, itemsize = hf_shapes(arch), torch.empty((), dtype=dtype).element_size()
    plan: list[list[str]] = [[]]
    size = 0
    for name in hf_names(arch):
        nbytes = math.prod(shapes[name]) * itemsize
        if plan[-1] and size + nbytes > max_shard_bytes:
            plan.append([])
            size = 0
        plan[-1].append(name)
        size += nbytes
    files = (["model.safetensors"] if len(plan) == 1 else
             [f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))])
    shard_of = {name: i for i, names in enumerate(plan) for name in names}
    folder = Path(folder)
    if write:
        if folder.exists() and any(folder.glob("*.safetensors")):
            raise FileExistsError(f"{folder}: already holds safetensors files; choose an empty folder")
        folder.mkdir(parents=True, exist_ok=True)
    pending: dict[str, torch.Tensor] = {}
    done = 0
    for name, tensor in tensors:
        if name not in shard_of:
            raise KeyError(f"tensor {name!r} is not part of a {arch.family} model with this config")
        if tuple(tensor.shape) != shapes[name]:
            raise ValueError(f"{name}: shape {tuple(tensor.shape)}, expected {shapes[name]}")
        if not write:
            continue
        pending[name] = tensor.to(dtype).contiguous()
        if len(pending) == len(plan[done]):
            if set(pending) != set(plan[done]):
                raise ValueError(f"tensors arrived out of order for shard {files[done]}")
            save_file(pending, str(folder / files[done]), metadata={"format": "pt"})
            log(f"[hf] wrote {files[done]} ({len(pending)} tensors)")
            pending, done = {}, done + 1
    if not write:
        return folder
    if done != len(plan):
        raise ValueError(f"the stream ended after {done} of {len(plan)} shards")
    if len(plan) > 1:
        total = sum(math.prod(shapes[n]) * itemsize for n in shard_of)
        index = {"metadata": {"total_size": total}, "weight_map": {n: files[shard_of[n]] for n in hf_names(arch)}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    config = dict(hf_config)
    for key in [k for k in ("dtype", "torch_dtype") if k in config] or ["torch_dtype"]:
        config[key] = _DTYPE_NAMES[dtype]
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    if tokenizer_dir is not None:
        for f in tokenizer_files(tokenizer_dir):
            shutil.copy2(f, folder / f.name)
    return folder
