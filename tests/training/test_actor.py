"""The actor against transformers, and its layouts against each other (CPU, gloo, fp32).

The reference is computed in this process with transformers' Qwen2ForCausalLM (tied embeddings, q/k/v
biases) from the same HF folder: per-token log-probs and entropies of softmax(logits / T), the LEAD policy
loss over the whole batch, its gradient norm, and the weights after one clipped AdamW step (torch's, with
megatron's rule of no weight decay on biases and norms). Every layout must reproduce it:
TP1 on 1 rank; TP2, PP2, DP2 (plain and distributed optimizer, global and per-rank batches) on 2 ranks;
TP2 x PP2 on 4 ranks. Layouts other than TP1 use a small token budget, so they also run many micro-batches
of different shapes (variable sequence lengths between PP stages).

What is tested where (CPU, gloo; this file unless named):
- fp32, against transformers' Qwen2 (tied embeddings, q/k/v biases) with torch's AdamW and the same loss:
  loss, gradient norm (1e-5) and the weights after one clipped AdamW step (2e-6), and per-token log-probs
  and entropies (1e-5), at TP1; TP2, PP2, DP2 (plain and distributed optimizer; global batch split here,
  and each DP rank passing its own sequences); TP2 x PP2 (4 ranks). All but TP1 run many micro-batches.
- token budgets (one micro-batch vs several vs one per sequence) for token-mean, the paper's
  seq-mean-token-mean and Dr. GRPO's constant normaliser: the same loss and gradient norm (1e-6);
- activation recomputation (full / uniform and selective) equal to none (1e-6); SFT loss = transformers'
  masked NLL, and a few steps reduce it; one sequence on two DP ranks (the other runs an empty stand-in);
- bf16 parameters (the GPU default; fp32 master weights): a CPU smoke test within 2% of fp32;
- rollout correction (token TIS on the on-policy path, sequence masking with given old log-probs) against
  transformers with the same weighted loss, and its metrics over several micro-batches;
- resume and resharding: tests/training/test_resume.py (see `nemo_lead.training.run.train_state`);
- chunked log-probs (the default here) against the unchunked path: tests/training/test_chunked_logprobs.py;
- sequence parallelism at TP2 = without: tests/training/test_sequence_parallel.py; the optimizer state and
  gradient buffers offloaded during generation and restored exactly: tests/training/test_offload.py.
Not tested here: Transformer Engine / FP8 and anything CUDA-only (`bench/actor_bench.py --gpu` runs bf16 on
a GPU).
"""

import dataclasses
import json

import pytest
import torch
from distributed import run_distributed

from nemo_lead.algorithms import LeadConfig, policy_loss
from nemo_lead.algorithms.rollout_correction import RolloutCorrectionConfig, correction_weights
from nemo_lead.models import write_tiny_model
from nemo_lead.models.source import model_source, resolve_precision
from nemo_lead.training.actor.config import ActorConfig, ActorOptimConfig
from nemo_lead.training.actor.microbatch import SequenceBatch

TEMPERATURE = 0.7
LR = 1e-3
# Clipping is active (the grad norm is ~2). Adam's first step moves each weight by lr * g / (|g| + eps): with
# the default eps (1e-8) gradient entries near 1e-8, where float rounding differs between implementations,
# move by anything up to lr (measured: 2.7e-6 apart); eps 1e-3 keeps the comparison about the optimizer.
OPTIM = {"lr": LR, "weight_decay": 0.1, "clip_grad": 0.5, "adam_eps": 1e-3}
LEAD = LeadConfig.reference_code().replace(entropy_coeff=0.01, kl_coeff=0.05)  # token-mean + entropy + KL
TIS = LEAD.replace(rollout_correction=RolloutCorrectionConfig("tis", threshold=1.2))
MIS_SEQ = LEAD.replace(rollout_correction=RolloutCorrectionConfig("mis", "sequence", threshold=1.1))
SMALL_BUDGET = 48  # tokens per micro-batch: several micro-batches of different shapes


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("actor") / "qwen2", "qwen2", seed=7, init_std=0.1,
                                tie_word_embeddings=True))


def _hf_model(hf_dir):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager",
                                                             dtype=torch.float32)


