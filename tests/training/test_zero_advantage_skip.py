"""The update's zero-advantage skip (`policy_train_step(skip_zero_advantage=True)`, RL's `skip_zero_advantage`):
responses whose advantage is exactly 0 get no forward or backward pass, and the step is the one without the
skip (CPU, gloo, fp32, a tiny Qwen2 with tied embeddings).

- One sequence per micro-batch (the forwarded sequences' passes are the same with and without the skip): the
  gradients, the loss, the gradient norm and the weights after one clipped Adam step are equal bit for bit,
  for every loss aggregation (the normaliser counts the skipped responses: token-mean over the whole batch's
  tokens, the paper's per-sequence mean over all S responses, Dr. GRPO's S x L_max with L_max the whole
  batch's), on the on-policy path and with given old log-probs. A step over the non-zero sequences alone
  (the normaliser counted over what is left) differs: the comparison can tell.
- One micro-batch (its width changes when sequences leave it): equal to float rounding (1e-6).
- DP2 with the global batch split here: what is left is balanced over the ranks, the same step.
- A batch whose advantages are all 0: nothing forwarded but an empty stand-in, the step (Adam's weight decay)
  the same; refused where it is not exact (entropy or KL term, dropout), and RLConfig refuses `on` there.
"""

import dataclasses

import pytest
import torch
from distributed import run_distributed

from nemo_lead.algorithms import LeadConfig
from nemo_lead.models import write_tiny_model
from nemo_lead.training.actor.config import ActorConfig
from nemo_lead.training.actor.microbatch import SequenceBatch

T = 0.8
OPTIM = {"lr": 1e-3, "weight_decay": 0.1, "clip_grad": 0.5, "adam_eps": 1e-3}
AGGREGATIONS = {  # loss_agg -> the preset it is tried with
    "seq_mean_token_mean": LeadConfig.paper(),
    "token_mean": LeadConfig.dapo(),
    "constant_norm": LeadConfig.dr_grpo(),
    "seq_mean_token_sum": LeadConfig.grpo().replace(loss_agg="seq_mean_token_sum", dual_clip_c=3.0),
}
ONE_PER_MICROBATCH = 1  # tokens: every sequence alone
ONE_MICROBATCH = 10**6


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("skip") / "qwen2", "qwen2", seed=3, init_std=0.1,
                                tie_word_embeddings=True))


def _batch(seed=0, groups=6, n=2):
    """`groups` groups of `n` responses; groups 0, 2, 4 have equal rewards (advantage exactly 0, as
    compute_advantages gives them), the others a spread. The longest response is in a zero group (so L_max
    of constant_norm comes from a skipped one); old log-probs perturbed, a few tokens masked out."""
    g = torch.Generator().manual_seed(seed)
    tokens, plens, adv = [], [], []
    for q in range(groups):
        for i in range(n):
            p = int(torch.randint(2, 6, (1,), generator=g))
            r = 40 if (q, i) == (0, 1) else int(torch.randint(3, 25, (1,), generator=g))
            tokens.append(torch.randint(1, 100, (p + r,), generator=g))
            plens.append(p)
            adv.append(0.0 if q % 2 == 0 else float(torch.randn((), generator=g)))
    resp = [len(t) - p for t, p in zip(tokens, plens)]
    old = [-2.0 + 0.3 * torch.randn(r, generator=g) for r in resp]
    mask = [(torch.rand(r, generator=g) > 0.15).float() for r in resp]
    return SequenceBatch(tokens=tokens, prompt_lens=plens, advantages=torch.tensor(adv), old_logprobs=old,
                         loss_mask=mask)


def _step(hf_dir, batch, lead, budget, *, skip, on_policy=False, split_over_dp=True):
    """A fresh actor (the same weights every time), one policy step: metrics, gradients, weights."""
    from nemo_lead.models import export_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.rl_update import policy_train_step

    info = init_parallel(1, 1)
    try:
        actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=budget, optim=OPTIM), info)
        if on_policy:
            batch = dataclasses.replace(batch, old_logprobs=None)
        metrics = policy_train_step(actor, batch, lead, temperature=T, on_policy=on_policy,
                                    split_over_dp=split_over_dp, skip_zero_advantage=skip)
        grads = {n: p.main_grad.detach().clone() for n, p in actor.gpt.named_parameters()}
        return {"metrics": metrics, "grads": grads, "weights": dict(export_hf_weights(actor.model))}
    finally:
        destroy_parallel(keep_process_group=True)


def _one_rank_job(hf_dir, batch):
    from nemo_lead.parallel import destroy_parallel

    out = {}
    for name, lead in AGGREGATIONS.items():
        for on_policy in (False, True):
            for budget in (ONE_PER_MICROBATCH, ONE_MICROBATCH):
                out[name, on_policy, budget] = [_step(hf_dir, batch, lead, budget, skip=skip, on_policy=on_policy)
                                                for skip in (False, True)]
    nonzero = torch.nonzero(batch.advantages).flatten().tolist()
    out["what_is_left"] = _step(hf_dir, batch.select(nonzero), LeadConfig.dapo(), ONE_PER_MICROBATCH, skip=False)
    zero = dataclasses.replace(batch, advantages=torch.zeros(len(batch)))
    out["all_zero"] = [_step(hf_dir, zero, LeadConfig.paper(), ONE_PER_MICROBATCH, skip=s) for s in (False, True)]
    refused = {}
    with_ref = dataclasses.replace(batch, ref_logprobs=batch.old_logprobs)
    for key, lead in (("entropy", LeadConfig.paper().replace(entropy_coeff=0.01)),
                      ("kl", LeadConfig.paper().replace(kl_coeff=0.1))):
        try:
            _step(hf_dir, with_ref, lead, ONE_MICROBATCH, skip=True)
        except ValueError as e:
            refused[key] = str(e)
    out["refused"] = refused
    destroy_parallel()
    return out


