"""The TensorRT-LLM engine's CPU-testable parts: weight buckets and the refit check on the real export
stream (whose HF-named tensors, loaded into transformers, reproduce the Megatron model's logits), sampling
parameter and output translation, LLM arguments, and the one error where TensorRT-LLM is missing."""

import math
from types import SimpleNamespace

import pytest
import torch
from distributed import run_distributed

from nemo_lead.generation import EngineConfig, SamplingParams, build_engine
from nemo_lead.generation.engine import TrtllmConfig
from nemo_lead.generation.trtllm_engine import TrtllmUnavailable
from nemo_lead.generation.trtllm_plan import (
    RefitChecker,
    llm_kwargs,
    prompt_seed,
    rollouts_from_outputs,
    trtllm_sampling_kwargs,
    weight_buckets,
)
from nemo_lead.models import write_tiny_model


def test_weight_buckets_bound_bytes_and_keep_order():
    stream = [(f"t{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5, 5, 5])]  # float32: 4 bytes each
    buckets = list(weight_buckets(iter(stream), max_bytes=80))
    assert [[n for n, _ in b] for b in buckets] == [["t0", "t1"], ["t2"], ["t3", "t4", "t5"]]  # t2 (120 B) alone
    assert [n for b in buckets for n, _ in b] == [n for n, _ in stream]
    with pytest.raises(ValueError, match="max_bytes"):
        list(weight_buckets(iter(stream), 0))


def _export_job(hf_dir):
    from nemo_lead.models import build_gpt, export_hf_weights, forward_logits, hf_shapes, load_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel

    info = init_parallel(2, 1)
    model = build_gpt(hf_dir, info, "fp32", init=False)
    load_hf_weights(model, hf_dir)
    with torch.no_grad():  # a "training step": the stream must carry the new weights, not the folder's
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    checker = RefitChecker(hf_shapes(model.arch))
    received = {}
    sizes = []
    for bucket in weight_buckets(export_hf_weights(model), max_bytes=64 * 1024):
        sizes.append(sum(t.numel() * t.element_size() for _, t in bucket))
        for name, t in bucket:
            checker.check(name, t)
            received[name] = t.clone()
    checker.finish()
    ids = torch.tensor([[3, 9, 27, 81, 40, 20, 10, 5]])
    logits = forward_logits(model, ids)
    destroy_parallel()
    return received, sizes, logits


def test_refit_stream_is_complete_bounded_and_reproduces_the_model(tmp_path):
    import transformers

    hf_dir = str(write_tiny_model(tmp_path / "q", "qwen2", seed=2, init_std=0.1))
    received, sizes, logits = run_distributed(_export_job, 2, hf_dir)[1]  # TP rank 1 receives everything too
    assert len(sizes) > 1 and max(sizes) <= 64 * 1024  # no tiny tensor exceeds a bucket on its own
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    missing, unexpected = hf.load_state_dict(received, strict=False)
    assert unexpected == [] and [m for m in missing if "rotary" not in m] == []
    with torch.no_grad():
        ref = hf(torch.tensor([[3, 9, 27, 81, 40, 20, 10, 5]])).logits
    assert (ref - logits).abs().max() < 1e-5


def test_refit_checker_names_the_bad_tensor():
    shapes = {"a.weight": (2, 3), "b.weight": (4,)}
    checker = RefitChecker(shapes)
    checker.check("a.weight", torch.zeros(2, 3))
    with pytest.raises(ValueError, match="arrived twice"):
        checker.check("a.weight", torch.zeros(2, 3))
    with pytest.raises(ValueError, match="b.weight has shape"):
        checker.check("b.weight", torch.zeros(5))
    with pytest.raises(ValueError, match="'c.weight'"):
        checker.check("c.weight", torch.zeros(1))
    with pytest.raises(ValueError, match="without 1 tensors"):
        checker.finish()


def test_sampling_kwargs_translation():
    greedy = trtllm_sampling_kwargs(SamplingParams(temperature=0, max_tokens=7, stop_token_ids=[0, 5]), 0)
    assert greedy["top_k"] == 1 and greedy["max_tokens"] == 7 and greedy["stop_token_ids"] == [0, 5]
    assert greedy["ignore_eos"] and greedy["include_stop_str_in_output"] and greedy["logprobs"] == 1
    assert "seed" not in greedy and not greedy["detokenize"]
    params = SamplingParams(n=8, temperature=0.6, top_p=0.95, top_k=20, min_p=0.05, seed=1234)
    a, b = trtllm_sampling_kwargs(params, 0), trtllm_sampling_kwargs(params, 1)
    assert (a["n"], a["temperature"], a["top_p"], a["top_k"], a["min_p"]) == (8, 0.6, 0.95, 20, 0.05)
    assert a["seed"] != b["seed"] and a["seed"] == trtllm_sampling_kwargs(params, 0)["seed"]
    assert "min_p" not in trtllm_sampling_kwargs(SamplingParams(temperature=1.0), 0)


def test_prompt_seeds_are_distinct_and_63_bit():
    seeds = {prompt_seed(s, i) for s in range(50) for i in range(50)}
    assert len(seeds) == 2500 and all(0 <= x < 2**63 for x in seeds)


def _completion(index, tokens, logprobs, reason, stop_reason=None):
    return SimpleNamespace(index=index, token_ids=tokens, logprobs=logprobs, finish_reason=reason, stop_reason=stop_reason)


def test_outputs_become_rollouts():
    lp = SimpleNamespace  # TensorRT-LLM's Logprob(logprob=..., rank=...)
    outputs = [
        SimpleNamespace(outputs=[_completion(1, [4, 0], [-0.5, -0.1], "stop"),
                                 _completion(0, [7, 8, 9], [{7: lp(logprob=-1.0, rank=1)}, {8: lp(logprob=-2.0, rank=1)},
                                                            {9: lp(logprob=-3.0, rank=2)}], "length")]),
        SimpleNamespace(outputs=[_completion(0, [3], [-0.7], "stop", stop_reason=0),  # stop token stripped
                                 _completion(1, [2, 2], [-0.2, -0.3], "length")]),
    ]
    params = SamplingParams(n=2, temperature=1.0, max_tokens=3, stop_token_ids=[0])
    rollouts = rollouts_from_outputs(outputs, params, first_prompt_index=4)
    assert [(r.prompt_index, r.sample_index) for r in rollouts] == [(4, 0), (4, 1), (5, 0), (5, 1)]
    assert rollouts[0].token_ids == [7, 8, 9] and rollouts[0].logprobs == [-1.0, -2.0, -3.0]
    assert rollouts[0].policy_logprobs == rollouts[0].logprobs  # no truncation: the two coincide
    assert rollouts[2].token_ids == [3, 0] and rollouts[2].finish_reason == "stop" and math.isnan(rollouts[2].logprobs[1])
    truncated = rollouts_from_outputs(outputs, SamplingParams(n=2, temperature=1.0, top_p=0.9, stop_token_ids=[0]))
    assert truncated[1].logprobs == [-0.5, -0.1] and all(math.isnan(x) for x in truncated[1].policy_logprobs)
    greedy = rollouts_from_outputs(outputs, SamplingParams(n=2, temperature=0, stop_token_ids=[0]))
    assert greedy[0].logprobs == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="returned 2 samples, 3 were asked"):
        rollouts_from_outputs(outputs, SamplingParams(n=3))
    with pytest.raises(ValueError, match="unfinished"):
        rollouts_from_outputs([SimpleNamespace(outputs=[_completion(0, [1], [-1.0], None)])], SamplingParams())


def test_llm_kwargs_follow_the_installed_version():
    base = dict(dtype="bfloat16", max_batch_size=64, max_seq_len=9000, kv_cache_fraction=0.4, extra={"max_num_tokens": 8192})
    v12 = llm_kwargs({"orchestrator_type", "enable_sleep"}, **base)
    assert v12["orchestrator_type"] == "ray" and v12["enable_sleep"] is True and v12["load_format"] == "dummy"
    assert v12["ray_worker_extension_cls"] == "tensorrt_llm.llmapi.rlhf_utils.WorkerExtension"
    assert v12["kv_cache_config"] == {"free_gpu_memory_fraction": 0.4} and v12["max_num_tokens"] == 8192
    assert llm_kwargs({"orchestrator_type", "sleep_config"}, **base)["sleep_config"] == "default"
    with pytest.raises(RuntimeError, match=">= 1.2"):
        llm_kwargs({"enable_sleep"}, **base)


def test_asking_for_trtllm_without_it_gives_one_clear_error():
    cfg = EngineConfig(kind="trtllm", trtllm=TrtllmConfig(hf_dir="/nonexistent"))
    with pytest.raises(TrtllmUnavailable, match=r"containers/Dockerfile.*nemo-lead\[trtllm\]"):
        build_engine(cfg, actor=None)
    with pytest.raises(ValueError, match="kind must be one of megatron, trtllm"):
        EngineConfig(kind="vllm")
    with pytest.raises(ValueError, match="trtllm.kv_cache_fraction"):
        TrtllmConfig(kv_cache_fraction=1.5)
