"""`nemo_lead.training.actor.offload`: the optimizer state and gradient buffers leave the device and come back.

On each layout (TP1 fp32 and bf16 on one rank, DP2 with the distributed optimizer in bf16 on two), after
a train step (so Adam's state exists):
- `offload` frees exactly the bytes the plan counts as `grads` + `optimizer` for that rank (the plan's
  generation phase leaves them out with `actor.offload_during_generation`), and the storages are empty;
- the parameters are untouched (the engine generates from them meanwhile);
- after `restore`, every optimizer tensor has its values back bit for bit and the gradient buffers are zero;
- the next train step equals the same step of an actor that never offloaded (bit for bit).
The whole-run equality (a short `nemo-lead rl` with and without) is in tests/training/test_rl_tp2.py.
"""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.models import arch_from_hf, read_hf_config, write_tiny_model
from nemo_lead.plan.parameters import static_bytes


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("offload") / "m", "qwen2", seed=4, hidden_size=72,
                                intermediate_size=100))


def _job(hf_dir, layouts):
    from megatron.core import parallel_state as ps

    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.microbatch import SequenceBatch
    from nemo_lead.training.actor.offload import _grad_buffers, _optimizer_tensors, offloaded
    from nemo_lead.training.actor.sft_update import sft_train_step

    g = torch.Generator().manual_seed(0)
    batch = SequenceBatch(tokens=[torch.randint(1, 100, (14,), generator=g) for _ in range(4)], prompt_lens=[3] * 4)
    out = {}
    for name, (precision, distributed) in layouts.items():
        info = init_parallel(1, 1)
        actors = [build_actor(ActorConfig(model=hf_dir, precision=precision, optim={"lr": 1e-2,
                                          "use_distributed_optimizer": distributed}), info) for _ in range(2)]
        for a in actors:
            sft_train_step(a, batch)
        moved = actors[0]
        before = [t.detach().clone() for t in _optimizer_tensors(moved)]
        params = [p.detach().clone() for p in moved.model.parameters()]
        with offloaded(moved) as done:
            freed = done.device_bytes
            empty = all(t.untyped_storage().nbytes() == 0 for t in _optimizer_tensors(moved)
                        if t.untyped_storage().data_ptr() not in {p.untyped_storage().data_ptr() for p in moved.model.parameters()})
            grads_empty = all(b.untyped_storage().nbytes() == 0 for b in _grad_buffers(moved))
            params_kept = all(torch.equal(a, b) for a, b in zip(params, moved.model.parameters()))
        restored = all(torch.equal(a, b) for a, b in zip(before, _optimizer_tensors(moved)))
        zeroed = all(not b.any() for b in _grad_buffers(moved))
        steps = [sft_train_step(a, batch) for a in actors]
        same = all(torch.equal(p, q) for p, q in zip(actors[0].model.parameters(), actors[1].model.parameters()))
        out[name] = {"freed": freed, "empty": empty, "grads_empty": grads_empty, "params_kept": params_kept,
                     "restored": restored, "zeroed": zeroed, "same_step": same and steps[0] == steps[1],
                     "dp": ps.get_data_parallel_world_size(), "dp_rank": ps.get_data_parallel_rank()}
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def _check(hf_dir, results, layouts):
    arch = arch_from_hf(read_hf_config(hf_dir))
    for rank in results:
        for name, r in rank.items():
            precision, distributed = layouts[name]
            planned = static_bytes(arch, tp=1, pp=1, dp=r["dp"], stage=0, precision=precision,
                                   distributed_optimizer=distributed, dp_rank=r["dp_rank"])
            assert r["freed"] == planned.grads + planned.optimizer, name
            assert r["empty"] and r["grads_empty"] and r["params_kept"], name
            assert r["restored"] and r["zeroed"] and r["same_step"], name


def test_offload_frees_what_the_plan_counts_and_restores_it_exactly(hf_dir):
    layouts = {"fp32": ("fp32", False), "bf16": ("bf16", False)}
    _check(hf_dir, run_distributed(_job, 1, hf_dir, layouts), layouts)


def test_offload_with_the_distributed_optimizer_at_dp2(hf_dir):
    layouts = {"dp2-distributed-bf16": ("bf16", True)}
    _check(hf_dir, run_distributed(_job, 2, hf_dir, layouts), layouts)
