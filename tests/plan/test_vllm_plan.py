"""engine.kind=vllm in the plan: its memory (its own weights at engine TP b, its whole KV pool, its CUDA graphs,
asleep during the update with its weights on the host), its decode at the assumed fraction of the bandwidth
bound, its refit through the host, numbers computed by hand; `nemo-lead plan RECIPE engine.kind=vllm` over
every generating stage, the assumption named in the text and the JSON."""

import json

import pytest
from test_engine_auto import HF14B, R14B  # the 14B RL stage at TP8 (its 28 GiB KV budget overridden below)

from nemo_lead.cli import main
from nemo_lead.config.loading import load_config
from nemo_lead.plan.engine_kinds import VLLM_DECODE_BANDWIDTH_FRACTION, VLLM_GRAPH_GIB
from nemo_lead.plan.job import GIB, job_shape, plan_job
from nemo_lead.plan.parameters import parameter_count
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import generation_seconds, gpu_named
from nemo_lead.plan.timing import reload_refit_seconds as vllm_refit_seconds
from nemo_lead.training.rl.config import RLConfig

H100 = gpu_named("h100")


def _plan(*extra):
    cfg = load_config(RLConfig, [], [*R14B, *extra])
    s = job_shape(cfg, "rl", HF14B, gpus=8, settings=PlanSettings(), gpu=H100)
    return s, plan_job(s, H100)


def test_the_assumed_fraction_is_the_published_figure():
    # Llama-3.1-8B, 8.03e9 parameters in fp16 over 3.35 TB/s = 4.794 ms a step; measured TPOT 6.48 ms
    assert VLLM_DECODE_BANDWIDTH_FRACTION == pytest.approx(8.03e9 * 2 / 3.35e12 / 6.48e-3, rel=1e-3)


def test_vllm_memory_by_hand():
    s, plan = _plan("engine.kind=vllm", "engine.kv_cache_gib=40")
    assert (s.engine, s.engine_tp1, s.engine_layout) == ("vllm", True, (8, 1, 1))
    gen, upd = plan.phases["generation"], plan.phases["update"]
    # vLLM's weights at TP8: every parameter (vocabulary tables included) split 8 ways, bf16
    assert gen["engine_copy"] == pytest.approx(parameter_count(s.arch, s.vocab_divisible_by) * 2 / 8, rel=1e-3)
    assert gen["kv_cache"] == 40 * GIB  # the pool is allocated whole
    assert gen["cuda_graphs"] == int(VLLM_GRAPH_GIB * GIB)
    assert "engine_copy" not in upd and "kv_cache" not in upd  # asleep during the update
    # host: the pinned optimizer copies and, at sleep level 1, vLLM's weights, of the 8 ranks of the node
    assert plan.host_bytes_per_node == 8 * (upd["optimizer"] + gen["engine_copy"])


def test_vllm_pool_from_the_memory_fraction():
    s, plan = _plan("engine.kind=vllm", "engine.kv_cache_gib=null", "engine.vllm.gpu_memory_utilization=0.8")
    gen = plan.phases["generation"]
    memory = int(H100.memory_gib * GIB)
    # the pool is what 0.8 of the GPU leaves after vLLM's weights, graphs and decode temporaries (those of the
    # unbounded batch: the pool is sized before the rows it holds are known, so it errs low)
    vllm_total = gen["kv_cache"] + gen["engine_copy"] + gen["cuda_graphs"] + gen["activations"] + gen["logits"]
    assert 0.8 * memory - 2 * GIB < vllm_total <= 0.8 * memory


