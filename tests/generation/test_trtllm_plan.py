"""The TensorRT-LLM engine's CPU-testable parts: weight buckets and the refit check on the real export
stream (whose HF-named tensors, loaded into transformers, reproduce the Megatron model's logits), the exact
RPC sequence of a refit, sampling parameter translation and refusals, output and log-prob translation,
GPU placement and its check, LLM arguments, the version range, and the one error where TensorRT-LLM is
missing. TensorRT-LLM's objects are faked with their real shapes (RequestOutput.outputs[i] with token_ids,
logprobs as {token: Logprob(logprob, rank)}, finish_reason, stop_reason)."""

import math
import sys
from collections import namedtuple
from types import ModuleType, SimpleNamespace

import pytest
import torch
from distributed import run_distributed

from nemo_lead.generation import EngineConfig, SamplingParams, build_engine
from nemo_lead.generation.engine import RefitChecker
from nemo_lead.generation.engine_config import TrtllmConfig
from nemo_lead.generation.streams import sample_seed
from nemo_lead.generation.trtllm_engine import TrtllmUnavailable, import_trtllm
from nemo_lead.generation.trtllm_params import (
    TrtllmVersionError,
    check_llm_fields,
    check_version,
    check_worker_devices,
    issue_refit,
    llm_kwargs,
    physical_gpu,
    placement_env,
    rollouts_from_outputs,
    trtllm_requests,
    weight_buckets,
)
from nemo_lead.models import model_info, write_tiny_model


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
    checker = RefitChecker(hf_shapes(model_info(model).arch))
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


def test_refit_issues_one_update_per_bucket_then_always_the_finalize_call():
    shapes = {"a": (2,), "b": (3,), "c": (1,)}
    buckets = [[("a", torch.zeros(2)), ("b", torch.zeros(3))], [("c", torch.zeros(1))]]
    calls = []
    n = issue_refit(lambda m, args: calls.append((m, args)), "GPU-1", iter(buckets), RefitChecker(shapes),
                    pack=lambda bucket: [name for name, _ in bucket])
    assert n == 3 and calls == [("update_weights", ({"GPU-1": ["a", "b"]},)),
                                ("update_weights", ({"GPU-1": ["c"]},)),
                                ("update_weights", (None,))]


def test_refit_sends_no_finalize_after_a_bad_or_incomplete_stream():
    shapes = {"a": (2,), "b": (3,)}
    calls = []

    def refit(buckets):
        return issue_refit(lambda m, args: calls.append(args), "GPU-1", iter(buckets), RefitChecker(shapes),
                           pack=lambda bucket: len(bucket))

    with pytest.raises(ValueError, match="without 1 tensors"):
        refit([[("a", torch.zeros(2))]])
    with pytest.raises(ValueError, match="b has shape"):
        refit([[("a", torch.zeros(2))], [("b", torch.zeros(4))]])
    with pytest.raises(ValueError, match="empty"):
        issue_refit(lambda m, args: calls.append(args), "GPU-1", iter([]), RefitChecker({}), pack=len)
    assert (None,) not in calls and calls == [({"GPU-1": 1},), ({"GPU-1": 1},)]  # the two good buckets only


def test_temperature_only_sampling_asks_for_the_sampled_tokens_logprob_one_request_per_sample():
    params = SamplingParams(n=3, temperature=0.8, max_tokens=7, stop_token_ids=[0, 5], seed=1234)
    reqs = trtllm_requests(params, first_prompt_index=0, num_prompts=4)
    assert len(reqs) == 12 and all(r["n"] == 1 for r in reqs)
    r = reqs[0]
    assert (r["temperature"], r["top_k"], r["top_p"], r["logprobs"]) == (0.8, 0, 1.0, 1)  # top_p set: unset = greedy
    assert r["stop_token_ids"] == [0, 5] and r["ignore_eos"] and r["include_stop_str_in_output"] and not r["detokenize"]
    assert len({q["seed"] for q in reqs}) == 12 and all(0 <= q["seed"] < 2**63 for q in reqs)
    # a sample's seed depends on (seed, prompt, sample) only, not on how the prompts were split over ranks
    assert trtllm_requests(params, first_prompt_index=2, num_prompts=2) == reqs[6:]
    assert trtllm_requests(SamplingParams(n=3, temperature=0.8, seed=1235), 0, 1)[0]["seed"] != r["seed"]


def test_per_prompt_seeds_follow_the_prompts_seed_and_the_sample_index():
    params = SamplingParams(n=2, temperature=0.8, seed=1234)
    reqs = trtllm_requests(params, 3, 2, prompt_seeds=[5, 6], first_sample=1)
    assert [r["seed"] for r in reqs] == [sample_seed(5, 1), sample_seed(5, 2), sample_seed(6, 1), sample_seed(6, 2)]


