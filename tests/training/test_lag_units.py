"""The parts of `rollout.lag` / `rollout.generator_ranks` that need no training run (nemo_lead.training.rl.lag,
nemo_lead.training.rl.split, nemo_lead.parallel.bridge):

- the settings refuse a negative lag, a lag without a rollout correction, and a generator count that is not
  a multiple of one model replica, naming the keys;
- the serial queue samples B_j with the weights W_max(0, j-1-k) (from a start at t0: W_max(t0, j-1-k)), at
  most k steps old, and the split layout's generators reach the same version for every batch from the
  weights the trainers send; a stopped run drains exactly the batches the generators can still make;
- a batch survives the checkpoint's round trip (torch.load with weights_only) as the same data, its
  selected groups the same objects as those seen;
- the bridge: each side of a 1 + 1 job has its own default world (megatron sees DP 1 on both), and weights
  and objects cross bit for bit, in buckets of one dtype and bounded size.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from distributed import run_distributed

from nemo_lead.training.rl.lag import BatchQueue, batch_from_data, batch_to_data
from nemo_lead.training.rl.phases import Batch
from nemo_lead.training.rl.split import generator_version, last_batch_made, weights_needed


def _cfg(**rollout):
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.rl.config import RLConfig, RLDataConfig, RolloutConfig

    lead = rollout.pop("lead", None)
    kwargs = {"lead": lead} if lead is not None else {}
    return RLConfig(actor=ActorConfig(model="tiny-qwen2", tp=rollout.pop("tp", 1)), data=RLDataConfig(path="p.jsonl"),
                    out="run", steps=4, rollout=RolloutConfig(**rollout), **kwargs)


def test_settings_refuse_what_cannot_work():
    from nemo_lead.algorithms import LeadConfig

    tis = LeadConfig.paper()
    tis.rollout_correction.mode = "tis"
    with pytest.raises(ValueError, match="rollout.lag must be >= 0"):
        _cfg(lag=-1)
    with pytest.raises(ValueError, match=r"rollout.lag=1 .* set lead.rollout_correction.mode"):
        _cfg(lag=1)
    with pytest.raises(ValueError, match=r"rollout.generator_ranks=1: .* multiple of actor.tp x actor.pp = 2"):
        _cfg(generator_ranks=1, tp=2)
    with pytest.raises(ValueError, match=r"rollout.generator_ranks=3: .* multiple of actor.tp x actor.pp = 2"):
        _cfg(generator_ranks=3, tp=2)
    assert _cfg(generator_ranks=4, tp=2).rollout.generator_ranks == 4  # two generator replicas
    cfg = _cfg(lag=2, generator_ranks=2, tp=2, lead=tis)
    assert (cfg.rollout.lag, cfg.rollout.generator_ranks) == (2, 2)


# ----------------------------------------------------------------------------- which weights sample what
def _serial_versions(start: int, steps: int, k: int) -> dict[int, int]:
    """Run the serial queue from a start at step `start` (queue empty) and record each batch's version."""
    s = SimpleNamespace(cfg=SimpleNamespace(steps=steps), run=SimpleNamespace(step=start))
    made: dict[int, int] = {}

    def produce(state, j):
        made[j] = state.run.step
        return Batch(j, state.run.step, [], [], 1)

    queue = BatchQueue(k, start + 1, produce=produce)
    for t in range(start + 1, steps + 1):
        assert queue.take(s, t).step == t
        s.run.step = t
        held = queue.loop_state(s)["lag"]["queued"]  # what a checkpoint after step t holds
        assert [j for j, _ in held] == list(range(t + 1, min(t + k, steps) + 1))
    return made


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_batch_j_is_sampled_with_the_weights_of_step_j_minus_1_minus_k(k):
    steps = 9
    made = _serial_versions(0, steps, k)
    assert made == {j: max(0, j - 1 - k) for j in range(1, steps + 1)}
    assert all(0 <= j - 1 - v <= k for j, v in made.items())
    for start in range(steps):  # a resumed run with an empty queue (an extended run): the same rule from its start
        assert _serial_versions(start, steps, k) == {j: generator_version(j, start, k) for j in range(start + 1, steps + 1)}


@pytest.mark.parametrize("k", [0, 1, 2])
def test_the_generators_get_every_version_they_need_and_a_stop_drains_exactly(k):
    rng = random.Random(k)
    for _ in range(200):
        steps = rng.randint(1, 12)
        start = rng.randint(0, steps)
        sent = [start] + [v for v in range(start + 1, steps + 1) if weights_needed(v, start, steps, k)]
        needed = sorted({generator_version(j, start, k) for j in range(start + 1, steps + 1)} | {start})
        assert sent == needed  # every version a batch needs is sent once, and no other
        stop_after = rng.randint(start, steps)  # the trainers stop after this step
        last_sent = max(v for v in sent if v <= stop_after)
        made = max((j for j in range(start + 1, steps + 1) if generator_version(j, start, k) <= last_sent), default=start)
        assert last_batch_made(stop_after, start, steps, k) == made  # what SplitQueue.close drains up to


