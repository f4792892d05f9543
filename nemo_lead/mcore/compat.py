"""Where megatron-core's public API differs between the releases nemo-lead supports (0.16.1 to 0.19.x).

nemo-lead is tested on megatron-core 0.16.1 (Python 3.11, the CPU default) and 0.19.2 (Python 3.12, what
GPU containers resolve to). Every branch on the installed version lives here, each with a comment naming
the release that changed the API, so that the rest of the code calls one function whatever is installed.
Any layer that may import megatron-core (models, parallel, generation, training) may import this module;
it imports megatron-core lazily, inside each function.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import multiprocessing as mp
import os
from multiprocessing.managers import SyncManager
from typing import Any

from nemo_lead.runtime.processes import die_with_parent

_result_queue_servers: list[Any] = []  # kept alive for the process's lifetime


def with_mlp_class(mlp_spec: Any, cls: type) -> Any:
    """The layer spec's MLP entry building `cls` (a subclass of megatron's `MLP`) instead of megatron's MLP.

    megatron-core <= 0.16 spells the entry `ModuleSpec(module=MLP, submodules=MLPSubmodules(...))`; 0.19
    spells it `functools.partial(MLP.as_mlp_submodule, submodules=...)` (the layer calls it with
    `pg_collection` and `is_mtp_layer`, which `MLP.as_mlp_submodule` turns into MLP's arguments), and only
    rewraps a `ModuleSpec` whose module is megatron's own MLP class, so a subclass must be given as such a
    partial. Returns a new entry; the spec passed in is not changed."""
    if isinstance(mlp_spec, functools.partial):  # megatron-core 0.19 (not in 0.16)
        return functools.partial(cls.as_mlp_submodule, *mlp_spec.args, **mlp_spec.keywords)
    return dataclasses.replace(mlp_spec, module=cls)  # megatron-core 0.16: ModuleSpec


def checkpoint_results_queue_dies_with_us() -> None:
    """Give dist_checkpointing's file writer a results queue whose server process dies with this one.

    megatron-core's `filesystem_async` (0.16 and 0.19 alike; a private module global, `_results_queue`, the
    only way in) starts its queue lazily at the first save through a "spawn" `multiprocessing.Manager`: a
    server process (a full interpreter re-importing the command, ~330 MB) plus multiprocessing's resource
    tracker, which outlive a rank killed with `kill -9`. The queue set here is the same kind of managed
    queue, served by a process forked from this one that asks for the parent-death signal
    (`nemo_lead.runtime.processes.die_with_parent`). Idempotent; call before the first save."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if getattr(filesystem_async, "_results_queue", None) is not None:
        return
    manager = SyncManager(ctx=mp.get_context("fork"))
    manager.start(initializer=die_with_parent, initargs=(os.getpid(),))
    _result_queue_servers.append(manager)
    filesystem_async._results_queue = manager.Queue()


@functools.cache
def _takes_output_processor() -> bool:
    from megatron.core.models.gpt import GPTModel

    return "output_processor" in inspect.signature(GPTModel.forward).parameters


def _hidden_states(hidden_states, **_):
    return hidden_states


def forward_final_hidden(model: Any, gpt: Any, *args: Any) -> Any:
    """`model(*args)` (a GPTModel stage, possibly wrapped in DDP; `gpt` is the GPTModel inside) returning, on
    the last pipeline stage, the decoder's final hidden states [s, b, h] (after the final norm) instead of
    the output layer's logits: what a caller that applies the output layer itself needs. Other stages
    return their usual output (hidden states for the next stage).

    megatron-core 0.19 takes an `output_processor` hook in GPTModel.forward, called with the hidden states
    where the output layer would run. 0.16 has no hook; there `gpt.post_process` is cleared for the call:
    `GPTModel._postprocess` then returns the hidden states before the output layer, and the decoder's final
    norm still runs (the decoder block is built with its own post_process). Either way the output layer is
    not called."""
    if _takes_output_processor():  # megatron-core 0.19 (not in 0.16)
        return model(*args, output_processor=_hidden_states)
    post_process = gpt.post_process  # megatron-core 0.16
    gpt.post_process = False
    try:
        return model(*args)
    finally:
        gpt.post_process = post_process


_LR_KEYS = ("max_lr", "min_lr")


def saved_param_groups_take_current_lrs(optimizer: Any, state: Any) -> None:
    """Set the `max_lr` / `min_lr` of every parameter group in a loaded optimizer state `state` (any nesting:
    chained, float16 or distributed optimizer) to the current optimizer's, in place, before
    `optimizer.load_state_dict(state)`.

    megatron-core 0.19 pairs saved and current parameter groups by an identifier that includes `max_lr` and
    `min_lr` (0.16 pairs them by `wd_mult`, `lr_mult`, `is_expert_parallel`, `is_decoupled_lr` only), so a
    run continued with a new learning rate (`--allow-change actor.optim.lr`) finds no saved group to pair
    with. The learning rates are the configuration's on resume anyway (`load_actor_state` sets them back to
    the scheduler's); nemo-lead's groups all share one learning-rate pair, which is what is written here.
    With several pairs among the current groups nothing is changed (megatron pairs them as it would)."""
    current = {tuple(g.get(k) for k in _LR_KEYS) for g in optimizer.param_groups}
    if len(current) != 1:
        return
    values = dict(zip(_LR_KEYS, current.pop()))

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "param_groups" and isinstance(value, list):
                    for group in value:
                        if isinstance(group, dict):
                            group.update({k: v for k, v in values.items() if k in group})
                else:
                    visit(value)
        elif isinstance(node, list | tuple):
            for item in node:
                visit(item)

    visit(state)
