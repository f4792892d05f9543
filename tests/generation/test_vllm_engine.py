"""The `vllm` engine for real, with vLLM's CPU build (the vllm leg: scripts/setup_venv.sh vllm; skipped where
vLLM is not installed, and an error instead with NEMO_LEAD_REQUIRE_VLLM=1, as that leg sets).

Models: the tiny Qwen2 at hidden 128 (head size 32: vLLM's CPU attention has none below 32), untied, and a
SmolLM2-shaped Llama (hidden 576, 9 heads over 3 KV groups, head size 64, tied embeddings; 4 layers and the
tiny vocabulary, so it builds in seconds), fp32, each job in fresh processes (vLLM binds its threads and keeps
process-wide state).

- Greedy tokens of the vLLM engine equal the megatron engine's on the same actor, before and after an update
  (the actor's weights changed in place, then `refit`): the tokens change with the weights and follow them;
  before the refit vLLM still has the old weights (refit is what moves them).
- Round trip: perturb -> refit -> restore -> refit gives the first call's tokens and log-probs exactly.
- Sampling: a sample's tokens are the same whatever the batching or the split of the prompts (`prompt_offset`),
  and with per-prompt seeds whatever else the call holds (`prompt_seeds`, `first_sample`);
  its log-probs equal the actor's log softmax(logits / T) of the same tokens (the mismatch is measured and
  bounded); truncated sampling reports NaN untruncated log-probs; stop tokens end a sample and are kept.
- Two ranks (gloo): an engine at TP2 over a TP2 actor and two TP1 replicas over it (each half the prompts) give
  the one-rank engine's greedy tokens; every refit is collective.
- Bad input: a sampling option vLLM cannot honour, sleep asked for on CPU.
"""

import math
import os
from pathlib import Path

import pytest
import torch
from distributed import run_distributed

from nemo_lead.generation import SamplingParams
from nemo_lead.models import write_tiny_model

try:
    from nemo_lead.generation.vllm_engine import vllm_importable

    HAVE_VLLM = vllm_importable()
except Exception:  # pragma: no cover - a broken install reads as absent, the required leg then fails below
    HAVE_VLLM = False

if not HAVE_VLLM and os.environ.get("NEMO_LEAD_REQUIRE_VLLM") == "1":
    raise RuntimeError("NEMO_LEAD_REQUIRE_VLLM=1 but vLLM does not import here (scripts/setup_venv.sh vllm)")
pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (the vllm leg runs these)")

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22], [30, 31, 32]]
GREEDY = SamplingParams(n=1, temperature=0, max_tokens=12)
SAMPLED = SamplingParams(n=3, temperature=0.8, max_tokens=10, seed=11)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm")
    qwen = write_tiny_model(root / "qwen2", "qwen2", seed=3, init_std=0.1, hidden_size=128, tie_word_embeddings=False)
    smol = write_tiny_model(root / "smol", "llama", seed=4, init_std=0.05, hidden_size=576, num_attention_heads=9,
                            num_key_value_heads=3, intermediate_size=1536, num_hidden_layers=4, tie_word_embeddings=True)
    return str(qwen), str(smol)


def _tokens(rollouts):
    return [r.token_ids for r in rollouts]


def _actor(hf_dir, tp=1):
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import init_parallel

    info = init_parallel(tp, 1)
    model = build_gpt(hf_dir, info, "fp32", init=False)
    load_hf_weights(model, hf_dir)
    return model


def _perturb(model, seed):
    """An update in place: every parameter of layer 0 moved by seeded noise; returns the originals."""
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layers.0." in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return saved


def _restore(model, saved):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(saved[name])


