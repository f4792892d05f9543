"""The same code on a CUDA device (skipped without one; CI has none): what only a GPU run can show.

The CPU suite proves the numerics (parity with transformers at every layout, in fp32). Here one process,
one GPU, NCCL: the model, the actor, the engine and checkpoints must run unchanged on CUDA, fp32 must
still match transformers run on the same GPU (TF32 off), and bf16 - the GPU default - must be as close to
the fp32 reference as transformers' own bf16 model is. Run in a GPU container with
`NEMO_LEAD_GPU_TESTS=1 python -m pytest -q tests/gpu` (bench/gpu_session.sh runs it with the GPU
benchmarks; without the variable tests/conftest.py hides the GPUs from the whole suite).
"""

import dataclasses
import math

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device and NEMO_LEAD_GPU_TESTS=1 (tests/conftest.py)")

FP32_TOL = 1e-4  # same weights, different GPU kernels (cuBLAS vs cuBLAS, SDPA vs eager) in fp32


@pytest.fixture(scope="module")
def parallel():
    from nemo_lead.parallel import destroy_parallel, init_parallel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    info = init_parallel(1, 1)
    assert info.backend == "nccl" and info.device.type == "cuda"
    yield info
    destroy_parallel()


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def hf_dir(request, tmp_path_factory):
    from nemo_lead.models import write_tiny_model

    tied = request.param == "llama"
    return str(write_tiny_model(tmp_path_factory.mktemp("gpu") / request.param, request.param, seed=3,
                                init_std=0.1, tie_word_embeddings=tied))


def _hf(hf_dir, dtype):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).cuda().eval()


def _ids(n=3, length=40, seed=0):
    return torch.randint(1, 102, (n, length), generator=torch.Generator().manual_seed(seed))


def _ours(hf_dir, info, precision):
    from nemo_lead.models import build_gpt, load_hf_weights

    model = build_gpt(hf_dir, info, precision, spec="local", init=False)
    load_hf_weights(model, hf_dir)
    return model


def test_logits_fp32_match_and_bf16_as_close_as_transformers(parallel, hf_dir):
    from nemo_lead.models import forward_logits

    ids = _ids()
    with torch.no_grad():
        ref = _hf(hf_dir, torch.float32)(ids.cuda()).logits.float()
        hf_bf16 = _hf(hf_dir, torch.bfloat16)(ids.cuda()).logits.float()
        ours32 = forward_logits(_ours(hf_dir, parallel, "fp32"), ids).float()
        ours16 = forward_logits(_ours(hf_dir, parallel, "bf16"), ids).float()
    assert ours32.device.type == "cuda" and ours16.device.type == "cuda"
    assert (ours32 - ref).abs().max().item() <= FP32_TOL
    hf_err = (hf_bf16 - ref).abs().mean().item()
    our_err = (ours16 - ref).abs().mean().item()
    assert 0 < our_err <= 2 * hf_err + 1e-3, (our_err, hf_err)


def _sequence_batch(n=6, seed=1):
    from nemo_lead.training.actor.microbatch import SequenceBatch

    g = torch.Generator().manual_seed(seed)
    tokens, plens = [], []
    for _ in range(n):
        p, r = int(torch.randint(2, 6, (1,), generator=g)), int(torch.randint(5, 60, (1,), generator=g))
        tokens.append(torch.randint(1, 102, (p + r,), generator=g))
        plens.append(p)
    return SequenceBatch(tokens=tokens, prompt_lens=plens, advantages=torch.randn(n, generator=g))


def _hf_sft_reference(hf_dir, batch):
    """transformers fp32 on the GPU: masked NLL over response tokens (global token mean) and its grad norm."""
    model = _hf(hf_dir, torch.float32).train()
    total = sum(len(t) - p for t, p in zip(batch.tokens, batch.prompt_lens))
    loss = 0.0
    for t, p in zip(batch.tokens, batch.prompt_lens):
        t = t.cuda()
        logp = torch.log_softmax(model(t[None]).logits[0, p - 1 : len(t) - 1].float(), -1)
        loss = loss + -logp.gather(-1, t[p:, None]).sum() / total
    loss.backward()
    norm = torch.sqrt(sum((q.grad.double() ** 2).sum() for q in model.parameters() if q.grad is not None))
    logps = []
    with torch.no_grad():
        for t, p in zip(batch.tokens, batch.prompt_lens):
            t = t.cuda()
            lp = torch.log_softmax(model(t[None]).logits[0, p - 1 : len(t) - 1].float(), -1)
            logps.append(lp.gather(-1, t[p:, None])[:, 0].cpu())
    return float(loss), float(norm), logps