# ----------------------------------------------------------------------------- a batch as data
def _batch() -> Batch:
    from nemo_lead.data import Problem
    from nemo_lead.generation import Rollout
    from nemo_lead.training.rl.rollouts import Group

    groups = []
    for i in range(3):
        rollouts = [Rollout(0, j, [5, 6, 7 + j], [-0.1 * j, -1e-9, -2.5], [-0.1 * j, -3e-8, -2.5],
                            "stop" if j else "length") for j in range(2)]
        groups.append(Group(problem=Problem(f"p{i}", f"{i}+1", str(i + 1), {"source": "x"}), prompt_ids=[1, 2, i],
                            rollouts=rollouts, texts=["a", "b"], outcomes=[0, 1], extracted=[None, "2"],
                            rewards=torch.tensor([1.0, -1.0 / 3]), keep=torch.tensor([True, i != 1])))
    return Batch(7, 5, groups, [groups[0], groups[2]], 2, {"time/generate": 0.5}, {"epoch": 1, "position": 3})


def test_a_batch_round_trips_through_the_checkpoint_format(tmp_path):
    b = _batch()
    torch.save([batch_to_data(b)], tmp_path / "b.pt")
    back = batch_from_data(torch.load(tmp_path / "b.pt", weights_only=True)[0])
    assert (back.step, back.version, back.rounds, back.times, back.order) == (7, 5, 2, b.times, b.order)
    assert [g.problem for g in back.seen] == [g.problem for g in b.seen]
    for g, h in zip(back.seen, b.seen):
        assert (g.prompt_ids, g.rollouts, g.texts, g.outcomes, g.extracted) == (h.prompt_ids, h.rollouts, h.texts,
                                                                                 h.outcomes, h.extracted)
        assert torch.equal(g.rewards, h.rewards) and torch.equal(g.keep, h.keep)
    assert back.selected[0] is back.seen[0] and back.selected[1] is back.seen[2]


# ----------------------------------------------------------------------------- the bridge
def test_bucket_plan_groups_by_dtype_and_size():
    from nemo_lead.parallel.bridge import bucket_plan

    ts = [torch.zeros(10), torch.zeros(10), torch.zeros(30), torch.zeros(2, dtype=torch.bfloat16), torch.zeros(5)]
    assert bucket_plan(ts, 80) == [[0, 1], [2], [3], [4]]  # 40 + 40 bytes fit; 120 gets its own; dtypes apart
    assert bucket_plan(ts, 1e9) == [[0, 1, 2], [3], [4]]


def _bridge_job():
    from megatron.core import parallel_state as ps

    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.parallel.bridge import (
        bucket_plan,
        join_sides,
        recv_object,
        recv_tensors,
        send_object,
        send_tensors,
    )

    sides = join_sides(generator_ranks=1)
    import torch.distributed as dist

    info = init_parallel(1, 1, seed=0)
    seen = {"role": sides.role, "world": dist.get_world_size(), "dp": ps.get_data_parallel_world_size(),
            "rank": info.rank}
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(17, 3, generator=g), torch.randn(5, generator=g).to(torch.bfloat16), torch.randn(40, generator=g)]
    plan = bucket_plan(tensors, 100)
    if sides.is_generator:
        got = [torch.zeros_like(t) for t in tensors]
        obj = recv_object(sides.bridge_batches, 0, 7)
        recv_tensors(sides.bridge_weights, got, plan, 0, 9)
        seen["equal"] = all(torch.equal(a, b) for a, b in zip(got, tensors)) and obj == {"x": [1, 2.5, None]}
    else:
        pending = [send_object(sides.bridge_batches, {"x": [1, 2.5, None]}, 1, 7),
                   send_tensors(sides.bridge_weights, tensors, plan, 1, 9)]
        for t in tensors:
            t.add_(1.0)  # the buffers were copied: changing the tensors now changes nothing sent
        for p in pending:
            p.wait()
    destroy_parallel()
    sides.close()
    return seen, len(plan)


def test_each_side_has_its_own_world_and_the_bridge_carries_weights_bit_for_bit():
    (trainer, plan), (generator, _) = run_distributed(_bridge_job, 2)
    assert plan == 3
    assert trainer == {"role": "trainer", "world": 1, "dp": 1, "rank": 0}
    assert generator == {"role": "generator", "world": 1, "dp": 1, "rank": 0, "equal": True}


def test_validation_every_zero_is_refused():
    """Once dead code after a return: `validation.every=0` passed and divided by zero after step 1."""
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.rl.config import RLConfig, RLDataConfig, ValidationConfig

    with pytest.raises(ValueError, match="validation.every and validation.n must be >= 1, got 0 and 4"):
        RLConfig(actor=ActorConfig(model="tiny-qwen2"), data=RLDataConfig(path="p.jsonl"), out="run", steps=4,
                 validation=ValidationConfig(every=0, n=4))
