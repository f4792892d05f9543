"""Rollout engine kinds: what the layers above an engine know of it is its entry in
`nemo_lead.plan.engine_kinds.ENGINE_KINDS`; neither the plan nor the configs branch on an engine's name, and
an engine registered alone is built, checked and planned from its entry's fields."""

import ast
import dataclasses
from pathlib import Path

import pytest
from test_engine_auto import HF14B, R14B  # the 14B RL stage at TP8

from nemo_lead.config.loading import load_config
from nemo_lead.generation import EngineConfig, build_engine, check_engine_layout
from nemo_lead.plan import engine_kinds
from nemo_lead.plan.job import GIB, job_shape, plan_job
from nemo_lead.plan.report import describe
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import gpu_named
from nemo_lead.training.rl.config import RLConfig

PACKAGE = Path(__file__).resolve().parents[2] / "nemo_lead"
H100 = gpu_named("h100")
# where engines are used, not defined: the plan, the configs and the layers above
USERS = ["plan", "pipeline", "launch", "eval", "training", "generation/engine_config.py", "generation/command.py"]


def _branches_on_an_engine_name(path: Path) -> list[int]:
    """Lines comparing something with an engine kind's name (`kind == "vllm"`, `engine in ("megatron", ...)`)."""
    names = set(engine_kinds.ENGINE_KINDS)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            literals = {c.value for x in (node.left, *node.comparators) for c in ast.walk(x) if isinstance(c, ast.Constant)}
            if literals & names:
                found.append(node.lineno)
    return found


def test_no_code_above_the_engines_branches_on_an_engine_name():
    files = [p for u in USERS for p in ([PACKAGE / u] if u.endswith(".py") else sorted((PACKAGE / u).rglob("*.py")))]
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in files if p.name != "engine_kinds.py"
             for line in _branches_on_an_engine_name(p)]
    assert len(files) > 40 and not found, "branches on an engine's name (put it on its ENGINE_KINDS entry):\n" + "\n".join(found)


def test_the_check_finds_such_a_branch(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("if s.engine == 'vllm':\n    pass\nif e.kind in ('trtllm', 'vllm'):\n    pass\nif k == 'auto':\n    pass\n")
    assert _branches_on_an_engine_name(f) == [1, 3]


def test_the_entries_are_consistent():
    assert engine_kinds.AUTO_NAMES == ("vllm", "megatron")  # the preferred first; the last when none fits
    for k in engine_kinds.ENGINE_KINDS.values():
        assert k.layout in engine_kinds.LAYOUTS and (k.layout != "fixed" or k.fixed_layout)
        assert (k.pool == "whole") == bool(k.memory_fraction)  # a pool allocated whole takes a share of the GPU
    with pytest.raises(ValueError, match="pool must be one of"):
        engine_kinds.EngineKind("x", "m:f", "", "copies", pool="lazy")


@pytest.fixture
def stand_in(monkeypatch):
    """An engine registered alone: replicas at one stage like vllm, a pool that grows like megatron's, its copy
    sharded whole, refreshed by gathering, timed at the megatron engine's figures, never chosen by auto."""
    built = []

    def build(cfg, actor, *, release_copy, weight_version):
        built.append((cfg.kind, cfg.tp, cfg.pp, actor, weight_version))
        return "an engine"

    kind = engine_kinds.EngineKind("standin", build, "a stand-in", "copies", copy_weights="sharded", refit="gather",
                                   library="Stand-in")
    monkeypatch.setitem(engine_kinds.ENGINE_KINDS, "standin", kind)
    return built


def test_a_registered_engine_is_built_and_checked_from_its_entry(stand_in):
    cfg = EngineConfig(kind="standin")
    assert build_engine(cfg, "the actor", weight_version=3) == "an engine"
    assert stand_in == [("standin", "actor", "1", "the actor", 3)]  # a `copies` kind: one stage, the model's TP
    check_engine_layout(EngineConfig(kind="standin", tp="2"), tp=4, pp=1)
    with pytest.raises(ValueError, match="the Stand-in engine runs as replicas at one stage"):
        check_engine_layout(EngineConfig(kind="standin", pp="2"), tp=2, pp=2)


def test_a_registered_engine_is_planned_from_its_entry(stand_in):
    cfg = load_config(RLConfig, [], [*R14B, "engine.kind=vllm", "engine.kv_cache_gib=20"])
    cfg = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, kind="standin"))
    s = job_shape(cfg, "rl", HF14B, gpus=8, settings=PlanSettings(), gpu=H100)
    assert (s.engine, s.engine_tp1, s.engine_layout) == ("standin", True, (8, 1, 1))
    plan = plan_job(s, H100)
    gen = plan.phases["generation"]
    # its copy at TP8 has vLLM's shards (sharded), its pool grows to engine.kv_cache_gib, no graphs of its own,
    # a gather's buckets; with the optimizer offloaded, its copy is rebuilt after the update (not kept through it)
    vllm = plan_job(dataclasses.replace(s, engine="vllm"), H100).phases["generation"]
    assert gen["engine_copy"] == vllm["engine_copy"] and "cuda_graphs" not in gen
    assert gen["kv_cache"] <= 20 * GIB and gen["refit_buckets"] == int(9 * s.refit_bucket_mb * 1e6)
    assert s.offload and "engine_copy" not in plan.phases["update"]
    kept = plan_job(dataclasses.replace(s, offload=False), H100).phases["update"]
    assert kept["engine_copy"] == gen["engine_copy"]  # no sleeping on the host: without offload it stays
    assert plan.time is not None and plan.time.refit > 0
    assert "engine tp 8 x 1" in describe("rl", plan, [])


def test_layer_spec_auto_is_planned_as_the_jobs_image_builds_it():
    """actor.layer_spec=auto builds TE layers where the job's image has Transformer Engine: planned as te there
    (one [T, ffn] tensor more per layer), local on vLLM's image and for packed SFT traces."""
    from nemo_lead.plan.job import planned_layer_spec
    from nemo_lead.training.sft.config import SFTConfig

    def rl(*keys):
        return load_config(RLConfig, [], [*R14B, "engine.kv_cache_gib=20", *keys])

    assert planned_layer_spec(rl("engine.kind=vllm"), "rl") == "local"  # no TE in the vLLM image
    assert planned_layer_spec(rl("engine.kind=megatron"), "rl") == "te"
    assert planned_layer_spec(rl("engine.kind=megatron", "actor.layer_spec=local"), "rl") == "local"
    assert planned_layer_spec(rl("engine.kind=vllm", "actor.layer_spec=te"), "rl") == "te"
    sft = load_config(SFTConfig, [], ["out=x", "data.path=x", "actor.model=r1-distill-qwen-14b", "data.pack=true"])
    assert planned_layer_spec(sft, "sft") == "local"  # packed traces take the local spec
    assert planned_layer_spec(dataclasses.replace(sft, data=dataclasses.replace(sft.data, pack=False)), "sft") == "te"
    # the te term is what separates the two: planned with it, the update's activations are larger
    cfg = rl("engine.kind=megatron")
    te = plan_job(job_shape(cfg, "rl", HF14B, gpus=8, settings=PlanSettings(), gpu=H100), H100)
    local = plan_job(job_shape(rl("engine.kind=megatron", "actor.layer_spec=local"), "rl", HF14B, gpus=8,
                               settings=PlanSettings(), gpu=H100), H100)
    assert te.phases["update"]["activations"] > local.phases["update"]["activations"]
