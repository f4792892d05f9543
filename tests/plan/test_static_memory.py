"""The plan's static memory (parameters, DDP gradient buffer, optimizer state) against a real built actor.

Each rank builds the actor, takes one SFT step (so that Adam's state exists) and sums the bytes of the
distinct storages of its parameters, of DDP's gradient buffers and of the optimizer's state and master
copies; `nemo_lead.plan.parameters.static_bytes` must give exactly those numbers for that rank. The model
has shapes that are not multiples of 64 (hidden 72, ffn 100, vocabulary 102 padded to 128) so that the
distributed optimizer's padding shows, and tied embeddings, so that PP2 holds the output weight twice.
Layouts: TP1 fp32 and bf16 (1 rank); TP2, PP2, DP2 with the plain and the distributed optimizer, DP2
distributed in bf16 (2 ranks).
"""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.models import arch_from_hf, read_hf_config, write_tiny_model
from nemo_lead.plan.parameters import parameter_count, stage_parameters, static_bytes

SHAPE = dict(hidden_size=72, intermediate_size=100, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("static") / "m", "qwen2", seed=3, **SHAPE))


def _storages(tensors) -> dict[int, int]:
    out = {}
    for t in tensors:
        st = t.untyped_storage()
        out[st.data_ptr()] = st.nbytes()
    return out


def measured_bytes(actor) -> dict[str, int]:
    """Distinct storages of the parameters, DDP's gradient buffers and the optimizer (state + master copies)."""
    params = _storages(actor.gpt.parameters())
    grads = _storages(b.grad_data for b in actor.model.buffers)
    opt: dict[int, int] = {}
    for chained in getattr(actor.optimizer, "chained_optimizers", [actor.optimizer]):
        inner = chained.optimizer
        masters = [p for g in inner.param_groups for p in g["params"]]
        states = [v for s in inner.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        for ptr, n in _storages(masters + states).items():
            if ptr not in params:
                opt[ptr] = n
    return {"weights": sum(params.values()), "grads": sum(grads.values()), "optimizer": sum(opt.values())}


def _job(hf_dir, layouts):
    import torch.distributed as dist

    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.microbatch import SequenceBatch
    from nemo_lead.training.actor.sft_update import sft_train_step

    out = {}
    for name, (tp, pp, precision, distributed) in layouts.items():
        info = init_parallel(tp, pp)
        actor = build_actor(ActorConfig(model=hf_dir, tp=tp, pp=pp, precision=precision,
                                        optim={"use_distributed_optimizer": distributed}), info)
        g = torch.Generator().manual_seed(0)
        sft_train_step(actor, SequenceBatch(tokens=[torch.randint(1, 100, (12,), generator=g) for _ in range(4)],
                                            prompt_lens=[2] * 4))
        from megatron.core import parallel_state as ps

        out[name] = {"measured": measured_bytes(actor), "stage": ps.get_pipeline_model_parallel_rank(),
                     "dp_rank": ps.get_data_parallel_rank(), "dp": ps.get_data_parallel_world_size(),
                     "rank": dist.get_rank(), "names": [(n, p.numel()) for n, p in actor.gpt.named_parameters()]}
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def _check(hf_dir, results, layouts):
    arch = arch_from_hf(read_hf_config(hf_dir))
    for rank_results in results:
        for name, r in rank_results.items():
            tp, pp, precision, distributed = layouts[name]
            planned = static_bytes(arch, tp=tp, pp=pp, dp=r["dp"], stage=r["stage"], precision=precision,
                                   distributed_optimizer=distributed, dp_rank=r["dp_rank"])
            assert {"weights": planned.weights, "grads": planned.grads, "optimizer": planned.optimizer} \
                == r["measured"], (name, r["rank"])
            params = stage_parameters(arch, tp, pp, r["stage"])
            assert [(p.name, p.numel) for p in params] == r["names"], name


def test_static_bytes_equal_a_built_actor_on_one_rank(hf_dir):
    layouts = {"tp1-fp32": (1, 1, "fp32", False), "tp1-bf16": (1, 1, "bf16", False)}
    _check(hf_dir, run_distributed(_job, 1, hf_dir, layouts), layouts)


def test_static_bytes_equal_a_built_actor_at_tp2_pp2_dp2(hf_dir):
    layouts = {"tp2": (2, 1, "fp32", False), "pp2": (1, 2, "fp32", False), "dp2": (1, 1, "fp32", False),
               "dp2-distributed": (1, 1, "fp32", True), "dp2-distributed-bf16": (1, 1, "bf16", True),
               "pp2-bf16": (1, 2, "bf16", False)}
    _check(hf_dir, run_distributed(_job, 2, hf_dir, layouts), layouts)


def test_parameter_count_of_the_14b_preset():
    """R1-Distill-Qwen-14B: 14.77B parameters (the HF model card's 14.8B), its vocabulary already a multiple of 128."""
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-14b"))
    h, f, layers, vocab = 5120, 13824, 48, 152064
    qkv = (40 + 16) * 128
    per_layer = 2 * h + h * 40 * 128 + qkv * h + qkv + 2 * f * h + h * f
    assert parameter_count(arch) == 2 * vocab * h + layers * per_layer + h == 14_770_033_664
