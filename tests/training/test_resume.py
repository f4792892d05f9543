"""Resuming training from a checkpoint (2 ranks, gloo, fp32).

1. Bit-identical resume: 3 RL steps straight (DP2, distributed optimizer, attention dropout, cosine LR
   schedule with warm-up, data drawn from the global python / numpy / torch RNGs) vs 1 step, save, fresh
   processes seeded differently, load, 2 steps: the same losses and bit-identical weights.
2. Resharding the optimizer: a checkpoint saved at TP1 x DP2 after one step continues at TP2 and at PP2
   with the same next-step loss, gradient norm and updated weights as the run that saved it (Adam moments
   and the schedule came along; dropout off, the data seeded by step). The distributed optimizer's state
   (which reshards over DP only) refuses TP2 with a message that says so.
"""

import dataclasses
import random

import numpy as np
import pytest
import torch
from distributed import run_distributed

from nemo_lead.checkpoint.meta import latest_checkpoint, read_checkpoint_meta
from nemo_lead.models import write_tiny_model

STEPS, SAVE_AT = 3, 1
OPTIM = {"lr": 1e-3, "lr_warmup_steps": 2, "lr_decay_style": "cosine", "lr_decay_steps": 5, "min_lr": 1e-4}


def _batch(step=None):
    """4-6 sequences; from the global RNG streams when `step` is None (so a resume must restore them),
    else seeded by `step` (the same data in any layout)."""
    if step is None:
        n, adv, g = random.randint(4, 6), None, None
        adv = np.random.randn(n)
    else:
        n = random.Random(step).randint(4, 6)
        adv, g = np.random.RandomState(step).randn(n), torch.Generator().manual_seed(step)
    lengths = [int(torch.randint(6, 30, (1,), generator=g)) for _ in range(n)]
    from nemo_lead.training.actor.microbatch import SequenceBatch

    return SequenceBatch(tokens=[torch.randint(1, 102, (L,), generator=g) for L in lengths], prompt_lens=[3] * n,
                         advantages=torch.tensor(adv, dtype=torch.float32))


def _rl_step(actor, batch):
    from nemo_lead.algorithms import LeadConfig
    from nemo_lead.training.actor.megatron_actor import compute_logprobs
    from nemo_lead.training.actor.rl_update import policy_train_step

    old = compute_logprobs(actor, batch)
    m = policy_train_step(actor, dataclasses.replace(batch, old_logprobs=old), LeadConfig())
    return m["loss"], m["grad_norm"], m["lr"]


def _actor(model, tp=1, pp=1, seed=3, distributed=True):
    from nemo_lead.parallel import init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor

    info = init_parallel(tp, pp, seed=seed)
    optim = {**OPTIM, "use_distributed_optimizer": distributed}
    return build_actor(ActorConfig(model=model, tp=tp, pp=pp, micro_batch_tokens=64, optim=optim), info)


def _weights(actor):
    import torch.distributed as dist

    from nemo_lead.models import export_hf_weights

    weights = dict(export_hf_weights(actor.model))
    return weights if dist.get_rank() == 0 else None


def _straight_job(hf_dropout, hf_plain, run_dir):
    from nemo_lead.checkpoint.meta import checkpoint_dir
    from nemo_lead.parallel import destroy_parallel
    from nemo_lead.training.run.train_state import save_actor_state

    random.seed(0)
    np.random.seed(0)
    actor = _actor(hf_dropout)
    steps = []
    for step in range(STEPS):
        if step == SAVE_AT:
            save_actor_state(actor, checkpoint_dir(run_dir, step), step=step,
                             loop_state={"next_step": step, "consumed_samples": 5 * step})
        steps.append(_rl_step(actor, _batch()))
    out = {"steps": steps, "weights": _weights(actor)}
    destroy_parallel(keep_process_group=True)
    actor = _actor(hf_plain, distributed=False)
    _rl_step(actor, _batch(0))
    save_actor_state(actor, f"{run_dir}/plain", step=1)
    out["plain_next"] = _rl_step(actor, _batch(1))
    out["plain_weights"] = _weights(actor)
    destroy_parallel()
    return out