def test_greedy_truncated_and_unseeded_requests():
    greedy = trtllm_requests(SamplingParams(temperature=0, stop_token_ids=[2]), 0, 1)[0]
    assert (greedy["top_k"], greedy["temperature"], greedy["logprobs"]) == (1, 1.0, None)
    nucleus = trtllm_requests(SamplingParams(n=2, temperature=0.6, top_p=0.95, top_k=20), 0, 1)
    assert [(q["top_p"], q["top_k"], q["logprobs"]) for q in nucleus] == [(0.95, 20, None)] * 2
    unseeded = SamplingParams(n=4, temperature=1.0)
    assert trtllm_requests(unseeded, 0, 2, base_seed=7) == trtllm_requests(unseeded, 0, 2, base_seed=7)
    assert len({q["seed"] for q in trtllm_requests(unseeded, 0, 2) + trtllm_requests(unseeded, 0, 2)}) == 16


def test_parameters_the_engine_cannot_honour_are_refused():
    with pytest.raises(ValueError, match="min_p=0.05.*does not apply min-p"):
        trtllm_requests(SamplingParams(temperature=0.6, min_p=0.05), 0, 1)


def test_sample_seeds_are_distinct_and_63_bit():
    from nemo_lead.generation.streams import sample_seed

    seeds = {sample_seed(s, i) for s in range(50) for i in range(50)}
    assert len(seeds) == 2500 and all(0 <= x < 2**63 for x in seeds)


Logprob = namedtuple("Logprob", ["logprob", "rank"])  # tensorrt_llm.executor.result.Logprob


def _request(tokens, logprobs, reason, stop_reason=None, index=0):
    completion = SimpleNamespace(index=index, token_ids=tokens, logprobs=logprobs, finish_reason=reason,
                                 stop_reason=stop_reason, cumulative_logprob=None)
    return SimpleNamespace(request_id=0, prompt_token_ids=[1], outputs=[completion], finished=True)


def _lp(token, value):
    return {token: Logprob(value, 1)}


def test_outputs_become_rollouts_with_exact_logprobs():
    params = SamplingParams(n=2, temperature=0.8, max_tokens=3, stop_token_ids=[0])
    outputs = [_request([7, 8, 9], [_lp(7, -1.0), _lp(8, -2.0), _lp(9, -3.0)], "length"),
               _request([4, 0], [-0.5, -0.1], "stop", stop_reason=0),  # the float form is accepted too
               _request([3, 0], [_lp(3, -0.7), _lp(0, -0.2)], "stop", stop_reason=0),
               _request([2, 2, 2], [_lp(2, -0.2)] * 3, "length")]
    rollouts = rollouts_from_outputs(outputs, params, first_prompt_index=4)
    assert [(r.prompt_index, r.sample_index) for r in rollouts] == [(4, 0), (4, 1), (5, 0), (5, 1)]
    assert rollouts[0].token_ids == [7, 8, 9] and rollouts[0].logprobs == [-1.0, -2.0, -3.0]
    assert all(r.policy_logprobs == r.logprobs for r in rollouts)  # temperature only: the same distribution
    assert rollouts[1].token_ids == [4, 0] and rollouts[1].finish_reason == "stop"


@pytest.mark.parametrize("logprobs, match", [
    ([_lp(7, -1.0), {8: Logprob(-0.1, 1)}], "not the sampled token 9"),  # top-k of another sampler
    ([_lp(7, -1.0), _lp(9, math.nan)], "log-prob nan"),
    ([_lp(7, -1.0), _lp(9, -math.inf)], "log-prob -inf"),
    ([_lp(7, -1.0), _lp(9, 0.3)], "log-prob 0.3"),
    ([_lp(7, -1.0)], "1 log-probs for 2 tokens"),
    (None, "0 log-probs for 2 tokens"),
])
def test_bad_logprobs_raise_instead_of_reaching_metrics(logprobs, match):
    with pytest.raises(ValueError, match=match):
        rollouts_from_outputs([_request([7, 9], logprobs, "length")], SamplingParams(temperature=1.0))


def test_outputs_without_logprobs_and_malformed_outputs():
    stripped = [_request([3], None, "stop", stop_reason=0)]  # a release that drops the stop token
    nucleus = rollouts_from_outputs(stripped, SamplingParams(temperature=1.0, top_p=0.9, stop_token_ids=[0]))
    assert nucleus[0].token_ids == [3, 0] and all(math.isnan(x) for x in nucleus[0].logprobs + nucleus[0].policy_logprobs)
    greedy = rollouts_from_outputs([_request([3, 4], None, "length")], SamplingParams(temperature=0))
    assert greedy[0].logprobs == [0.0, 0.0] and all(math.isnan(x) for x in greedy[0].policy_logprobs)
    with pytest.raises(ValueError, match="dropped the stop token 0"):
        rollouts_from_outputs([_request([3], [_lp(3, -1.0)], "stop", stop_reason=0)],
                              SamplingParams(temperature=1.0, stop_token_ids=[0]))
    with pytest.raises(ValueError, match="not a multiple of n = 2"):
        rollouts_from_outputs(stripped, SamplingParams(n=2, temperature=0))
    two = _request([1], None, "length")
    two.outputs.append(two.outputs[0])
    with pytest.raises(ValueError, match="2 completions for one request"):
        rollouts_from_outputs([two], SamplingParams(temperature=0))
    with pytest.raises(ValueError, match="unfinished"):
        rollouts_from_outputs([_request([1], None, None)], SamplingParams(temperature=0))