def _hf_token_logprobs(model, batch, temperature):
    """Per sequence (unpadded, one forward each): log-probs and entropies of the response tokens."""
    logps, ents = [], []
    for t, p in zip(batch.tokens, batch.prompt_lens):
        logits = model(t[None]).logits[0, p - 1 : len(t) - 1] / temperature
        logsm = torch.log_softmax(logits, -1)
        logps.append(logsm.gather(-1, t[p:, None])[:, 0])
        ents.append(-(logsm.exp() * logsm).sum(-1))
    return logps, ents


def _padded(values, width):
    out = torch.zeros(len(values), width)
    for i, v in enumerate(values):
        out[i, : len(v)] = v
    return out


def _tokens(n, g):
    """Random ids without 0: transformers' Qwen2 embeds the pad token (id 0 here) with padding_idx, so its
    embedding row gets no gradient from inputs there; megatron's embedding has no such row."""
    return torch.randint(1, 102, (n,), generator=g)


def _make_batch(hf_dir, n=9, seed=0):
    """Prompts 2-6 tokens, responses 3-34; old / ref log-probs = the model's, perturbed (ratios != 1, clipping)."""
    g = torch.Generator().manual_seed(seed)
    tokens, plens = [], []
    for _ in range(n):
        p, r = int(torch.randint(2, 7, (1,), generator=g)), int(torch.randint(3, 35, (1,), generator=g))
        tokens.append(_tokens(p + r, g))
        plens.append(p)
    batch = SequenceBatch(tokens=tokens, prompt_lens=plens, advantages=torch.randn(n, generator=g))
    with torch.no_grad():
        logps, _ = _hf_token_logprobs(_hf_model(hf_dir), batch, TEMPERATURE)
    old = [lp + 0.3 * torch.randn(lp.shape, generator=g) for lp in logps]
    ref = [lp + 0.2 * torch.randn(lp.shape, generator=g) for lp in logps]
    mask = [(torch.rand(lp.shape, generator=g) > 0.1).float() for lp in logps]  # some tokens left out
    return dataclasses.replace(batch, old_logprobs=old, ref_logprobs=ref, loss_mask=mask)


def _hf_reference(hf_dir, batch, lead):
    """Loss, grad norm and post-step weights of one policy step of transformers' model (see module doc)."""
    model = _hf_model(hf_dir)
    logps, ents = _hf_token_logprobs(model, batch, TEMPERATURE)
    width = max(batch.response_lens)
    engine = _padded(batch.rollout_logprobs, width) if batch.rollout_logprobs is not None else None
    loss, _ = policy_loss(_padded(logps, width), _padded(batch.old_logprobs, width), batch.advantages,
                          _padded(batch.loss_mask, width), lead, ref_logp=_padded(batch.ref_logprobs, width),
                          entropy=_padded(ents, width), rollout_logp=engine)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIM["clip_grad"])
    decay = [p for n, p in model.named_parameters() if p.dim() > 1 and not n.endswith(".bias")]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() > 1 and not n.endswith(".bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPTIM["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, eps=OPTIM["adam_eps"])
    opt.step()
    weights = {n: p.detach().clone() for n, p in model.state_dict().items() if n != "lm_head.weight"}
    return loss.item(), grad_norm.item(), weights


# ----------------------------------------------------------------------------- jobs (run on every rank)
def _layout_step(hf_dir, batch, tp, pp, budget, lead=LEAD, actor_options=None, **optim):
    """Build the actor at tp x pp (DP = the rest), log-probs, one policy step; what rank 0 reports."""
    import torch.distributed as dist

    from nemo_lead.models import export_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor, compute_logprobs
    from nemo_lead.training.actor.rl_update import policy_train_step

    info = init_parallel(tp, pp)
    actor = build_actor(ActorConfig(model=hf_dir, tp=tp, pp=pp, micro_batch_tokens=budget,
                                    optim={**OPTIM, **optim}, **(actor_options or {})), info)
    logps, ents = compute_logprobs(actor, batch, TEMPERATURE, entropy=True)
    metrics = policy_train_step(actor, batch, lead, temperature=TEMPERATURE)
    weights = dict(export_hf_weights(actor.model))
    destroy_parallel(keep_process_group=True)
    keep = dist.get_rank() == 0
    return {"logp": logps, "entropy": ents, "metrics": metrics, "weights": weights if keep else None}


