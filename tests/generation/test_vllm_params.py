"""The `vllm` engine's decisions that need no vLLM (every leg): requests and their seeds, the sampling options
it refuses, outputs -> Rollouts with every log-prob checked, the LLM arguments it owns, versions, the config
keys and the engine layouts it accepts; without vLLM installed, the error that says how to install it."""

import math
from types import SimpleNamespace

import pytest

from nemo_lead.generation import EngineConfig, SamplingParams, check_engine_layout, resolve_engine_kind
from nemo_lead.generation.engine_config import VllmConfig
from nemo_lead.generation.streams import sample_seed
from nemo_lead.generation.vllm_params import (
    CPU_DEFAULT_KV_GIB,
    GIB,
    VllmVersionError,
    check_cpu_head_size,
    check_version,
    llm_kwargs,
    rollouts_from_outputs,
    unsupported,
    vllm_requests,
)
from nemo_lead.plan.engine_kinds import replica_layout as vllm_layout


def test_one_request_per_sample_seeded_by_global_sample_index():
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, top_k=5, max_tokens=11, stop_token_ids=[0, 4], seed=42)
    reqs = vllm_requests(params, first_prompt_index=2, num_prompts=2)
    assert len(reqs) == 6
    # prompt 2 sample 0 is global sample 2 * 3 + 0 = 6; the last is prompt 3 sample 2 = 11
    assert [r["seed"] for r in reqs] == [sample_seed(42, i) for i in range(6, 12)]
    r = reqs[0]
    assert (r["n"], r["max_tokens"], r["stop_token_ids"], r["ignore_eos"], r["logprobs"], r["detokenize"]) == (
        1, 11, [0, 4], True, 0, False)
    assert (r["temperature"], r["top_p"], r["top_k"], r["min_p"]) == (0.7, 0.9, 5, 0.0)
    # a replica's share with prompt_offset keeps the whole call's streams
    whole = vllm_requests(params, 0, 4)
    assert [q["seed"] for q in whole[6:]] == [q["seed"] for q in reqs]


def test_per_prompt_seeds_name_each_sample_by_its_prompts_seed_and_index():
    """Evaluation's streams: sample s of prompt i is sample_seed(prompt_seeds[i], first_sample + s), whatever
    the call's seed, offset or other prompts; a first sample needs per-prompt seeds."""
    params = SamplingParams(n=2, temperature=0.6, seed=42)
    reqs = vllm_requests(params, 5, 2, prompt_seeds=[70, 80], first_sample=3)
    assert [r["seed"] for r in reqs] == [sample_seed(70, 3), sample_seed(70, 4), sample_seed(80, 3), sample_seed(80, 4)]
    assert vllm_requests(SamplingParams(n=1, temperature=0.6, seed=1), 0, 1, prompt_seeds=[80],
                         first_sample=4)[0]["seed"] == reqs[3]["seed"]
    with pytest.raises(ValueError, match="needs prompt_seeds"):
        vllm_requests(params, 0, 1, first_sample=1)
    with pytest.raises(ValueError, match="1 seeds for 2 prompts"):
        vllm_requests(params, 0, 2, prompt_seeds=[1])


def test_greedy_is_temperature_zero_and_unseeded_calls_use_the_base():
    reqs = vllm_requests(SamplingParams(n=2, temperature=0, max_tokens=3), 0, 1, base_seed=9)
    assert [r["temperature"] for r in reqs] == [0, 0] and "top_p" not in reqs[0]
    assert [r["seed"] for r in reqs] == [sample_seed(9, 0), sample_seed(9, 1)]


def test_refuses_what_vllm_would_sample_differently():
    assert unsupported(SamplingParams(temperature=1.0, min_p=0.1)) == []  # min-p alone: the same distribution
    assert unsupported(SamplingParams(temperature=1.0, top_p=0.9, top_k=4)) == []
    both = unsupported(SamplingParams(temperature=1.0, min_p=0.1, top_p=0.9))
    assert len(both) == 1 and "min-p before top-k / top-p" in both[0]
    assert "greedy" in unsupported(SamplingParams(temperature=1e-6))[0]
    with pytest.raises(ValueError, match="'vllm' engine cannot honour"):
        vllm_requests(SamplingParams(temperature=1.0, min_p=0.1, top_k=3), 0, 1)


def _lp(value):
    return SimpleNamespace(logprob=value, rank=1, decoded_token=None)