def test_each_rank_pins_its_own_gpu():
    assert physical_gpu(None, 3) == "3" and physical_gpu("", 0) == "0"
    assert physical_gpu("4,5,6,7", 1) == "5"
    assert placement_env("2,3", 1) == {"CUDA_VISIBLE_DEVICES": "3", "TLLM_RAY_FORCE_LOCAL_CLUSTER": "1"}
    with pytest.raises(ValueError, match="integer CUDA_VISIBLE_DEVICES"):
        physical_gpu("GPU-8c3f0000-aaaa,GPU-9d", 0)
    with pytest.raises(ValueError, match="cuda:2 is not among"):
        physical_gpu("0,1", 2)


def test_worker_device_check():
    check_worker_devices(["GPU-aaa"], "GPU-aaa", rank=3)
    with pytest.raises(RuntimeError, match=r"rank 1: .*worker runs on \['GPU-bbb'\], this rank's GPU is GPU-aaa.*RAY_ADDRESS"):
        check_worker_devices(["GPU-bbb"], "GPU-aaa", rank=1)
    with pytest.raises(RuntimeError, match="worker runs on"):
        check_worker_devices(["GPU-aaa", "GPU-aaa"], "GPU-aaa", rank=0)


def test_llm_kwargs():
    kw = llm_kwargs(dtype="bfloat16", max_batch_size=64, max_seq_len=9000, kv_cache_fraction=0.4,
                    extra={"max_num_tokens": 8192})
    assert kw == dict(backend="pytorch", orchestrator_type="ray",
                      ray_worker_extension_cls="tensorrt_llm.llmapi.rlhf_utils.WorkerExtension",
                      sampler_type="TRTLLMSampler", enable_sleep=True, tensor_parallel_size=1, dtype="bfloat16",
                      load_format="dummy", max_batch_size=64, max_seq_len=9000, max_num_tokens=8192,
                      kv_cache_config={"free_gpu_memory_fraction": 0.4, "enable_block_reuse": False})
    for key in ("sampler_type", "kv_cache_config", "placement_groups", "enable_sleep"):
        with pytest.raises(ValueError, match=f"may not set \\['{key}'\\]"):
            llm_kwargs(dtype="float16", max_batch_size=1, max_seq_len=None, kv_cache_fraction=0.5, extra={key: 1})


def test_version_range():
    for ok in ("1.2.0", "1.2.1", "1.2.1.post1"):
        check_version(ok)
    for bad in ("1.2.0rc6", "1.1.0", "1.3.0rc1", "1.3.0", "2.0.0"):
        with pytest.raises(TrtllmVersionError, match=f">= 1.2.0, < 1.3.0; this is {bad}"):
            check_version(bad)
    with pytest.raises(TrtllmVersionError, match="cannot read"):
        check_version("unknown")
    check_llm_fields({"orchestrator_type", "ray_worker_extension_cls", "sampler_type", "enable_sleep", "load_format"})
    with pytest.raises(TrtllmVersionError, match=r"lack \['sampler_type', 'enable_sleep'\]"):
        check_llm_fields({"orchestrator_type", "ray_worker_extension_cls", "load_format", "sleep_config"})


def test_import_refuses_an_unsupported_release(monkeypatch):
    fake = ModuleType("tensorrt_llm")
    fake.__version__ = "1.3.0"
    monkeypatch.setitem(sys.modules, "tensorrt_llm", fake)
    with pytest.raises(TrtllmVersionError, match="this is 1.3.0"):
        import_trtllm()
    fake.__version__ = "1.2.1"
    assert import_trtllm() is fake


def test_asking_for_trtllm_without_it_gives_one_clear_error():
    cfg = EngineConfig(kind="trtllm", trtllm=TrtllmConfig(hf_dir="/nonexistent"))
    with pytest.raises(TrtllmUnavailable, match=r"containers/Dockerfile.*nemo-lead\[trtllm\]"):
        build_engine(cfg, actor=None)
    with pytest.raises(ValueError, match="engine.kind must be one of megatron, vllm, trtllm, auto"):
        EngineConfig(kind="tensorrt")
    with pytest.raises(ValueError, match="trtllm.kv_cache_fraction"):
        TrtllmConfig(kv_cache_fraction=1.5)