def _two_rank_job(hf_dir, batch):
    import torch.distributed as dist

    from nemo_lead.parallel import destroy_parallel

    out = [_step(hf_dir, batch, LeadConfig.paper(), 64, skip=s, on_policy=True) for s in (False, True)]
    rank = dist.get_rank()
    destroy_parallel()
    return out if rank == 0 else None


@pytest.fixture(scope="module")
def one_rank(hf_dir):
    return run_distributed(_one_rank_job, 1, hf_dir, _batch())[0]


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _close(a: dict, b: dict, tol: float) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=tol, atol=tol) for k in a)


@pytest.mark.parametrize("name", list(AGGREGATIONS))
@pytest.mark.parametrize("on_policy", [False, True], ids=["given_old", "on_policy"])
def test_one_sequence_per_microbatch_gives_the_same_step_bit_for_bit(one_rank, name, on_policy):
    full, skipped = one_rank[name, on_policy, ONE_PER_MICROBATCH]
    assert any(bool(g.abs().sum() > 0) for g in full["grads"].values())  # a real gradient
    assert _equal(full["grads"], skipped["grads"])
    assert _equal(full["weights"], skipped["weights"])
    for key in ("loss", "grad_norm"):
        assert full["metrics"][key] == skipped["metrics"][key], key
    # six of the twelve responses were not forwarded: six micro-batches instead of twelve
    assert (full["metrics"]["microbatches"], skipped["metrics"]["microbatches"]) == (12, 6)
    assert (full["metrics"]["skipped_sequences"], skipped["metrics"]["skipped_sequences"]) == (0, 6)


@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_one_microbatch_gives_the_same_step_to_rounding(one_rank, name):
    for on_policy in (False, True):
        full, skipped = one_rank[name, on_policy, ONE_MICROBATCH]
        assert _close(full["grads"], skipped["grads"], 1e-6)
        assert _close(full["weights"], skipped["weights"], 1e-6)
        assert skipped["metrics"]["loss"] == pytest.approx(full["metrics"]["loss"], rel=1e-6, abs=1e-9)
        assert skipped["metrics"]["grad_norm"] == pytest.approx(full["metrics"]["grad_norm"], rel=1e-6)


def test_the_normaliser_over_what_is_left_would_differ(one_rank):
    """Training on the non-zero responses alone divides by their tokens only: another step, which the
    comparisons above would catch."""
    full = one_rank["token_mean", False, ONE_PER_MICROBATCH][0]
    alone = one_rank["what_is_left"]
    assert alone["metrics"]["loss"] != pytest.approx(full["metrics"]["loss"], rel=1e-3)
    assert not _close(full["grads"], alone["grads"], 1e-4)


def test_a_batch_without_signal_forwards_nothing_and_steps_the_same(one_rank):
    full, skipped = one_rank["all_zero"]
    assert all(bool((g == 0).all()) for g in full["grads"].values())
    assert _equal(full["weights"], skipped["weights"])  # weight decay still applies, in both
    assert skipped["metrics"]["skipped_sequences"] == 12 and skipped["metrics"]["microbatches"] == 1  # the stand-in


def test_refused_where_a_zero_advantage_response_has_a_gradient(one_rank):
    assert "lead.entropy_coeff=0.01" in one_rank["refused"]["entropy"]
    assert "lead.kl_coeff=0.1" in one_rank["refused"]["kl"]


def test_dp2_balances_what_is_left_and_gives_the_same_step(hf_dir):
    full, skipped = run_distributed(_two_rank_job, 2, hf_dir, _batch(seed=1))[0]
    assert _close(full["weights"], skipped["weights"], 1e-6)
    assert skipped["metrics"]["grad_norm"] == pytest.approx(full["metrics"]["grad_norm"], rel=1e-6)
    assert skipped["metrics"]["skipped_sequences"] == 6 and skipped["metrics"]["sequences"] == 6


def test_rl_config_refuses_on_where_it_is_not_exact(tmp_path):
    from nemo_lead.training.rl.config import RLConfig, RLDataConfig

    base = {"actor": ActorConfig(model="tiny-qwen2"), "data": RLDataConfig(path="p.jsonl"), "out": str(tmp_path / "run")}
    assert RLConfig(**base).skip_zero_advantage is None  # auto: on where exact
    with pytest.raises(ValueError, match="skip_zero_advantage=true.*lead.entropy_coeff"):
        RLConfig(**base, skip_zero_advantage=True, lead=LeadConfig.reference_code())
    with pytest.raises(ValueError, match="skip_zero_advantage must be null"):
        RLConfig(**base, skip_zero_advantage="yes")
    RLConfig(**base, skip_zero_advantage=False, lead=LeadConfig.reference_code())  # off: anything goes