def _one_rank_job(hf_dir, batch, sft_batch):
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.sft_update import sft_train_step

    out = {"tp1": _layout_step(hf_dir, batch, 1, 1, budget=10**6)}
    # token budgets: the normalisation must not depend on how the batch is cut (paper's seq-mean-token-mean
    # and Dr. GRPO's constant normaliser too)
    for name in ("paper", "dr_grpo"):
        lead = LeadConfig.from_preset(name)
        out[name] = [_layout_step(hf_dir, batch, 1, 1, budget=b, lead=lead)["metrics"] for b in (10**6, 64, 20)]
    info = init_parallel(1, 1)
    # on-policy: no old log-probs given, the ratio is taken against the step's own; the engine's log-probs
    # (here the actor's plus 0.01 x (i + 1) for sequence i) only feed the mismatch metric
    from nemo_lead.models import export_hf_weights
    from nemo_lead.training.actor.megatron_actor import compute_logprobs
    from nemo_lead.training.actor.rl_update import policy_train_step

    actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM), info)
    rollout = [lp + 0.01 * (i + 1) for i, lp in enumerate(compute_logprobs(actor, batch, TEMPERATURE))]
    on = dataclasses.replace(batch, old_logprobs=None, rollout_logprobs=rollout)
    out["on_policy"] = {"metrics": policy_train_step(actor, on, LEAD, temperature=TEMPERATURE, on_policy=True),
                        "weights": dict(export_hf_weights(actor.model))}
    # rollout correction, over several micro-batches: token-level TIS on the on-policy path (old = the step's
    # own log-probs) and sequence-level masking against the batch's old log-probs (the recompute path)
    g = torch.Generator().manual_seed(11)
    out["engine"] = [lp + 0.05 * torch.randn(lp.shape, generator=g) for lp in batch.old_logprobs]
    for key, lead, b, flag in (
        ("tis_on_policy", TIS, dataclasses.replace(batch, old_logprobs=None, rollout_logprobs=out["engine"]), True),
        ("mis_sequence", MIS_SEQ, dataclasses.replace(batch, rollout_logprobs=out["engine"]), False),
    ):
        actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM), info)
        out[key] = {"metrics": policy_train_step(actor, b, lead, temperature=TEMPERATURE, on_policy=flag),
                    "weights": dict(export_hf_weights(actor.model))}
    # activation recomputation (full, uniform, 1 layer per chunk) gives the same step
    cfg = ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM, recompute_granularity="full",
                      recompute_method="uniform", recompute_num_layers=1)
    out["recompute"] = policy_train_step(build_actor(cfg, info), batch, LEAD, temperature=TEMPERATURE)
    cfg = ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM, recompute_granularity="selective")
    out["selective"] = policy_train_step(build_actor(cfg, info), batch, LEAD, temperature=TEMPERATURE)
    # bf16 parameters (the GPU default) with fp32 master weights in megatron's optimizer: runs on the CPU too
    actor = build_actor(ActorConfig(model=hf_dir, precision="bf16", micro_batch_tokens=SMALL_BUDGET, optim=OPTIM), info)
    out["bf16"] = (policy_train_step(actor, batch, LEAD, temperature=TEMPERATURE), next(actor.gpt.parameters()).dtype)
    # SFT: the first step's loss is the masked token-mean NLL; a few steps at a high lr reduce it
    actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim={"lr": 1e-2}), info)
    from nemo_lead.generation.megatron_engine.engine import resolve_model

    out["refit_finds_the_live_model"] = resolve_model(actor) is actor.gpt  # the rollout engine's refit(actor)
    out["sft"] = [sft_train_step(actor, sft_batch)["loss"] for _ in range(6)]
    destroy_parallel()
    return out


