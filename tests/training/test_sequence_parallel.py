"""Sequence parallelism (`actor.sequence_parallel=true`) at TP2 equals the same actor without it (CPU, gloo, fp32).

Two actors from the same HF folder at TP2, one with megatron's sequence-parallel regions (the local spec's
RMSNorm on each rank's tokens, the SwiGLU MLP gathering them, the final norm ours), one without. On the same
batch (odd lengths, so micro-batches are padded to an even width), several micro-batches per step, with the
log-probs chunked (the default; the hidden states gathered over the sequence) and unchunked:
- log-probs and entropies of `compute_logprobs` (1e-5);
- two policy steps (LEAD loss with the entropy bonus and KL): loss, gradient norm (1e-5) and the weights
  after them (1e-5), so the norms' gradients summed over TP by finalize_model_grads are tested too;
- an SFT step on packed rows (block-diagonal attention): loss and gradient norm;
- the rollout engine on the SP actor (run with SP switched off) samples the same tokens as on the other.
"""

import dataclasses

import pytest
import torch
from distributed import run_distributed

from nemo_lead.algorithms import LeadConfig
from nemo_lead.models import write_tiny_model
from nemo_lead.training.actor.config import ActorConfig
from nemo_lead.training.actor.microbatch import SequenceBatch

LEAD = LeadConfig.reference_code().replace(entropy_coeff=0.01, kl_coeff=0.05)
OPTIM = {"lr": 1e-3, "weight_decay": 0.1, "clip_grad": 0.5, "adam_eps": 1e-3}


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("sp") / "m", "qwen2", seed=11, init_std=0.1))


def _batches():
    g = torch.Generator().manual_seed(2)
    tokens, plens = [], []
    for _ in range(7):
        p, r = int(torch.randint(2, 6, (1,), generator=g)), int(torch.randint(3, 30, (1,), generator=g))
        tokens.append(torch.randint(1, 100, (p + r,), generator=g))
        plens.append(p)
    resp = [len(t) - p for t, p in zip(tokens, plens)]
    batch = SequenceBatch(tokens=tokens, prompt_lens=plens, advantages=torch.randn(7, generator=g),
                          old_logprobs=[-torch.rand(n, generator=g) * 3 for n in resp],
                          ref_logprobs=[-torch.rand(n, generator=g) * 3 for n in resp])
    lengths = [[9, 6], [11], [5, 4, 3]]
    sft = SequenceBatch(tokens=[torch.randint(1, 100, (sum(s),), generator=g) for s in lengths],
                        prompt_lens=[1, 1, 1], segments=lengths)
    return batch, sft


def _job(hf_dir):
    from nemo_lead.generation import MegatronEngine, SamplingParams
    from nemo_lead.models import export_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor, compute_logprobs
    from nemo_lead.training.actor.rl_update import policy_train_step
    from nemo_lead.training.actor.sft_update import sft_train_step

    batch, sft = _batches()
    out = {}
    for sp, chunk in ((False, 2048), (True, 2048), (False, 0), (True, 0)):  # chunked log-probs (default) and not
        info = init_parallel(2, 1)
        actor = build_actor(ActorConfig(model=hf_dir, tp=2, micro_batch_tokens=40, sequence_parallel=sp, optim=OPTIM,
                                        logprob_chunk_tokens=chunk), info)
        rollouts = MegatronEngine(actor, max_batch_size=6).generate(
            [list(range(3, 9)), list(range(20, 25))], SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=5))
        logp, ent = compute_logprobs(actor, batch, 0.7, entropy=True)
        steps = [policy_train_step(actor, batch, LEAD, temperature=0.7) for _ in range(2)]
        weights = dict(export_hf_weights(actor.model))
        sft_metrics = sft_train_step(actor, sft)
        out[sp, chunk] = {"tokens": [r.token_ids for r in rollouts], "logp": logp, "entropy": ent, "steps": steps,
                   "weights": weights, "sft": sft_metrics, "sp_flag": actor.gpt.config.sequence_parallel}
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_sequence_parallel_at_tp2_equals_no_sequence_parallel(hf_dir):
    for rank in run_distributed(_job, 2, hf_dir):
        for chunk in (2048, 0):
            _compare(rank[False, chunk], rank[True, chunk])


def _compare(plain, sp):
    """The SP run against the run without: equal to 1e-5 (tokens exactly)."""
    assert sp["sp_flag"] is True and plain["sp_flag"] is False
    assert sp["tokens"] == plain["tokens"]
    for key in ("logp", "entropy"):
        for a, b in zip(sp[key], plain[key]):
            assert (a - b).abs().max() < 1e-5, key
    for a, b in zip(sp["steps"], plain["steps"]):
        for key in ("loss", "grad_norm", "entropy", "clip_frac"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), key
        assert a["microbatches"] == b["microbatches"] > 1
    worst = max((sp["weights"][k] - plain["weights"][k]).abs().max().item() for k in plain["weights"])
    assert worst < 1e-5
    for key in ("loss", "grad_norm"):
        assert sp["sft"][key] == pytest.approx(plain["sft"][key], abs=1e-5), key


def test_sequence_parallel_needs_tp_above_one():
    with pytest.raises(ValueError, match="actor.sequence_parallel=true needs actor.tp > 1"):
        ActorConfig(sequence_parallel=True)
    assert ActorConfig(tp=2, sequence_parallel=True).megatron_overrides()["sequence_parallel"] is True
    assert "sequence_parallel" not in ActorConfig(tp=2).megatron_overrides()
    dataclasses.replace(ActorConfig(tp=2, sequence_parallel=True), tp=4)  # still valid at another TP