def test_vllm_time_by_hand():
    s, plan = _plan("engine.kind=vllm", "engine.kv_cache_gib=40", "plan.mean_response_tokens=9081")
    gen = plan.phases["generation"]
    copy = gen["engine_copy"]
    model = parameter_count(s.arch, s.vocab_divisible_by) * 2
    from nemo_lead.plan.engine_memory import kv_slot_bytes

    expected_gen = generation_seconds(s.arch, H100, tp=8, pp=1, weight_bytes=copy, slot_bytes=kv_slot_bytes(s.arch, tp=8, pp=1, e=2),
                                      rows=plan.engine_rows, prompts=32, n=8, prompt_tokens=s.prompt_tokens,
                                      max_tokens=14336, mean_tokens=s.mean_response_tokens, cuda_graphs=True,
                                      engine="vllm")
    assert plan.time.generation == pytest.approx(expected_gen)
    # refit: the model over NVLink (7/8 of it), to the host and the shard back, sleep level 1 out and back,
    # plus the optimizer state's offload both ways
    link = model * 7 / 8 / 450e9
    host = (model + copy + 2 * copy) / 64e9
    assert vllm_refit_seconds(H100, model, copy, 8) == pytest.approx(link + host, rel=1e-6)
    offload = 2 * plan.phases["update"]["optimizer"] / 64e9
    assert plan.time.refit == pytest.approx(link + host + offload, rel=1e-3)


def test_vllm_engine_pp_and_tp_rules_in_the_shape():
    s, _ = _plan("engine.kind=vllm", "engine.tp=2", "engine.kv_cache_gib=40")
    assert s.engine_layout == (2, 1, 4)  # four TP2 replicas over the TP8 actor


def test_plan_of_a_recipe_with_vllm_names_the_assumption(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = main(["plan", "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100",
               "paths.base_model=r1-distill-qwen-14b", "engine.kind=vllm", "engine.kv_cache_gib=40", "--fastest", "2",
               "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "engine.kind=vllm" in text and "assumed, not measured by this project" in text
    p = json.loads(out.read_text())
    assert p["efficiencies"]["decode_fraction_of_bandwidth"] == VLLM_DECODE_BANDWIDTH_FRACTION
    assert p["efficiencies"]["decode_source"].startswith("assumed, not measured by this project")
    assert p["per_gpu_bytes"]["generation"]["kv_cache"] == 40 * GIB
    assert p["step_seconds"]["total"] > 0 and p["ranking"]["fitting"] >= 1
    assert main(["plan", "lead-14b", "--gpus", "8", "--gpu", "h100", "paths.base_model=r1-distill-qwen-14b",
                 "engine.kind=vlm"]) == 2
    assert "engine.kind must be one of megatron, vllm, trtllm, auto" in capsys.readouterr().err


def test_an_eval_stage_resolves_auto_before_it_starts(capsys, monkeypatch):
    """`nemo-lead eval` with engine.kind=auto: megatron without a GPU; on a GPU with vLLM installed (both said so
    here), the plan's faster that fits, its pool lowered under engine.kv_cache_gib when the cap does not fit,
    printed once with both engines' times."""
    import nemo_lead.plan.check as check
    from nemo_lead.eval.config import EvalConfig
    from nemo_lead.plan.check import resolve_stage_engine_kind

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    base = ["model=r1-distill-qwen-14b", "tp=4", "engine.kind=auto", "engine.kv_cache_gib=75"]
    cfg = load_config(EvalConfig, [], base)
    asked: list[int] = []

    def problems():
        asked.append(1)
        return (30, 30)

    monkeypatch.setattr(check.torch.cuda, "is_available", lambda: False)
    assert resolve_stage_engine_kind(cfg, problems).engine.kind == "megatron" and asked == []
    assert "engine.kind=auto -> megatron (no GPU here)" in capsys.readouterr().err
    monkeypatch.setattr(check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(check.importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    monkeypatch.setattr(check, "device_gpu", lambda settings: (gpu_named("h100"), 79.2))
    chosen = resolve_stage_engine_kind(cfg, problems)
    err = capsys.readouterr().err
    assert chosen.engine.kind == "vllm" and asked == [1] and cfg.engine.kind == "auto"  # a copy; cfg as it was
    assert "engine.kind=auto -> vllm (the plan's faster that fits on this GPU: vllm " in err and ", megatron " in err
    # two copies of the 14B weights at TP4 (6.9 GiB each), graphs and temporaries leave < 75 GiB of 76.2 usable
    assert chosen.engine.kv_cache_gib < 75 and f"its KV pool {chosen.engine.kv_cache_gib} GiB, the largest under" in err
    assert chosen.engine.kv_cache_gib > 55
