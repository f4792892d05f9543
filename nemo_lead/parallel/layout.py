"""Which parallel layouts are possible, decided before anything is built.

A layout is tensor parallel (TP) x pipeline parallel (PP) x data parallel (DP) = world size. megatron-core
would also refuse most impossible layouts, but only deep inside model construction, after process groups
exist, with an assertion that does not say what to change. `check_layout` is a pure function: it names
every problem at once, so `init_parallel` (and the CLI) can fail in milliseconds with a useful message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class LayoutError(ValueError):
    """A parallel layout that cannot work, with the reason(s) in the message."""


@dataclass(frozen=True)
class Layout:
    world_size: int
    tp: int
    pp: int

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp)


def model_shape(hf_config: Mapping[str, Any]) -> dict[str, int]:
    """The numbers a layout depends on, read from a HF `config.json` dict (Qwen2 / Llama key names)."""
    heads = int(hf_config["num_attention_heads"])
    return {
        "num_layers": int(hf_config["num_hidden_layers"]),
        "num_heads": heads,
        "num_kv_heads": int(hf_config.get("num_key_value_heads") or heads),
    }


def check_layout(
    world_size: int,
    tp: int = 1,
    pp: int = 1,
    *,
    num_layers: int | None = None,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
) -> Layout:
    """Validate TP x PP on `world_size` ranks for a model of the given shape; return the Layout.

    Rules (each violation is listed in one LayoutError):
    - tp, pp >= 1 and world_size divisible by tp * pp (the rest is data parallel);
    - tp divides the attention heads and the KV heads (megatron shards whole query groups; it cannot
      replicate a KV head over several TP ranks);
    - pp <= layers and pp divides the layers (every stage holds the same number of whole layers; uneven
      splits are not supported here).
    Shape arguments left as None are not checked.
    """
    problems: list[str] = []
    for name, value in (("world size", world_size), ("tp", tp), ("pp", pp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{name} must be a positive integer, got {value!r}")
    if problems:
        raise LayoutError("impossible parallel layout: " + "; ".join(problems))
    if world_size % (tp * pp):
        problems.append(
            f"world size {world_size} is not divisible by tp x pp = {tp} x {pp} = {tp * pp} "
            "(data parallel needs whole model replicas)"
        )
    if num_heads is not None and num_heads % tp:
        problems.append(f"tp {tp} does not divide the {num_heads} attention heads (each TP rank needs whole heads)")
    if num_kv_heads is not None and num_kv_heads % tp:
        problems.append(
            f"tp {tp} does not divide the {num_kv_heads} KV heads (GQA query groups are split over TP ranks, "
            "not replicated)"
        )
    if num_layers is not None:
        if pp > num_layers:
            problems.append(f"pp {pp} is larger than the {num_layers} layers (every pipeline stage needs a layer)")
        elif num_layers % pp:
            problems.append(f"pp {pp} does not divide the {num_layers} layers (stages must hold equal layer counts)")
    if problems:
        raise LayoutError(f"impossible parallel layout tp={tp} pp={pp} on {world_size} ranks: " + "; ".join(problems))
    return Layout(world_size=world_size, tp=tp, pp=pp)


def engine_layouts(tp: int, pp: int, engine_tp: Any = "auto", engine_pp: Any = "auto") -> list[tuple[int, int]]:
    """The megatron engine's (TP, PP) layouts that engine.tp / engine.pp `auto` may become over a model at
    `tp` x `pp`, the model's own first: then the replicas at one stage and a TP b dividing `tp` (b < tp x pp,
    smallest b first), each a copy of its own rebuilt after every update (docs/engine-layout.md). A key set
    explicitly narrows them: a number to the layouts with that value, `actor` on either key to the model's
    own layout (the engine on the model's modules). The one rule for the config check
    (`nemo_lead.generation.engine_config`) and the plan (`nemo_lead.plan.job`)."""
    keys = (str(engine_tp), str(engine_pp))
    if "actor" in keys:
        return [(tp, pp)]
    own = [(b, 1) for b in range(1, tp + 1) if tp % b == 0 and b < tp * pp]
    return [layout for layout in dict.fromkeys([(tp, pp), *own])
            if all(k == "auto" or int(k) == x for k, x in zip(keys, layout))]