def _resumed_job(run_dir):
    from nemo_lead.parallel import destroy_parallel
    from nemo_lead.training.run.train_state import load_actor_state

    random.seed(123)  # anything: the checkpoint's RNG states must win
    np.random.seed(123)
    ckpt = str(latest_checkpoint(run_dir))
    actor = _actor(ckpt, seed=99)  # the model straight from the checkpoint folder
    meta = load_actor_state(actor, ckpt)
    out = {"meta": (meta["loop"], meta["step"], meta["rng_restored"])}
    out["steps"] = [_rl_step(actor, _batch()) for _ in range(meta["loop"]["next_step"], STEPS)]
    out["weights"] = _weights(actor)
    destroy_parallel(keep_process_group=True)
    for tp, pp in ((2, 1), (1, 2)):
        actor = _actor(f"{run_dir}/plain", tp, pp, distributed=False)
        meta = load_actor_state(actor, f"{run_dir}/plain")
        out[(tp, pp)] = (_rl_step(actor, _batch(1)), meta["rng_restored"], _weights(actor))
        destroy_parallel(keep_process_group=True)
    actor = _actor(ckpt, 2, 1)
    try:
        load_actor_state(actor, ckpt)
    except ValueError as e:
        out["error"] = str(e)
    destroy_parallel()
    return out


def test_resume_is_bit_identical_and_the_optimizer_reshards(tmp_path):
    hf_dropout = write_tiny_model(tmp_path / "hf_dropout", "qwen2", seed=4, init_std=0.1, attention_dropout=0.1)
    hf_plain = write_tiny_model(tmp_path / "hf_plain", "qwen2", seed=4, init_std=0.1)
    run_dir = tmp_path / "run"
    straight = run_distributed(_straight_job, 2, str(hf_dropout), str(hf_plain), str(run_dir))[0]
    ckpt = latest_checkpoint(run_dir)
    meta = read_checkpoint_meta(ckpt)
    assert ckpt.name == f"step_{SAVE_AT:06d}" and meta["parts"] == ["model", "optim", "rng"]
    assert sorted(p.name for p in (ckpt / "rng").iterdir()) == ["rank_00000.pt", "rank_00001.pt"]
    assert meta["scheduler"]["num_steps"] == SAVE_AT and meta["saved_layout"] == {"tp": 1, "pp": 1, "dp": 2}
    resumed = run_distributed(_resumed_job, 2, str(run_dir))[0]
    assert resumed["meta"] == ({"next_step": SAVE_AT, "consumed_samples": 5 * SAVE_AT}, SAVE_AT, True)
    assert resumed["steps"] == straight["steps"][SAVE_AT:]  # losses, grad norms and learning rates, exactly
    lrs = [lr for _, _, lr in straight["steps"]]
    # warm-up over 2 steps, then cosine to 1e-4 at step 5: 1e-4 + 9e-4 * (1 + cos(pi / 3)) / 2 at the third
    assert lrs == pytest.approx([5e-4, 1e-3, 7.75e-4])
    assert straight["weights"].keys() == resumed["weights"].keys()
    assert all(torch.equal(straight["weights"][k], resumed["weights"][k]) for k in straight["weights"])
    loss, norm, lr = straight["plain_next"]
    for tp, pp in ((2, 1), (1, 2)):
        (got_loss, got_norm, got_lr), rng_restored, weights = resumed[(tp, pp)]
        assert not rng_restored  # another layout: RNG streams are left as seeded
        assert got_loss == pytest.approx(loss, abs=1e-6) and got_norm == pytest.approx(norm, abs=1e-5)
        assert got_lr == lr
        worst = max((weights[k] - straight["plain_weights"][k]).abs().max().item() for k in weights)
        assert worst < 1e-6, (tp, pp, worst)
    assert "reshards over data-parallel ranks only" in resumed["error"] and "tp=2 pp=1" in resumed["error"]
