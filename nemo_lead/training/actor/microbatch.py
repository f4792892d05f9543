"""Sequences of different lengths -> each data-parallel rank's share -> token-budget micro-batches -> tensors.

The batch a train step receives (`SequenceBatch`) is a list of sequences, each `prompt + response` token
ids, with per-response-token fields (loss mask, old / reference log-probs) and one advantage per sequence.
Nothing is padded at this level: responses of 14k and 500 tokens sit side by side as they are.

How the step cuts it up, and why:
1. `balance_over_dp`: the global batch is split over the DP ranks by tokens, not by count (longest first,
   each sequence to the rank with the fewest tokens so far; ties to the lower rank). Deterministic, so
   every rank computes every rank's share without talking, and the ranks of one model-parallel group
   (TP / PP) agree on the data.
2. `plan_microbatches`: a rank's share is sorted by length (longest first) and cut into micro-batches
   whose *padded* size (rows x longest row) stays within a token budget, at the cuts that minimise padded
   tokens plus a fixed cost per micro-batch. Similar lengths end up together, so little is padded; a
   sequence longer than the budget gets a micro-batch of its own. The padding fraction is reported by the
   step.
3. `collate`: one micro-batch -> right-padded [b, S] tensors (`MicroBatch`). Right padding with causal
   attention leaves every real position's logits exactly as without padding, so the split does not change
   the loss (the normalisation across micro-batches is the train step's job; see `rl_update.py`).

Packed sequences (SFT: several traces in one row, `nemo_lead.training.sft.packing`): `segments[i]` lists the
lengths of the pieces of sequence i. `collate` then restarts the position ids at every piece and builds a
block-diagonal causal attention mask (no token attends across pieces); the right padding of a row becomes
a piece of its own, so no query row is fully masked. A micro-batch whose rows are all single pieces gets no
mask (the fast causal path); right padding needs none.

Column layout of the per-token tensors: column j of a row holds what is predicted *at* position j, i.e.
the next token `tokens[j + 1]`. Response token t (0-based) of a sequence with prompt length P is
`tokens[P + t]`, predicted at column P + t - 1; its loss mask, old and reference log-probs go there.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch


def _as_1d(values, dtype: torch.dtype, what: str) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=dtype)
    if t.dim() != 1:
        raise ValueError(f"{what} must be 1-D, got shape {tuple(t.shape)}")
    return t


TOKEN_VALUE_FIELDS = ("old_logprobs", "ref_logprobs", "rollout_logprobs")  # per response token, collated alike


@dataclass
class SequenceBatch:
    """A batch of sequences for the actor: `tokens[i]` = prompt + response of sequence i.

    tokens: N sequences of token ids (lists or 1-D int tensors), lengths L_i >= 2.
    prompt_lens: P_i, 1 <= P_i < L_i: the first P_i tokens are the prompt (no loss, no log-prob). For SFT
        over a whole sequence use P_i = 1 (the first token has nothing to be predicted from).
    loss_mask: per response token, R_i = L_i - P_i values; 1 = trained on (0 e.g. for overlong-filtered
        responses or a chat template's tokens). None = all response tokens.
    advantages: [N] float, one per sequence (policy steps).
    old_logprobs / ref_logprobs: per response token [R_i] (log-probs of the sampling / reference policy).
    rollout_logprobs: per response token [R_i], the rollout engine's log-probs of the sampled tokens under
        the untruncated policy (`Rollout.policy_logprobs`): only for the train/inference mismatch metric.
    segments: per sequence, the lengths of the pieces packed in it (positive, summing to L_i); None = one
        piece each (see the module docstring).
    Everything is validated here, naming the sequence at fault.
    """

    tokens: list[torch.Tensor]
    prompt_lens: list[int]
    loss_mask: list[torch.Tensor] | None = None
    advantages: torch.Tensor | None = None
    old_logprobs: list[torch.Tensor] | None = None
    ref_logprobs: list[torch.Tensor] | None = None
    rollout_logprobs: list[torch.Tensor] | None = None
    segments: list[list[int]] | None = None

    def __post_init__(self) -> None:
        self.tokens = [_as_1d(t, torch.long, f"tokens[{i}]") for i, t in enumerate(self.tokens)]
        self.prompt_lens = [int(p) for p in self.prompt_lens]
        n = len(self.tokens)
        if n == 0:
            raise ValueError("a SequenceBatch needs at least one sequence")
        if len(self.prompt_lens) != n:
            raise ValueError(f"prompt_lens has {len(self.prompt_lens)} entries for {n} sequences")
        for i, (t, p) in enumerate(zip(self.tokens, self.prompt_lens)):
            if not 1 <= p < len(t):
                raise ValueError(f"sequence {i}: prompt_lens[{i}]={p} must be in [1, {len(t) - 1}] "
                                 f"(the sequence has {len(t)} tokens; at least one prompt and one response token)")
        resp = self.response_lens
        for name, dtype in (("loss_mask", torch.float32), *((f, torch.float32) for f in TOKEN_VALUE_FIELDS)):
            values = getattr(self, name)
            if values is None:
                continue
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries for {n} sequences")
            values = [_as_1d(v, dtype, f"{name}[{i}]") for i, v in enumerate(values)]
            for i, v in enumerate(values):
                if len(v) != resp[i]:
                    raise ValueError(f"{name}[{i}] has {len(v)} values; sequence {i} has {resp[i]} response tokens")
            setattr(self, name, values)
        if self.advantages is not None:
            self.advantages = _as_1d(self.advantages, torch.float32, "advantages")
            if len(self.advantages) != n:
                raise ValueError(f"advantages has {len(self.advantages)} values for {n} sequences")
        if self.segments is not None:
            if len(self.segments) != n:
                raise ValueError(f"segments has {len(self.segments)} entries for {n} sequences")
            self.segments = [[int(x) for x in s] for s in self.segments]
            for i, (s, t) in enumerate(zip(self.segments, self.tokens)):
                if not s or min(s) < 1 or sum(s) != len(t):
                    raise ValueError(f"segments[{i}]={s} must be positive lengths summing to the sequence's "
                                     f"{len(t)} tokens")

    def __len__(self) -> int:
        return len(self.tokens)

    # computed once: `collate` and the planners read them per row, and `len` of a tensor goes through torch's
    # function-override machinery (the CPU compatibility mode), which made these lists cost seconds per RL step.
    # A batch's tokens are not changed after construction (`select` and `dataclasses.replace` build new ones).
    @functools.cached_property
    def lengths(self) -> list[int]:
        return [t.shape[0] for t in self.tokens]

    @functools.cached_property
    def response_lens(self) -> list[int]:
        return [n - p for n, p in zip(self.lengths, self.prompt_lens)]

    def select(self, indices: Sequence[int]) -> SequenceBatch:
        """The sub-batch of the given sequences, in that order."""
        picked = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                picked[f.name] = None
            elif isinstance(value, torch.Tensor):
                picked[f.name] = value[list(indices)]
            else:
                picked[f.name] = [value[i] for i in indices]
        return SequenceBatch(**picked)

    @classmethod
    def from_prompts_and_responses(cls, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                                   **fields_) -> SequenceBatch:
        """Join prompt and response ids (e.g. from the rollout engine) into one batch."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
        return cls(tokens=[list(p) + list(r) for p, r in zip(prompts, responses)],
                   prompt_lens=[len(p) for p in prompts], **fields_)


# ----------------------------------------------------------------------------- splitting
def balance_over_dp(lengths: Sequence[int], dp: int) -> list[list[int]]:
    """Indices of each DP rank's share, balanced by tokens (see the module docstring); each share sorted.

    A rank may get no sequence when there are fewer sequences than ranks."""
    if dp < 1:
        raise ValueError(f"dp must be >= 1, got {dp}")
    load = [0] * dp
    shares: list[list[int]] = [[] for _ in range(dp)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(dp), key=lambda r: (load[r], r))
        shares[r].append(i)
        load[r] += lengths[i]
    return [sorted(s) for s in shares]


def plan_microbatches(lengths: Sequence[int], token_budget: int, overhead_tokens: int = 256) -> list[list[int]]:
    """Positions into `lengths`, grouped into micro-batches of at most `token_budget` padded tokens
    (rows x longest row; a longer sequence gets one of its own), longest sequences first. Every position
    appears exactly once.

    The cut is the one that minimises padded tokens + `overhead_tokens` x micro-batches: each micro-batch
    has a fixed cost (kernel launches, Python, the schedule) worth about that many tokens of compute, so a
    batch with a long tail is split where the padding saved pays for it. Exact: with the sequences sorted,
    some best split cuts the sorted list into runs, and a dynamic programme over the cut points finds it
    (ties go to fewer, larger micro-batches). A large `overhead_tokens` gives the fewest micro-batches."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    if overhead_tokens < 0:
        raise ValueError(f"overhead_tokens must be >= 0, got {overhead_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    n = len(order)
    longest = [lengths[i] for i in order]
    cost = [0] * (n + 1)  # cost[i]: the best plan of order[i:]
    cut = [n] * (n + 1)  # where that plan's first micro-batch ends
    for i in range(n - 1, -1, -1):
        rows = max(1, token_budget // max(longest[i], 1))  # order[i] is the longest of any run it starts
        cost[i] = None
        for j in range(i + 1, min(n, i + rows) + 1):
            c = (j - i) * longest[i] + overhead_tokens + cost[j]
            if cost[i] is None or c <= cost[i]:  # a tie goes to the longer run
                cost[i], cut[i] = c, j
    groups, i = [], 0
    while i < n:
        groups.append(order[i:cut[i]])
        i = cut[i]
    return groups


def padded_tokens(lengths: Sequence[int], groups: Sequence[Sequence[int]]) -> int:
    """Tokens the micro-batches occupy once padded (rows x longest row, summed)."""
    return sum(len(g) * max(lengths[i] for i in g) for g in groups)


# ----------------------------------------------------------------------------- tensors
@dataclass
class MicroBatch:
    """Right-padded tensors of one micro-batch (column layout: see the module docstring).

    input_ids / position_ids / targets: [b, S] int64 (padding: token 0, positions continue, target 0).
    loss_mask: [b, S] float, 1 where the target is a trained response token.
    response_cols: per row, the column slice holding its response tokens' predictions.
    advantages [b], old_logprobs / ref_logprobs / rollout_logprobs [b, S] (0 outside the response): when the
        batch has them.
    attention_mask: [b, 1, S, S] bool, True = masked out (megatron's convention), block-diagonal causal over
        the rows' pieces; None = plain causal attention (no row of this micro-batch is packed).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    response_cols: list[slice]
    advantages: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    rollout_logprobs: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None

    def response_values(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Per row, the response tokens' entries of a [b, S] tensor (e.g. log-probs), as [R_i] tensors."""
        return [values[r, cols] for r, cols in enumerate(self.response_cols)]


def collate(batch: SequenceBatch, indices: Sequence[int], device: torch.device | str = "cpu",
            multiple_of: int = 1) -> MicroBatch:
    """The sequences `indices` of `batch` as one right-padded micro-batch on `device`, its width a multiple
    of `multiple_of` (sequence parallelism splits the positions evenly over the TP ranks)."""
    rows = len(indices)
    width = -(-max(batch.lengths[i] for i in indices) // multiple_of) * multiple_of
    ids = torch.zeros((rows, width), dtype=torch.long)
    targets = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.float32)
    values = {f: torch.zeros((rows, width)) for f in TOKEN_VALUE_FIELDS if getattr(batch, f) is not None}
    cols = []
    for r, i in enumerate(indices):
        t, p = batch.tokens[i], batch.prompt_lens[i]
        ids[r, : len(t)] = t
        targets[r, : len(t) - 1] = t[1:]
        span = slice(p - 1, len(t) - 1)
        cols.append(span)
        mask[r, span] = 1.0 if batch.loss_mask is None else batch.loss_mask[i]
        for f, t in values.items():
            t[r, span] = getattr(batch, f)[i]
    adv = batch.advantages[list(indices)] if batch.advantages is not None else None
    pieces = [batch.segments[i] if batch.segments is not None else [batch.lengths[i]] for i in indices]
    positions, attention = _segment_layout(pieces, width)
    move = (lambda x: None if x is None else x.to(device))  # noqa: E731
    return MicroBatch(
        input_ids=move(ids), position_ids=move(positions), targets=move(targets), loss_mask=move(mask),
        response_cols=cols, advantages=move(adv), attention_mask=move(attention),
        **{f: move(values.get(f)) for f in TOKEN_VALUE_FIELDS},
    )


def _segment_layout(pieces: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Position ids [b, width] restarting at every piece, and the block-diagonal causal mask [b, 1, S, S]
    (True = masked out) when some row has more than one piece (else None). Padding is a piece of its own."""
    rows = len(pieces)
    if all(len(p) == 1 for p in pieces):
        return torch.arange(width).expand(rows, width).contiguous(), None
    positions = torch.empty((rows, width), dtype=torch.long)
    piece_id = torch.empty((rows, width), dtype=torch.long)
    for r, lens in enumerate(pieces):
        pad = width - sum(lens)
        lens = list(lens) + ([pad] if pad else [])
        positions[r] = torch.cat([torch.arange(n) for n in lens])
        piece_id[r] = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    attend = (piece_id[:, :, None] == piece_id[:, None, :]) & causal
    return positions, ~attend[:, None]


def dummy_like(batch: SequenceBatch) -> SequenceBatch:
    """A two-token sequence with nothing to train on (loss mask 0), carrying the same fields as `batch`:
    what a DP rank without a share of the batch runs, so that it still takes part in the step's
    collectives and reports the same metrics (its gradient is exactly zero)."""
    def has(name):
        return getattr(batch, name) is not None

    return SequenceBatch(
        tokens=[[0, 0]], prompt_lens=[1], loss_mask=[[0.0]],
        advantages=[0.0] if has("advantages") else None,
        **{f: [[0.0]] if has(f) else None for f in TOKEN_VALUE_FIELDS},
        segments=[[2]] if has("segments") else None,
    )