def test_actor_logprobs_and_steps_on_cuda(parallel, hf_dir):
    from nemo_lead.algorithms import LeadConfig
    from nemo_lead.algorithms.rollout_correction import RolloutCorrectionConfig
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor, compute_logprobs
    from nemo_lead.training.actor.rl_update import policy_train_step
    from nemo_lead.training.actor.sft_update import sft_train_step

    batch = _sequence_batch()
    ref_loss, ref_norm, ref_logps = _hf_sft_reference(hf_dir, batch)
    optim = {"lr": 1e-4, "clip_grad": 1.0}
    actor = build_actor(ActorConfig(model=hf_dir, precision="fp32", micro_batch_tokens=96, optim=optim), parallel)
    logps = compute_logprobs(actor, batch)
    assert max((a - b).abs().max().item() for a, b in zip(logps, ref_logps)) <= FP32_TOL
    m = sft_train_step(actor, batch)
    assert m["microbatches"] > 1
    assert m["loss"] == pytest.approx(ref_loss, abs=FP32_TOL) and m["grad_norm"] == pytest.approx(ref_norm, rel=1e-4)
    after = sft_train_step(actor, batch)
    assert after["loss"] < m["loss"]  # the step moved the weights downhill

    bf16 = build_actor(ActorConfig(model=hf_dir, precision="bf16", micro_batch_tokens=96, optim=optim), parallel)
    first = sft_train_step(bf16, batch)
    assert first["loss"] == pytest.approx(ref_loss, rel=0.02)
    old = compute_logprobs(bf16, batch)
    policy = dataclasses.replace(batch, old_logprobs=old)
    pm = policy_train_step(bf16, policy, LeadConfig())
    assert torch.isfinite(torch.tensor(pm["loss"])) and pm["ratio_mean"] == pytest.approx(1.0, abs=0.02)
    # with the engine's log-probs (0.01 below the old ones) and a rollout correction: the mismatch and the
    # correction's metrics are reduced on the GPU beside the loss's own (an RL step's every update)
    engine = [lp.float() - 0.01 for lp in old]
    tis = LeadConfig(rollout_correction=RolloutCorrectionConfig(mode="tis"))
    cm = policy_train_step(bf16, dataclasses.replace(policy, rollout_logprobs=engine), tis)
    assert cm["mismatch/logprob_abs_mean"] == pytest.approx(0.01, abs=1e-4)
    assert cm["mismatch/logprob_abs_max"] == pytest.approx(0.01, abs=1e-4)
    assert cm["rollout_correction/weight_mean"] == pytest.approx(math.exp(0.01), abs=1e-3)


def test_engine_greedy_on_cuda_equals_full_forward(parallel, hf_dir):
    from nemo_lead.generation import MegatronEngine, SamplingParams
    from nemo_lead.models import forward_logits

    model = _ours(hf_dir, parallel, "fp32")
    prompts = [[5, 9, 14], [20, 21, 22, 23, 24, 25, 26], [40]]
    rollouts = MegatronEngine(model).generate(prompts, SamplingParams(temperature=0, max_tokens=12))
    for r in rollouts:
        ids = list(prompts[r.prompt_index])
        for _ in range(12):
            ids.append(int(forward_logits(model, torch.tensor([ids]))[0, -1].argmax()))
        assert r.token_ids == ids[len(prompts[r.prompt_index]):]
    sampled = MegatronEngine(model).generate(prompts, SamplingParams(n=4, temperature=1.0, max_tokens=16, seed=7))
    again = MegatronEngine(model).generate(prompts, SamplingParams(n=4, temperature=1.0, max_tokens=16, seed=7))
    assert [r.token_ids for r in sampled] == [r.token_ids for r in again]  # seeded sampling is reproducible


def test_checkpoint_round_trip_on_cuda(parallel, hf_dir, tmp_path):
    from nemo_lead.models import forward_logits
    from nemo_lead.models.weights_checkpoint import build_from_checkpoint, save_checkpoint

    model = _ours(hf_dir, parallel, "bf16")
    save_checkpoint(tmp_path / "ckpt", model, step=3)
    loaded, meta = build_from_checkpoint(tmp_path / "ckpt", parallel)
    ids = _ids(2, 24, seed=5)
    assert meta["step"] == 3 and meta["precision"] == "bf16"
    assert torch.equal(forward_logits(model, ids), forward_logits(loaded, ids))


def test_engine_cuda_graphs_equal_eager_steps(parallel, hf_dir):
    """Captured decode steps give the eager engine's tokens; compaction on stop tokens and admissions (a
    small batch limit) replay the same graphs; cache growth re-captures."""
    from nemo_lead.generation import MegatronEngine, SamplingParams

    model = _ours(hf_dir, parallel, "fp32")
    prompts = [[5, 9, 14], [20, 21, 22, 23, 24, 25, 26], [40], [41, 42]]
    params = SamplingParams(n=3, temperature=0.8, max_tokens=60, stop_token_ids=[7, 30], seed=11)
    eager = MegatronEngine(model, max_batch_size=6, cuda_graphs=False).generate(prompts, params)
    engine = MegatronEngine(model, max_batch_size=6, cuda_graphs=True)
    graphed = engine.generate(prompts, params)
    assert [(r.token_ids, r.finish_reason) for r in graphed] == [(r.token_ids, r.finish_reason) for r in eager]
    err = max(max(abs(a - b) for a, b in zip(g.policy_logprobs, e.policy_logprobs)) for g, e in zip(graphed, eager))
    assert err < 1e-4
    stats = engine.graph_stats
    assert stats["captures"] >= 1 and stats["replays"] >= 2 * stats["captures"], stats
    default = MegatronEngine(model)  # on a GPU at TP = PP = 1 graphs are the default
    default.generate(prompts, SamplingParams(temperature=0, max_tokens=16))
    assert default.graph_stats["replays"] > 0
