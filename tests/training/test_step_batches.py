"""`s.batches` is a `StepBatches` (nemo_lead.training.rl.phases): the serial `BatchQueue` and the split
layout's `SplitQueue` both have its members with its parameters, and the loop calls nothing else on it.

Read from the classes and the sources only: no queue is filled, no training run starts.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from nemo_lead.training.rl import loop, phases
from nemo_lead.training.rl.lag import BatchQueue
from nemo_lead.training.rl.phases import StepBatches
from nemo_lead.training.rl.split import SplitQueue

MEMBERS = {"take", "after_update", "loop_state", "write_part", "close"}  # what rl_job, rl_step and RLState call
QUEUES = [BatchQueue, SplitQueue]


def _protocol_members() -> set[str]:
    return {n for n, v in vars(StepBatches).items() if inspect.isfunction(v) and not n.startswith("_")}


def test_the_protocol_lists_exactly_the_members_the_loop_uses():
    assert _protocol_members() == MEMBERS


@pytest.mark.parametrize("queue", QUEUES, ids=lambda c: c.__name__)
def test_both_queues_satisfy_the_protocol(queue):
    assert issubclass(queue, StepBatches)  # runtime_checkable: every member present
    for name in MEMBERS:  # and with the protocol's parameters, in its order
        want = list(inspect.signature(getattr(StepBatches, name)).parameters)
        assert list(inspect.signature(getattr(queue, name)).parameters) == want, f"{queue.__name__}.{name}"
    assert isinstance(BatchQueue(0, 1), StepBatches)


def test_the_loop_calls_nothing_else_on_s_batches():
    used = set()
    for module in (loop, phases):
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "batches"):
                used.add(node.attr)
    assert used == MEMBERS