def _one_rank_job(qwen, smol):
    from nemo_lead.generation import EngineConfig, MegatronEngine, build_engine
    from nemo_lead.parallel import destroy_parallel

    out = {}
    model = _actor(qwen)
    megatron = MegatronEngine(model)
    engine = build_engine(EngineConfig(kind="vllm", max_batch_size=16), model)
    out["version0"] = engine.weight_version
    out["greedy"] = (_tokens(megatron.generate(PROMPTS, GREEDY)), _tokens(engine.generate(PROMPTS, GREEDY)))
    first = engine.generate(PROMPTS, SAMPLED)
    saved = _perturb(model, seed=1)
    out["stale"] = _tokens(engine.generate(PROMPTS, GREEDY))  # no refit yet: the engine's weights are the old ones
    engine.refit(model, version=1)
    out["updated"] = (_tokens(megatron.generate(PROMPTS, GREEDY)), _tokens(engine.generate(PROMPTS, GREEDY)))
    out["version1"] = engine.weight_version
    out["refit_stats"] = dict(engine.refit_stats)
    _restore(model, saved)
    engine.refit(model, version=2)
    again = engine.generate(PROMPTS, SAMPLED)
    out["round_trip"] = (_tokens(first) == _tokens(again), [r.logprobs for r in first] == [r.logprobs for r in again])
    # the seed rule: the same samples whatever the batching / split
    parts = engine.generate(PROMPTS[:1], SAMPLED) + [
        r for r in engine.generate(PROMPTS[1:], SAMPLED, prompt_offset=1)]
    out["split"] = (_tokens(first), _tokens(parts))
    out["first"] = [(r.prompt_index, r.sample_index, r.token_ids, r.logprobs, r.policy_logprobs, r.finish_reason)
                    for r in first]
    # per-prompt seeds (evaluation's): a sample follows (its prompt's seed, its index), in any company
    seeds = [101, 202, 303, 404]
    keyed = {(r.prompt_index, r.sample_index): r.token_ids for r in engine.generate(PROMPTS, SAMPLED, prompt_seeds=seeds)}
    alone = {(3, r.sample_index): r.token_ids for r in engine.generate(PROMPTS[3:], SAMPLED, prompt_seeds=seeds[3:])}
    tail = {(r.prompt_index, r.sample_index): r.token_ids
            for r in engine.generate(PROMPTS, SamplingParams(n=2, temperature=0.8, max_tokens=10, seed=5),
                                     prompt_seeds=seeds, first_sample=1)}
    out["prompt_seeds"] = (keyed, alone, tail)
    cache = engine.llm.llm_engine.vllm_config.cache_config
    out["concurrency"] = (engine.concurrency(64), engine.concurrency(10**9), cache.num_gpu_blocks * cache.block_size)
    stop = first[0].token_ids[3]
    stopped = engine.generate(PROMPTS[:1], SamplingParams(n=3, temperature=0.8, max_tokens=10, seed=11,
                                                          stop_token_ids=[stop]))
    out["stopped"] = (stop, first[0].token_ids.index(stop) + 1, [(r.token_ids, r.finish_reason) for r in stopped])
    truncated = engine.generate(PROMPTS[:1], SamplingParams(n=2, temperature=0.8, top_p=0.7, max_tokens=6, seed=2))
    out["truncated"] = [(r.logprobs, r.policy_logprobs) for r in truncated]
    errors = []
    try:
        engine.generate(PROMPTS, SamplingParams(temperature=1.0, min_p=0.1, top_k=3))
    except ValueError as e:
        errors.append(str(e))
    engine.sleep()  # CPU: a note, nothing freed
    out["after_sleep"] = _tokens(engine.generate(PROMPTS, GREEDY)) == out["greedy"][1]
    out["errors"] = errors
    destroy_parallel()
    return out


def _smol_job(smol):
    from nemo_lead.generation import EngineConfig, MegatronEngine, build_engine
    from nemo_lead.parallel import destroy_parallel

    model = _actor(smol)
    params = SamplingParams(n=1, temperature=0, max_tokens=16)
    out = (_tokens(MegatronEngine(model).generate(PROMPTS, params)),
           _tokens(build_engine(EngineConfig(kind="vllm"), model).generate(PROMPTS, params)))
    destroy_parallel()
    return out


def _sleep_level_job(qwen):
    from nemo_lead.generation import EngineConfig, build_engine
    from nemo_lead.generation.engine_config import VllmConfig
    from nemo_lead.parallel import destroy_parallel

    model = _actor(qwen)
    try:
        build_engine(EngineConfig(kind="vllm", vllm=VllmConfig(sleep_level=1)), model)
    except ValueError as e:
        return str(e)
    finally:
        destroy_parallel()
    return None