def _two_rank_job(hf_dir, batch, sft_batch):
    import torch.distributed as dist

    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.rl_update import policy_train_step
    from nemo_lead.training.actor.sft_update import sft_train_step

    out = {(tp, pp): _layout_step(hf_dir, batch, tp, pp, SMALL_BUDGET) for tp, pp in ((2, 1), (1, 2), (1, 1))}
    out["dp2_distopt"] = _layout_step(hf_dir, batch, 1, 1, SMALL_BUDGET, use_distributed_optimizer=True)
    info = init_parallel(1, 1)
    # each DP rank passes only its own sequences (split_over_dp=False): the same global step
    half = list(range(dist.get_rank(), len(batch), 2))
    actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM), info)
    out["dp2_local"] = policy_train_step(actor, batch.select(half), LEAD, temperature=TEMPERATURE,
                                         split_over_dp=False)
    # on-policy at DP2: each rank trains its share; entropy and mismatch are reduced over both
    from nemo_lead.training.actor.megatron_actor import compute_logprobs

    actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM), info)
    rollout = [lp + 0.01 * (i + 1) for i, lp in enumerate(compute_logprobs(actor, batch, TEMPERATURE))]
    out["dp2_on_policy"] = policy_train_step(actor, dataclasses.replace(batch, old_logprobs=None, rollout_logprobs=rollout),
                                             LEAD, temperature=TEMPERATURE, on_policy=True)
    # one sequence on two DP ranks: rank 1 runs an empty stand-in and the loss is rank 0's sequence's
    actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=SMALL_BUDGET, optim=OPTIM), info)
    out["dp2_single"] = sft_train_step(actor, sft_batch.select([0]))
    destroy_parallel()
    return out


def _four_rank_job(hf_dir, batch):
    from nemo_lead.parallel import destroy_parallel

    out = _layout_step(hf_dir, batch, 2, 2, SMALL_BUDGET)
    destroy_parallel()
    return out


# ----------------------------------------------------------------------------- checks
def _check_step(result, reference, name, weights_too=True):
    ref_loss, ref_norm, ref_weights = reference
    m = result["metrics"]
    assert m["loss"] == pytest.approx(ref_loss, abs=1e-5), name
    assert m["grad_norm"] == pytest.approx(ref_norm, abs=1e-5), name
    assert m["update_skipped"] == 0.0 and m["lr"] == LR
    if weights_too:
        assert sorted(result["weights"]) == sorted(ref_weights), name
        worst = max(((result["weights"][k] - ref_weights[k]).abs().max().item(), k) for k in ref_weights)
        assert worst[0] < 2e-6, (name, worst)


def _check_logprobs(result, ref_logps, ref_ents, name):
    for got, ref in zip(result["logp"], ref_logps):
        assert got.shape == ref.shape and (got - ref).abs().max() < 1e-5, name
    for got, ref in zip(result["entropy"], ref_ents):
        assert (got - ref).abs().max() < 1e-5, name


@pytest.fixture(scope="module")
def batches(hf_dir):
    batch = _make_batch(hf_dir)
    g = torch.Generator().manual_seed(5)
    sft = SequenceBatch(tokens=[_tokens(n, g) for n in (12, 20, 7, 16)],
                        prompt_lens=[3, 1, 2, 5])
    with torch.no_grad():
        ref_logps, ref_ents = _hf_token_logprobs(_hf_model(hf_dir), batch, TEMPERATURE)
        sft_logps, _ = _hf_token_logprobs(_hf_model(hf_dir), sft, 1.0)
    return batch, sft, (ref_logps, ref_ents), sft_logps


@pytest.fixture(scope="module")
def one_rank(hf_dir, batches):
    batch, sft, _, _ = batches
    return run_distributed(_one_rank_job, 1, hf_dir, batch, sft)[0]


