"""engine.tp=auto / engine.pp=auto: the plan's fastest that fits of the engine at the actor's layout and the
engine replicas at one stage and a TP b dividing the actor's (`nemo_lead.plan.job`), the actor's without a
GPU; resolved before an rl job starts (`nemo_lead.plan.check.resolve_engine_auto`) and printed.

The picking rule on plans whose times and memory are set by hand; then the 14B shape on 8 x H100 at TP8
with a 30 GB KV budget, whose generation times are `nemo-lead plan`'s (TP1 x 8 replicas ~5,240 s against
~7,670 s at TP8), and on a GPU whose memory holds the actor's layout but not the copy; then the 72B shape on
32 x H100 over a TP8 / PP2 actor, where the plan finds the engine at TP8 x 4 replicas fastest.
"""

import dataclasses
from types import SimpleNamespace

import pytest

from nemo_lead.config.loading import load_config
from nemo_lead.models import read_hf_config
from nemo_lead.plan.check import resolve_engine_auto
from nemo_lead.plan.job import (
    GIB,
    JobPlan,
    auto_engine_layout,
    engine_options,
    faster_plan,
    job_shape,
    plan_job,
)
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import StepTime, gpu_named
from nemo_lead.training.rl.config import RLConfig

H100 = gpu_named("h100")


HF14B = read_hf_config("r1-distill-qwen-14b")
# the 14B RL stage's shape on 8 GPUs at TP8 (the lead-14b recipe's, with a 28 GiB KV budget)
R14B = ["out=x", "data.path=x", "steps=1", "actor.model=r1-distill-qwen-14b", "actor.tp=8", "rollout.n=8",
        "prompts_per_step=32", "rollout.max_tokens=14336", "actor.offload_during_generation=true",
        "engine.kv_cache_gib=28", "actor.sequence_parallel=true"]


def _shape(*extra, gpu=None):
    return job_shape(load_config(RLConfig, [], [*R14B, *extra]), "rl", HF14B, gpus=8, settings=PlanSettings(), gpu=gpu)


@pytest.fixture(scope="module")
def shape():
    return _shape("engine.tp=actor", "engine.pp=actor")


def _plan(shape, seconds, used, **fields):
    return JobPlan(shape=dataclasses.replace(shape, **fields), gpu=H100, memory_bytes=100, usable_bytes=100,
                   phases={"update": {"weights": used}}, stages={"update": 0}, tokens_per_microbatch=1,
                   microbatches=1, engine_rows=1, time=StepTime(seconds, 0.0, 0.0))


def test_the_faster_plan_that_fits_is_picked(shape):
    actor, copy = _plan(shape, 30.0, 60), _plan(shape, 10.0, 90, engine_tp1=True)
    assert faster_plan([actor, copy]) is copy
    too_big = _plan(shape, 10.0, 101, engine_tp1=True)  # faster, one byte over
    assert faster_plan([actor, too_big]) is actor
    assert faster_plan([_plan(shape, 10.0, 101), too_big]) is None
    tie = _plan(shape, 30.0, 10, engine_tp1=True)
    assert faster_plan([actor, tie]) is actor  # equal steps: the first (the actor's layout, no copy)


def test_auto_may_take_what_the_keys_set_explicitly_allow(shape):
    def options(engine_tp, engine_pp, kind="megatron", generators=0, tp=shape.tp, pp=shape.pp):
        return engine_options(SimpleNamespace(tp=engine_tp, pp=engine_pp, kind=kind), tp=tp, pp=pp,
                              generator_ranks=generators)

    actor, tp = (False, 1), [(True, b) for b in (1, 2, 4)]  # the actor's layout; replicas at TP 1, 2, 4
    assert options("auto", "auto") == [actor, *tp]  # over TP8: b = 1, 2, 4 (b = 8 is the actor's layout)
    assert options("1", "1") == []  # nothing to choose
    assert options("auto", "1") == [actor, *tp]  # PP1 actor: pp=1 is every layout's PP
    assert options("auto", "1", tp=4, pp=2) == [(True, 1), (True, 2), (True, 4)]  # b = 4 at one stage of two
    assert options("2", "auto", tp=4, pp=2) == [(True, 2)]
    assert options("actor", "auto", tp=4, pp=2) == [actor]
    assert options("auto", "2", tp=4, pp=1) == []  # no layout has PP2 (the config check names it)
    assert options("1", "auto", tp=2, pp=1) == [(True, 1)]
    assert options("auto", "auto", kind="trtllm") == [actor]
    assert options("auto", "auto", generators=8) == [actor]  # the split layout: the actor's
    assert options("auto", "auto", tp=1, pp=1) == [actor]


