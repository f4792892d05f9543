"""SFT traces -> the actor's `SequenceBatch`, several traces per row (packing) or one each.

A trace is anything with `prompt_ids` and `response_ids` (`nemo_lead.data.traces.Trace`). Packing puts
traces into rows of at most `max_seq_len` tokens, first-fit decreasing: longest first (ties in input
order), each into the first row with room, so the result is deterministic and rows are well filled. A
packed row is one sequence with `prompt_lens = 1` (everything after the first token is "response" to the
actor) and `segments` = the lengths of its traces: `collate` then confines attention to each trace and
restarts the position ids per trace, so every trace is computed as if it ran alone (tested: the same
per-token log-probs, loss and gradients as the traces one by one, tests/training/test_packing.py). The loss
mask marks exactly the traces' response tokens; a later trace's first token would be predicted from the
previous trace, and it is a prompt token anyway, so it is never trained.

Rows hold whole traces only: make them fit first (`nemo_lead.data.traces.fit_traces`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nemo_lead.training.actor.microbatch import SequenceBatch


def _check(traces: Sequence[Any], max_seq_len: int) -> list[int]:
    if not traces:
        raise ValueError("no traces to pack")
    lengths = []
    for i, t in enumerate(traces):
        p, r = len(t.prompt_ids), len(t.response_ids)
        if p < 1 or r < 1:
            raise ValueError(f"trace {i} ({getattr(t, 'id', '?')}): needs at least one prompt and one response "
                             f"token, has {p} and {r}")
        if p + r > max_seq_len:
            raise ValueError(f"trace {i} ({getattr(t, 'id', '?')}) has {p + r} tokens, more than "
                             f"max_seq_len={max_seq_len}: fit the traces first (data.overlong)")
        lengths.append(p + r)
    return lengths


def packing_plan(traces: Sequence[Any], max_seq_len: int) -> list[list[int]]:
    """Rows as lists of trace indices (first-fit decreasing; see the module docstring)."""
    lengths = _check(traces, max_seq_len)
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(traces)), key=lambda i: (-lengths[i], i)):
        for r, room in enumerate(free):
            if lengths[i] <= room:
                rows[r].append(i)
                free[r] -= lengths[i]
                break
        else:
            rows.append([i])
            free.append(max_seq_len - lengths[i])
    return rows


def pack_traces(traces: Sequence[Any], max_seq_len: int, pack: bool = True) -> SequenceBatch:
    """The traces as one `SequenceBatch`: packed rows (`pack=True`, see the module docstring) or one trace
    per row with its prompt as the prompt (`pack=False`)."""
    if not pack:
        _check(traces, max_seq_len)
        return SequenceBatch.from_prompts_and_responses([t.prompt_ids for t in traces],
                                                        [t.response_ids for t in traces])
    tokens, masks, segments = [], [], []
    for row in packing_plan(traces, max_seq_len):
        ids: list[int] = []
        trained: list[float] = []
        for i in row:
            p, r = list(traces[i].prompt_ids), list(traces[i].response_ids)
            ids += p + r
            trained += [0.0] * len(p) + [1.0] * len(r)
        tokens.append(ids)
        masks.append(torch.tensor(trained[1:]))  # per token after the first (prompt_lens = 1)
        segments.append([len(traces[i].prompt_ids) + len(traces[i].response_ids) for i in row])
    return SequenceBatch(tokens=tokens, prompt_lens=[1] * len(tokens), loss_mask=masks, segments=segments)