def test_one_rank_matches_transformers(hf_dir, batches, one_rank):
    batch, sft, (ref_logps, ref_ents), sft_logps = batches
    reference = _hf_reference(hf_dir, batch, LEAD)
    out = one_rank
    _check_logprobs(out["tp1"], ref_logps, ref_ents, "tp1")
    _check_step(out["tp1"], reference, "tp1")
    m = out["tp1"]["metrics"]
    assert m["microbatches"] == 1 and 0 < m["padding_fraction"] < 1 and m["sequences"] == len(batch)
    assert m["tokens"] == sum(float(x.sum()) for x in batch.loss_mask)
    assert 0 < m["clip_frac"] < 1 and m["entropy"] > 0 and m["kl_ref"] > 0  # the terms are in play
    for name in ("paper", "dr_grpo"):
        ref_loss, ref_norm, _ = _hf_reference(hf_dir, batch, LeadConfig.from_preset(name))
        whole, *cut = out[name]
        assert 1 < cut[0]["microbatches"] < cut[1]["microbatches"]
        assert all(c["padding_fraction"] < whole["padding_fraction"] for c in cut)  # similar lengths together
        for c in (whole, *cut):
            assert c["loss"] == pytest.approx(ref_loss, abs=1e-6) and c["grad_norm"] == pytest.approx(ref_norm, abs=1e-6)
    for key in ("recompute", "selective"):
        rec = out[key]
        assert rec["loss"] == pytest.approx(m["loss"], abs=1e-6) and rec["grad_norm"] == pytest.approx(m["grad_norm"], abs=1e-6)
    bf16, dtype = out["bf16"]
    assert dtype == torch.bfloat16 and bf16["update_skipped"] == 0.0
    assert bf16["loss"] == pytest.approx(m["loss"], rel=0.02) and bf16["grad_norm"] == pytest.approx(m["grad_norm"], rel=0.02)
    assert out["refit_finds_the_live_model"]
    masked_nll = torch.cat([-lp for lp in sft_logps]).mean().item()
    assert out["sft"][0] == pytest.approx(masked_nll, abs=1e-5)
    assert all(b < a for a, b in zip(out["sft"], out["sft"][1:])) and out["sft"][-1] < 0.8 * out["sft"][0]


def test_on_policy_step_takes_the_old_logprobs_from_its_own_forward_pass(hf_dir, batches, one_rank):
    """The same step as with old log-probs = the current policy's (transformers' reference), ratio 1, no
    clipping; entropy and the engine mismatch reported from the same pass."""
    batch, _, (ref_logps, ref_ents), _ = batches
    reference = _hf_reference(hf_dir, dataclasses.replace(batch, old_logprobs=ref_logps), LEAD)
    result = one_rank["on_policy"]
    _check_step(result, reference, "on_policy")
    m = result["metrics"]
    assert m["ratio_mean"] == 1.0 and m["ratio_max"] == 1.0 and m["clip_frac"] == 0.0 and m["approx_kl"] == 0.0
    kept = [float(mask.sum()) for mask in batch.loss_mask]
    entropy = sum(float((e * mask).sum()) for e, mask in zip(ref_ents, batch.loss_mask)) / sum(kept)
    assert m["entropy"] == pytest.approx(entropy, abs=1e-5)
    assert m["mismatch/logprob_abs_mean"] == pytest.approx(sum(0.01 * (i + 1) * k for i, k in enumerate(kept))
                                                           / sum(kept), abs=1e-5)
    assert m["mismatch/logprob_abs_max"] == pytest.approx(0.01 * max(i + 1 for i, k in enumerate(kept) if k), abs=1e-5)


def test_rollout_correction_step_matches_transformers(hf_dir, batches, one_rank):
    """TIS (on-policy) and sequence masking (given old log-probs): loss, gradient norm and weights as
    transformers' step with the same weighted loss; the metrics as computed by hand over the whole batch."""
    batch, _, (ref_logps, _), _ = batches
    engine, width = one_rank["engine"], max(batch.response_lens)
    mask = _padded(batch.loss_mask, width)
    for key, lead, old in (("tis_on_policy", TIS, ref_logps), ("mis_sequence", MIS_SEQ, batch.old_logprobs)):
        reference = _hf_reference(hf_dir, dataclasses.replace(batch, old_logprobs=old, rollout_logprobs=engine), lead)
        _check_step(one_rank[key], reference, key)
        w, hit, seq_hit = correction_weights(_padded(old, width), _padded(engine, width), mask, lead.rollout_correction)
        m = one_rank[key]["metrics"]
        assert m["microbatches"] > 1 and 0 < m["rollout_correction/token_frac"] < 1, key  # the correction acts
        assert m["rollout_correction/token_frac"] == pytest.approx(int(hit.sum()) / int(mask.sum()), abs=1e-9), key
        assert m["rollout_correction/seq_frac"] == pytest.approx(int(seq_hit.sum()) / int(mask.any(1).sum()), abs=1e-9), key
        assert m["rollout_correction/weight_mean"] == pytest.approx(float((w * mask).sum() / mask.sum()), abs=1e-6)
    with pytest.raises(ValueError, match="needs batch.rollout_logprobs"):
        from nemo_lead.training.actor.rl_update import policy_train_step

        policy_train_step(None, batch, TIS)