def _out(tokens, values, finish="stop"):
    c = SimpleNamespace(token_ids=tokens, logprobs=[{t: _lp(v), 99: _lp(-9.0)} for t, v in zip(tokens, values)],
                        finish_reason=finish, stop_reason=tokens[-1] if finish == "stop" else None)
    return SimpleNamespace(outputs=[c])


def test_outputs_to_rollouts_by_sampling_mode():
    plain = SamplingParams(n=2, temperature=0.8, max_tokens=3, stop_token_ids=[0])
    rs = rollouts_from_outputs([_out([5, 0], [-1.0, -2.0]), _out([6, 7, 8], [-0.5, -0.25, -3.0], "length")], plain)
    assert [(r.prompt_index, r.sample_index, r.token_ids, r.finish_reason) for r in rs] == [
        (0, 0, [5, 0], "stop"), (0, 1, [6, 7, 8], "length")]
    assert rs[0].logprobs == rs[0].policy_logprobs == [-1.0, -2.0]  # no truncation: both are log softmax(z / T)
    truncated = SamplingParams(n=1, temperature=0.8, top_p=0.9, max_tokens=3, stop_token_ids=[0])
    (r,) = rollouts_from_outputs([_out([5, 0], [-1.0, -2.0])], truncated)
    assert r.logprobs == [-1.0, -2.0] and all(math.isnan(x) for x in r.policy_logprobs)
    greedy = SamplingParams(n=1, temperature=0, max_tokens=3, stop_token_ids=[0])
    (r,) = rollouts_from_outputs([_out([5, 0], [-1.0, -2.0])], greedy)
    assert r.logprobs == [0.0, 0.0] and r.policy_logprobs == [-1.0, -2.0]


def test_outputs_are_checked():
    params = SamplingParams(n=1, temperature=0.8, max_tokens=3, stop_token_ids=[0])
    with pytest.raises(ValueError, match="do not hold the sampled token 5"):
        bad = _out([5, 0], [-1.0, -2.0])
        bad.outputs[0].logprobs[0] = {99: _lp(-1.0)}
        rollouts_from_outputs([bad], params)
    with pytest.raises(ValueError, match="log-prob 0.5"):
        rollouts_from_outputs([_out([5, 0], [0.5, -2.0])], params)
    with pytest.raises(ValueError, match="2 log-probs for 3 tokens"):
        short = _out([5, 6, 0], [-1.0, -1.0, -1.0])
        short.outputs[0].logprobs.pop()
        rollouts_from_outputs([short], params)
    with pytest.raises(ValueError, match="without one of the stop tokens"):
        rollouts_from_outputs([_out([5, 6], [-1.0, -1.0])], params)
    with pytest.raises(ValueError, match="unfinished sample"):
        rollouts_from_outputs([_out([5, 6], [-1.0, -1.0], finish=None)], params)
    with pytest.raises(ValueError, match="not a multiple of n = 2"):
        rollouts_from_outputs([_out([0], [-1.0])], SamplingParams(n=2, temperature=1.0, stop_token_ids=[0]))


def test_llm_arguments():
    common = dict(model="/m", dtype="float32", tp=2, max_num_seqs=64, max_model_len=None, kv_cache_gib=None,
                  gpu_memory_utilization=0.5, enforce_eager=None, extra={})
    cpu = llm_kwargs(external_launcher=True, cuda=False, **common)
    assert (cpu["load_format"], cpu["skip_tokenizer_init"], cpu["logprobs_mode"], cpu["generation_config"]) == (
        "dummy", True, "processed_logprobs", "vllm")
    assert cpu["distributed_executor_backend"] == "external_launcher" and cpu["tensor_parallel_size"] == 2
    assert cpu["enforce_eager"] is True and "enable_sleep_mode" not in cpu  # no compile, no sleep mode on CPU
    assert cpu["kv_cache_memory_bytes"] == int(CPU_DEFAULT_KV_GIB * GIB)
    assert cpu["enable_chunked_prefill"] is False  # a split prompt rewinds a CPU generator vLLM cannot rewind
    gpu = llm_kwargs(external_launcher=False, cuda=True, **{**common, "kv_cache_gib": 1.5, "max_model_len": 4096})
    assert gpu["enforce_eager"] is False and gpu["enable_sleep_mode"] is True
    assert gpu["kv_cache_memory_bytes"] == int(1.5 * 2**30) and gpu["max_model_len"] == 4096
    assert "distributed_executor_backend" not in gpu and "enable_chunked_prefill" not in gpu
    assert "kv_cache_memory_bytes" not in llm_kwargs(external_launcher=False, cuda=True, **common)
    with pytest.raises(ValueError, match=r"may not set \['logprobs_mode', 'seed'\]"):
        llm_kwargs(external_launcher=False, cuda=False, **{**common, "extra": {"seed": 1, "logprobs_mode": "raw_logprobs"}})
    assert llm_kwargs(external_launcher=False, cuda=False, **{**common, "extra": {"enable_chunked_prefill": False}})[
        "enable_chunked_prefill"] is False