def test_the_14b_job_on_8_h100_takes_the_tp1_replicas_the_plan_finds_faster(shape):
    actor, copy = (plan_job(dataclasses.replace(shape, engine_tp1=tp1), H100) for tp1 in (False, True))
    assert actor.fits and copy.fits
    # nemo-lead plan's figures at a 30 GB KV budget, every response at max_tokens: TP8 decodes 256 sequences in
    # 79 rows, TP1 x 8 replicas 32 each in 9 rows, both 4 waves of 14,336 steps; TP1's steps are CUDA graphs
    # and read 1/8 of the model per replica, so it decodes ~1.4 x faster than TP8 (the decode figures of
    # 2026-12-04: 9.8% of the bandwidth bound, 2.81 ms of host time per layer and eager step)
    assert (actor.engine_rows, copy.engine_rows) == (79, 9)
    assert 10_550 < actor.time.generation < 10_750 and 7_300 < copy.time.generation < 7_500
    assert auto_engine_layout(shape, [(False, 1), (True, 1)], H100, memory_gib=None, reserve_gib=3.0) == (True, 1)
    # memory for the actor's layout and 1 GiB more: the copy (29.6 GB of bf16 weights) does not fit
    tight = (max(actor.total(p) for p in actor.phases) + 3 * GIB) / GIB + 1
    assert plan_job(shape, H100, memory_gib=tight).fits
    assert not plan_job(dataclasses.replace(shape, engine_tp1=True), H100, memory_gib=tight).fits
    assert auto_engine_layout(shape, [(False, 1), (True, 1)], H100, memory_gib=tight, reserve_gib=3.0) == (False, 1)
    assert auto_engine_layout(shape, [(True, 1)], H100, memory_gib=tight, reserve_gib=3.0) == (True, 1)  # none fits


def test_auto_takes_an_engine_tp_between_one_and_the_actors_where_the_plan_finds_it_fastest():
    """The 72B shape on 32 x H100 at TP8 / PP2 (distributed optimizer, full recomputation): the plan's step at
    every engine layout auto may take, and auto's pick the shortest that fits (docs/sizing.md: TP8 x 4)."""
    hf = read_hf_config("qwen2.5-72b")
    cfg = load_config(RLConfig, [], [*R14B[:3], "actor.model=qwen2.5-72b", *R14B[4:], "actor.pp=2",
                                     "actor.optim.use_distributed_optimizer=true", "actor.recompute_granularity=full",
                                     "actor.recompute_method=uniform", "actor.recompute_num_layers=1"])
    s = job_shape(cfg, "rl", hf, gpus=32, settings=PlanSettings())
    options = engine_options(cfg.engine, tp=8, pp=2)
    assert options == [(False, 1), (True, 1), (True, 2), (True, 4), (True, 8)]
    plans = {o: plan_job(dataclasses.replace(s, engine_tp1=o[0], engine_tp=o[1]), H100) for o in options}
    fitting = {o: p.time.total for o, p in plans.items() if p.fits}
    assert (True, 8) in fitting and min(fitting, key=fitting.get) == (True, 8)
    assert fitting[(True, 8)] < fitting.get((False, 1), float("inf"))
    assert auto_engine_layout(s, options, H100, memory_gib=None, reserve_gib=3.0) == (True, 8)
    assert job_shape(cfg, "rl", hf, gpus=32, settings=PlanSettings(), gpu=H100).engine_layout == (8, 1, 4)


def test_job_shape_resolves_auto_on_a_gpu_and_keeps_the_actors_layout_without_one():
    assert load_config(RLConfig, [], R14B).engine.tp == "auto"  # the default
    on_h100 = _shape(gpu=H100)
    assert (on_h100.engine_tp1, on_h100.engine_tp) == (True, 1) and not _shape().engine_tp1
    assert not _shape("engine.tp=actor", "engine.pp=actor", gpu=H100).engine_tp1
    assert _shape("engine.tp=1", "engine.pp=1").engine_tp1


def test_resolve_before_start_without_a_gpu_keeps_the_actors_layout_and_says_so(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    base = ["out=x", "data.path=x", "steps=1", "actor.model=tiny-qwen2"]
    cfg = resolve_engine_auto(load_config(RLConfig, [], [*base, "actor.tp=2"]))
    assert (cfg.engine.tp, cfg.engine.pp) == ("actor", "actor")
    assert "engine.tp=auto engine.pp=auto -> engine.tp=actor engine.pp=actor (no GPU" in capsys.readouterr().err
    mixed = resolve_engine_auto(load_config(RLConfig, [], [*base, "actor.tp=2", "engine.tp=1"]))
    assert (mixed.engine.tp, mixed.engine.pp) == ("1", "1")  # pp=auto completes the layout asked for
    assert "engine.tp=1 engine.pp=auto -> engine.tp=1 engine.pp=1" in capsys.readouterr().err
    one = resolve_engine_auto(load_config(RLConfig, [], base))
    assert (one.engine.tp, one.engine.pp) == ("actor", "actor") and capsys.readouterr().err == ""


def test_resolve_before_start_on_a_gpu_takes_the_plans_choice(capsys, monkeypatch):
    """The GPU branch, with this machine's GPU said to be an H100 of 80 GiB, then one of too little memory for
    the copy: TP1 x PP1 replicas, then the actor's layout."""
    import nemo_lead.plan.check as check

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(check.torch.cuda, "is_available", lambda: True)
    for memory, want in ((80.0, "1"), (58.0, "actor")):
        monkeypatch.setattr(check, "device_gpu", lambda settings, memory=memory: (H100, memory))
        cfg = resolve_engine_auto(load_config(RLConfig, [], R14B))
        assert (cfg.engine.tp, cfg.engine.pp) == (want, want)
        assert f"-> engine.tp={want} engine.pp={want} (the plan's fastest that fits on this GPU)" in capsys.readouterr().err