def _logprobs_of(hf_dir, rollouts, temperature):
    """log softmax(logits / T) of each rollout's tokens under transformers' model of `hf_dir` (fp32)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    out = []
    for prompt_index, _, tokens, *_ in rollouts:
        ids = torch.tensor([PROMPTS[prompt_index] + tokens])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].float() / temperature, dim=-1)
        start = len(PROMPTS[prompt_index]) - 1
        out.append([logp[start + i, t].item() for i, t in enumerate(tokens)])
    return out


@pytest.fixture(scope="module")
def one_rank(models):
    (result,) = run_distributed(_one_rank_job, 1, *models, timeout=300)
    return result


def test_greedy_tokens_equal_the_megatron_engine_and_follow_every_refit(one_rank):
    megatron, vllm = one_rank["greedy"]
    assert vllm == megatron
    updated_megatron, updated_vllm = one_rank["updated"]
    assert updated_vllm == updated_megatron
    assert updated_vllm != vllm  # the update changed the tokens ...
    assert one_rank["stale"] == vllm  # ... and only the refit moved them into the engine
    assert (one_rank["version0"], one_rank["version1"]) == (0, 1)
    stats = one_rank["refit_stats"]
    assert stats["tensors"] == 2 * 12 + 3 and stats["bytes"] > 0  # 2 layers x 12 HF tensors + embed, norm, lm_head


def test_refit_round_trip_restores_tokens_and_logprobs_exactly(one_rank):
    assert one_rank["round_trip"] == (True, True)


def test_samples_do_not_depend_on_batching_or_the_prompt_split(one_rank):
    whole, parts = one_rank["split"]
    assert whole == parts
    assert len({tuple(t) for t in whole[:3]}) > 1  # a prompt's samples differ from each other


def test_per_prompt_seeds_give_a_sample_the_same_tokens_in_any_call(one_rank):
    keyed, alone, tail = one_rank["prompt_seeds"]
    assert {k: v for k, v in keyed.items() if k[0] == 3} == alone
    assert tail == {k: v for k, v in keyed.items() if k[1] >= 1}  # samples 1-2 drawn without sample 0
    assert [keyed[(p, s)] for p in range(4) for s in range(3)] != one_rank["split"][0]  # not the call's own streams


def test_concurrency_is_the_pool_over_the_sequence_length_at_most_the_batch(one_rank):
    short, huge, pool_tokens = one_rank["concurrency"]
    assert pool_tokens >= 1024 and short == min(16, pool_tokens // 64) == 16  # engine.max_batch_size=16
    assert huge == 1  # even a sequence longer than the pool is run, one at a time


def test_logprobs_are_the_actors_at_the_sampling_temperature(one_rank, models):
    first = one_rank["first"]
    reference = _logprobs_of(models[0], first, SAMPLED.temperature)
    diffs = []
    for (_, _, _, logprobs, policy, _), ref in zip(first, reference):
        assert logprobs == policy  # no truncation: the sampling distribution is softmax(logits / T)
        diffs += [abs(a - b) for a, b in zip(logprobs, ref)]
    assert max(diffs) < 1e-4, max(diffs)  # fp32 on both sides: the engine / trainer mismatch is rounding only


def test_stop_tokens_end_a_sample_and_are_kept(one_rank):
    stop, expected, stopped = one_rank["stopped"]
    for tokens, finish in stopped:
        assert (finish == "stop" and tokens[-1] == stop and stop not in tokens[:-1]) or (
            finish == "length" and stop not in tokens)
    assert len(stopped[0][0]) == expected  # sample 0 draws the same tokens as before and ends on the stop token


def test_truncated_sampling_reports_no_untruncated_logprobs(one_rank):
    for logprobs, policy in one_rank["truncated"]:
        assert all(x <= 0 for x in logprobs) and all(math.isnan(x) for x in policy)


def test_bad_input_is_refused_and_cpu_sleep_is_a_no_op(one_rank, models):
    assert any("min-p before top-k / top-p" in e for e in one_rank["errors"])
    assert one_rank["after_sleep"]
    (message,) = run_distributed(_sleep_level_job, 1, models[0], timeout=300)
    assert message is not None and "engine.vllm.sleep_level=1: vLLM's CPU build has no sleep mode" in message


def test_smollm2_shaped_model_greedy_tokens_equal_the_megatron_engine(models):
    (result,) = run_distributed(_smol_job, 1, models[1], timeout=300)
    megatron, vllm = result
    assert vllm == megatron


def _two_rank_job(qwen, engine_tp):
    from nemo_lead.generation import EngineConfig, build_engine
    from nemo_lead.parallel import destroy_parallel

    model = _actor(qwen, tp=2)
    engine = build_engine(EngineConfig(kind="vllm", tp=str(engine_tp)), model)
    replicas = engine.replicas
    if replicas is None:  # one TP2 engine: every rank generates every prompt
        tokens = _tokens(engine.generate(PROMPTS, GREEDY))
    else:  # two TP1 replicas: each its half of the prompts
        count, index = replicas
        half = len(PROMPTS) // count
        tokens = _tokens(engine.generate(PROMPTS[index * half:(index + 1) * half], GREEDY, prompt_offset=index * half))
    saved = _perturb(model, seed=1)
    engine.refit(model)  # collective over the TP2 actor's ranks
    _restore(model, saved)
    engine.refit(model)
    destroy_parallel()
    return replicas, tokens, engine.weight_version


@pytest.mark.slow
@pytest.mark.parametrize("engine_tp", [2, 1])
def test_two_ranks_engine_tp2_and_tp1_replicas_over_a_tp2_actor(models, one_rank, engine_tp):
    # a segment under the name vLLM's CPU build gives every TP2 group's first rank, left by a killed job: the
    # engine must neither trip over it ("create shm in SHMManager failed. errno: 17") nor leave its own behind
    shm = Path("/dev/shm")
    stale = shm / "-tp:0-[0-1]-cpushm_0"
    made = shm.is_dir() and not stale.exists()
    if made:
        stale.write_bytes(b"\0" * 64)
    before = set(os.listdir(shm)) if shm.is_dir() else set()
    try:
        results = run_distributed(_two_rank_job, 2, models[0], engine_tp, timeout=300)
    finally:
        # vLLM's segments only: other processes on the machine have their own
        left = {n for n in (set(os.listdir(shm)) if shm.is_dir() else set()) - before if "cpushm" in n}
        if made:
            stale.unlink(missing_ok=True)
    assert not left, f"shared memory left in /dev/shm: {sorted(left)}"
    expected = one_rank["greedy"][0]
    if engine_tp == 2:
        assert [r[0] for r in results] == [None, None]
        assert results[0][1] == results[1][1] == expected
    else:
        assert [r[0] for r in results] == [(2, 0), (2, 1)]
        assert results[0][1] + results[1][1] == expected
    assert [r[2] for r in results] == [2, 2]