def test_versions_and_cpu_head_sizes():
    check_version("0.32.0")
    check_version("0.32.4+cpu")
    for bad in ("0.31.9", "0.33.0", "0.33.0rc1", "dev"):
        with pytest.raises(VllmVersionError):
            check_version(bad)
    check_cpu_head_size(64)
    with pytest.raises(ValueError, match="head sizes .* this model's is 16"):
        check_cpu_head_size(16)


def test_config_keys_and_layouts():
    with pytest.raises(ValueError, match="engine.vllm.gpu_memory_utilization"):
        VllmConfig(gpu_memory_utilization=1.0)
    with pytest.raises(ValueError, match="engine.vllm.sleep_level must be 1, 2 or null"):
        VllmConfig(sleep_level=3)
    with pytest.raises(ValueError, match="engine.kind must be one of megatron, vllm, trtllm, auto"):
        EngineConfig(kind="vlm")
    vllm = EngineConfig(kind="vllm")
    assert vllm_layout(vllm, tp=4, pp=1) == 4
    assert vllm_layout(EngineConfig(kind="vllm", tp="2"), tp=4, pp=2) == 2
    with pytest.raises(ValueError, match="engine.tp must divide actor.tp"):
        vllm_layout(EngineConfig(kind="vllm", tp="3"), tp=4, pp=1)
    with pytest.raises(ValueError, match=r"engine.pp=2 with engine.kind=vllm .*\(an engine PP of its own is not supported\)"):
        check_engine_layout(EngineConfig(kind="vllm", pp="2"), tp=2, pp=2)
    with pytest.raises(ValueError, match="engine.pp=actor with engine.kind=vllm over actor.pp=2"):
        check_engine_layout(EngineConfig(kind="vllm", pp="actor"), tp=2, pp=2)
    check_engine_layout(EngineConfig(kind="vllm", tp="1", pp="1"), tp=2, pp=2)  # rl: TP1 replicas over TP2 x PP2
    with pytest.raises(ValueError, match="here the engine runs at the model's layout, one stage"):
        check_engine_layout(EngineConfig(kind="vllm", tp="1"), tp=2, pp=1, prefix="", own_layout=False)
    # auto keys become the one layout vLLM takes; engine.kind=auto without a GPU is the megatron engine
    resolved = resolve_engine_kind(vllm)
    assert (resolved.tp, resolved.pp) == ("actor", "1")
    assert resolve_engine_kind(EngineConfig(kind="megatron")) == EngineConfig(kind="megatron")


def test_auto_kind_without_a_gpu_is_megatron(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("RANK", "0")
    assert resolve_engine_kind(EngineConfig(kind="auto")).kind == "megatron"
    assert "engine.kind=auto: megatron (no GPU here)" in capsys.readouterr().out


def test_rollout_correction_with_truncation_is_refused_for_vllm():
    from nemo_lead.algorithms import LeadConfig
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.rl.config import RLConfig, RLDataConfig, RolloutConfig

    lead = LeadConfig.paper()
    lead.rollout_correction.mode = "tis"
    with pytest.raises(ValueError, match="engine.kind=vllm cannot report with rollout.top_p < 1"):
        RLConfig(actor=ActorConfig(model="tiny-qwen2"), data=RLDataConfig(path="p.jsonl"), out="run", steps=2,
                 engine=EngineConfig(kind="vllm"), rollout=RolloutConfig(top_p=0.9), lead=lead)


def test_without_vllm_the_error_says_how_to_install_it():
    from nemo_lead.generation.vllm_engine import VllmUnavailable, import_vllm, vllm_importable

    if vllm_importable():
        pytest.skip("vLLM is installed in this leg")
    with pytest.raises(VllmUnavailable, match=r"pip install 'nemo-lead\[vllm\]'.*setup_venv.sh vllm"):
        import_vllm()