def test_policy_step_needs_old_logprobs_or_on_policy(hf_dir, batches):
    from nemo_lead.training.actor.rl_update import policy_train_step

    batch = batches[0]
    with pytest.raises(ValueError, match="batch.old_logprobs must be None"):
        policy_train_step(None, batch, LEAD, on_policy=True)
    with pytest.raises(ValueError, match=r"needs batch.old_logprobs \(or on_policy=True\)"):
        policy_train_step(None, dataclasses.replace(batch, old_logprobs=None), LEAD)


def test_tp2_pp2_dp2_match_transformers(hf_dir, batches, one_rank):
    batch, sft, (ref_logps, ref_ents), sft_logps = batches
    reference = _hf_reference(hf_dir, batch, LEAD)
    r0, r1 = run_distributed(_two_rank_job, 2, hf_dir, batch, sft)
    for key in ((2, 1), (1, 2), (1, 1), "dp2_distopt"):
        for rank, r in enumerate((r0, r1)):
            _check_logprobs(r[key], ref_logps, ref_ents, (key, rank))  # every rank gets the whole batch's
            assert r[key]["metrics"] == r0[key]["metrics"]  # the same metrics on every rank
        _check_step(r0[key], reference, key)
        assert r0[key]["metrics"]["microbatches"] > 1
    for key in ("dp2_local",):
        assert r0[key]["loss"] == pytest.approx(reference[0], abs=1e-5)
        assert r0[key]["grad_norm"] == pytest.approx(reference[1], abs=1e-5)
    on, dp2 = one_rank["on_policy"]["metrics"], r0["dp2_on_policy"]
    assert dp2 == r1["dp2_on_policy"] and dp2["sequences"] == len(batch)
    for k in ("loss", "grad_norm", "entropy", "mismatch/logprob_abs_mean", "mismatch/logprob_abs_max", "ratio_mean",
              "tokens"):
        assert dp2[k] == pytest.approx(on[k], abs=1e-5), k
    single = r0["dp2_single"]
    assert single == r1["dp2_single"] and single["sequences"] == 1
    assert single["loss"] == pytest.approx((-sft_logps[0]).mean().item(), abs=1e-5)


def test_tp2_x_pp2_matches_transformers(hf_dir, batches):
    batch, _, (ref_logps, ref_ents), _ = batches
    reference = _hf_reference(hf_dir, batch, LEAD)
    results = run_distributed(_four_rank_job, 4, hf_dir, batch)
    for rank, r in enumerate(results):
        _check_logprobs(r, ref_logps, ref_ents, rank)
        assert r["metrics"] == results[0]["metrics"]
    _check_step(results[0], reference, "tp2xpp2")


# ----------------------------------------------------------------------------- configuration
@pytest.mark.parametrize("kwargs, message", [
    ({"tp": 0}, "actor.tp=0 must be >= 1"),
    ({"micro_batch_tokens": 0}, "actor.micro_batch_tokens=0"),
    ({"logprob_chunk_tokens": -1}, "actor.logprob_chunk_tokens=-1 must be >= 0"),
    ({"precision": "int8"}, "actor.precision='int8'"),
    ({"recompute_granularity": "some"}, "actor.recompute_granularity='some'"),
    ({"recompute_granularity": "full"}, "needs actor.recompute_method"),
    ({"recompute_granularity": "full", "recompute_method": "uniform"}, "needs actor.recompute_num_layers"),
    ({"recompute_method": "uniform"}, "only with actor.recompute_granularity=full"),
    ({"optim": {"lr": 0.0}}, "actor.optim.lr=0.0 must be > 0"),
    ({"optim": {"adam_beta2": 1.0}}, r"actor.optim.adam_beta2=1.0 must be in \[0, 1\)"),
])
def test_bad_actor_config_names_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ActorConfig(**kwargs)


