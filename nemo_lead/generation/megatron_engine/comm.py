"""How the megatron engine's ranks share one generation: who samples, and how hidden states, logits and
sampled tokens travel. Three cases: the engine on the actor's own modules (`ActorComm`: the actor's
model-parallel group, pipeline stages passing hidden states), one TP1 x PP1 copy per rank (`SoloComm`:
nothing travels), and a copy at engine TP > 1 (`ReplicaComm` over the replica's own group, made once by
`engine_tp_groups`)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from nemo_lead.models import gather_vocab_logits


class ActorComm:
    """Who samples, and how hidden states and sampled tokens travel (no-ops on a single rank)."""

    def __init__(self):
        from megatron.core import parallel_state as ps

        self.dist = dist
        self.pp = ps.get_pipeline_model_parallel_world_size()
        self.pp_group = ps.get_pipeline_model_parallel_group()
        self.first = ps.is_pipeline_first_stage()
        self.last = ps.is_pipeline_last_stage()
        self.next_rank = ps.get_pipeline_model_parallel_next_rank() if self.pp > 1 else None
        self.prev_rank = ps.get_pipeline_model_parallel_prev_rank() if self.pp > 1 else None
        self.mp_group = ps.get_model_parallel_group()
        self.mp_size = dist.get_world_size(self.mp_group)
        self.is_sampler = self.last and ps.get_tensor_model_parallel_rank() == 0
        # the ranks that run one decode step together (`cuda_graphs`: they agree on each capture)
        self.graph_group = self.mp_group if self.mp_size > 1 else None
        self.sampler_rank = dist.get_rank()
        if self.mp_size > 1:
            flags = [None] * self.mp_size
            dist.all_gather_object(flags, (dist.get_rank(), self.is_sampler), group=self.mp_group)
            self.sampler_rank = next(rank for rank, sampler in flags if sampler)

    def send_next(self, h: torch.Tensor) -> None:
        self.dist.send(h.contiguous(), dst=self.next_rank, group=self.pp_group)

    def recv_prev(self, shape, dtype, device) -> torch.Tensor:
        buf = torch.empty(shape, dtype=dtype, device=device)
        self.dist.recv(buf, src=self.prev_rank, group=self.pp_group)
        return buf

    def share(self, packed: torch.Tensor) -> torch.Tensor:
        if self.mp_size > 1:
            self.dist.broadcast(packed, src=self.sampler_rank, group=self.mp_group)
        return packed

    def full_logits(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return gather_vocab_logits(logits, vocab_size)

    def min_over_group(self, value: int) -> int:
        """The smallest `value` over the model-parallel group (PP stages may hold different layer counts)."""
        if self.mp_size == 1:
            return value
        box = [None] * self.mp_size
        self.dist.all_gather_object(box, value, group=self.mp_group)
        return min(box)


class SoloComm:
    """One engine replica on one rank (the TP1 x PP1 copy, `own_copy`): it samples, nothing travels."""

    pp, first, last, mp_size, is_sampler, graph_group = 1, True, True, 1, True, None

    def share(self, packed: torch.Tensor) -> torch.Tensor:
        return packed

    def full_logits(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return logits[..., :vocab_size]

    def min_over_group(self, value: int) -> int:
        return value


class ReplicaComm(SoloComm):
    """One engine replica on the `size` ranks of `group` (the copy at engine TP > 1, one stage): every rank
    computes the full logits (the vocabulary tables are whole, `model_copy`); the replica's first rank
    samples and broadcasts the tokens, so its ranks take the same decisions bit for bit."""

    def __init__(self, group, size: int, src: int, rank: int):
        self.group, self.mp_size, self.src, self.is_sampler = group, size, src, rank == 0
        self.graph_group = group

    def share(self, packed: torch.Tensor) -> torch.Tensor:
        dist.broadcast(packed, src=self.src, group=self.group)
        return packed


def engine_tp_groups(engine_tp: int):
    """(group, its global ranks, this rank's index in it) of this rank's engine replica: consecutive runs of
    `engine_tp` ranks of each actor replica's model-parallel group (in its rank order). Every rank of the
    world creates every group, in one order (new_group is collective over the world), once per engine."""
    from megatron.core import parallel_state as ps

    mp_ranks = dist.get_process_group_ranks(ps.get_model_parallel_group())
    if len(mp_ranks) % engine_tp:
        raise ValueError(f"engine.tp={engine_tp} must divide the {len(mp_ranks)} ranks holding one actor replica's "
                         f"weights (actor.tp x actor.pp)")
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, tuple(mp_ranks))
    mine = None
    for ranks in sorted(set(every)):
        for start in range(0, len(ranks), engine_tp):
            chunk = list(ranks[start:start + engine_tp])
            group = dist.new_group(chunk)
            if dist.get_rank() in chunk:
                mine = (group, chunk, chunk.index(dist.get_rank()))
    return mine