@dataclasses.dataclass
class _Job:
    actor: ActorConfig = dataclasses.field(default_factory=ActorConfig)


def test_actor_config_is_a_job_config_section(tmp_path):
    from nemo_lead.config.loading import ConfigError, load_config

    job = load_config(_Job, [], ["actor.tp=2", "actor.optim.lr=3e-6", "actor.recompute_granularity=selective"])
    assert isinstance(job.actor.optim, ActorOptimConfig) and job.actor.optim.lr == 3e-6 and job.actor.tp == 2
    with pytest.raises(ConfigError, match="did you mean 'actor.optim.lr'"):
        load_config(_Job, [], ["actor.optim.lrr=1"])
    with pytest.raises(ConfigError, match="needs actor.recompute_method"):
        load_config(_Job, [], ["actor.recompute_granularity=full"])
    assert ActorConfig(pp=2).megatron_overrides()["variable_seq_lengths"] is True
    assert "variable_seq_lengths" not in ActorConfig().megatron_overrides()
    preset = model_source("tiny-qwen2")
    assert (preset.kind, preset.path, preset.tokenizer_dir) == ("preset", "tiny-qwen2", None)
    with pytest.raises(ValueError, match="a model preset .* without a tokenizer; give one with tokenizer=DIR"):
        preset.require_tokenizer()
    from nemo_lead.models import tiny_hf_config

    (tmp_path / "config.json").write_text(json.dumps({**tiny_hf_config(), "torch_dtype": "bfloat16"}))
    hf = model_source(str(tmp_path))
    assert (hf.kind, hf.path, hf.saved_precision) == ("hf", str(tmp_path.resolve()), "bf16")
    assert [resolve_precision("auto", hf, cuda=c) for c in (False, True)] == ["fp32", "bf16"]
    assert resolve_precision("fp16", hf, cuda=False) == "fp16"
    with pytest.raises(ValueError, match="no such folder, and not a model preset"):
        model_source(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither a HF model folder"):
        model_source(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="--model is required"):
        model_source("")


def test_torch_adam_inside_megatron_optimizers_is_switched_to_the_fused_kernel():
    from types import SimpleNamespace

    from nemo_lead.training.actor.megatron_actor import fuse_torch_adam

    w = torch.nn.Parameter(torch.ones(3))
    adam, sgd = torch.optim.AdamW([w], lr=0.1), torch.optim.SGD([w], lr=0.1)
    fuse_torch_adam(SimpleNamespace(chained_optimizers=[SimpleNamespace(optimizer=adam), SimpleNamespace(optimizer=sgd)]))
    assert [(g["fused"], g["foreach"]) for g in adam.param_groups] == [(True, False)]
    assert "fused" not in sgd.param_groups[0] or not sgd.param_groups[0]["fused"]
    reference = torch.nn.Parameter(torch.ones(3))
    loop = torch.optim.AdamW([reference], lr=0.1, foreach=False)
    for p, opt in ((w, adam), (reference, loop)):
        p.grad = torch.tensor([0.5, -1.0, 2.0])
        opt.step()
    assert torch.allclose(w, reference, atol=1e-7, rtol=0)  # the fused kernel's update is the loop's


def _default_budget_job(hf_dir):
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor

    init_parallel(1, 1, seed=0)
    try:
        return build_actor(ActorConfig(model=hf_dir)).cfg.micro_batch_tokens
    finally:
        destroy_parallel()


def test_micro_batch_tokens_default_is_chosen_per_device(hf_dir, monkeypatch):
    """actor.micro_batch_tokens=None (the default) becomes 4096 on a CPU (host RAM holds the fp32 logits of a
    real vocabulary) and 16384 on a GPU when the actor is built; a value that is set stays."""
    from nemo_lead.training.actor.config import micro_batch_tokens_for_device

    assert ActorConfig().micro_batch_tokens is None
    assert run_distributed(_default_budget_job, 1, hf_dir) == [4096]  # the test suite hides GPUs
    assert micro_batch_tokens_for_device(None) == 4096 and micro_batch_tokens_for_device(96) == 96
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert micro_batch_tokens_for_device(None) == 16384 and micro_batch_tokens_for_device(96) == 96
