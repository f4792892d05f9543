"""Response lengths in the plan (nemo_lead.plan.timing): the spread around a stated mean, the decode steps of a
continuous batch, the worst case beside it, the engine stages (distill, eval), the paper's GPU and figure, and
no time for a layout that does not fit."""

import math

import pytest
from plan_cli import plan_json

from nemo_lead.cli import main
from nemo_lead.models.hf_config import arch_from_hf, read_hf_config
from nemo_lead.plan.engine_kinds import VLLM_DECODE_BANDWIDTH_FRACTION
from nemo_lead.plan.engine_stage import CALL_WAVES, StageShape, plan_auto_engine, plan_engine_stage
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import (
    GPUS,
    decode_steps,
    gpu_named,
    kv_positions_read,
    matmul_parameters,
    response_lengths,
    tail_share,
    update_fraction,
)

R14B = "paths.base_model=r1-distill-qwen-14b"


_plan = plan_json


def test_lengths_keep_the_stated_mean_and_reach_near_max_tokens():
    lengths = response_lengths(256, 9081, 14336)
    assert len(lengths) == 256 and sum(lengths) / 256 == pytest.approx(9081, rel=0.002)
    assert 14_250 < max(lengths) <= 14336 and min(lengths) == round(14336 * (0.5 / 256) ** (14336 / 9081 - 1))
    # k = 14336 / 9081 - 1 = 0.5787: a share 1 - 0.9^(1/k) = 16.7% over 90% of max_tokens
    assert tail_share(9081, 14336) == pytest.approx(1 - 0.9 ** (1 / (14336 / 9081 - 1)))
    assert sum(n > 0.9 * 14336 for n in lengths) == round(256 * tail_share(9081, 14336))
    assert lengths[:2] != tuple(sorted(lengths)[:2])  # mixed, not sorted
    assert response_lengths(4, None, 100) == (100,) * 4 and response_lengths(3, 100, 100) == (100,) * 3
    assert tail_share(None, 100) == 1.0


def test_decode_steps_of_a_continuous_batch():
    # two slots: 5 on one, 3 then 4 (ends at 7) on the other, 2 after the 5 (ends at 7)
    assert decode_steps((5, 3, 4, 2), 2) == 7
    assert decode_steps((5, 3, 4, 2), 8) == 5  # all at once: the longest
    assert decode_steps((10,) * 5, 2) == 30  # equal lengths: ceil(5 / 2) waves
    assert decode_steps((), 4) == 0
    # each token of a response reads its prompt and the response so far: 2 x 10 + (1 + 2), 3 x 10 + 6
    assert kv_positions_read((2, 3), 10) == 23 + 36


def test_the_14b_stage_at_the_papers_mean_and_every_response_at_max(tmp_path, capsys):
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, "--fastest", "0")
    out = capsys.readouterr().out
    a = p["assumptions"]
    assert rc == 0 and a["mean_response_tokens"] == 9081 and "Table 2" in a["mean_response_source"]
    mean, worst = p["step_seconds"], p["step_seconds_all_at_max"]
    # more tokens trained, and longer sequences (attention): more than the ratio of the tokens
    assert worst["update"] > mean["update"] * (1024 + 14336) / (1024 + 9081)
    assert 0.55 < mean["generation"] / worst["generation"] < 0.75
    assert f"= {mean['total']:,.0f} s; every response at max_tokens (the worst case): {worst['total']:,.0f} s" in out
    assert "responses of mean 9,081 of 14,336 tokens (the paper's Len_avg of LEAD stage 1, Table 2; 17% over" in out
    assert p["host"]["stage_seconds"] == round(100 * mean["total"])
    assert p["host"]["stage_seconds_all_at_max"] == round(100 * worst["total"])
    # plan.mean_response_tokens on the command line; a mean above max_tokens is refused, naming the key
    rc, q = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, "--fastest", "0",
                  "plan.mean_response_tokens=14336")
    assert q["step_seconds"]["total"] == pytest.approx(worst["total"])
    assert main(["plan", "lead-14b", "--stage", "stage1", "--gpus", "8", R14B, "plan.mean_response_tokens=20000"]) == 2
    assert "plan.mean_response_tokens (20,000) exceeds the response budget max_tokens (14,336)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="plan.mean_response_tokens must be > 0"):
        PlanSettings(mean_response_tokens=0)


def test_the_h20_is_known_and_the_papers_step_is_printed_beside_the_estimate(tmp_path, capsys):
    h20 = GPUS["h20"]
    assert (h20.bf16_tflops, h20.hbm_tbps) == (148.0, 4.0) and 94 < h20.memory_gib < 96
    assert gpu_named("NVIDIA H20").name == "h20" and gpu_named("NVIDIA H200").name == "h200"
    assert gpu_named("NVIDIA GH200 480GB").name == "h200" and gpu_named("A100-SXM4-40GB").name == "a100-40"
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h20", R14B, "--fastest", "0")
    out = capsys.readouterr().out
    assert p["reported_step_seconds"]["seconds"] == 86_400 / 100 and "24 h on 8 H20" in p["reported_step_seconds"]["source"]
    assert "the paper's step on 8 x H20: ~864 s" in out
    assert f"this plan's estimate: {p['step_seconds']['total']:,.0f} s" in out
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, "--fastest", "0")
    assert "reported_step_seconds" not in p and "the paper's step" not in capsys.readouterr().out


def test_a_layout_that_does_not_fit_gets_the_fastest_fitting_ones_time(tmp_path, capsys):
    # TP1 / DP8 with the 14B model does not fit 80 GB: no step or stage time of its own
    tp1 = ["stages.stage1.actor.tp=1", "stages.stage1.actor.sequence_parallel=false"]
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, *tp1,
                  "--fastest", "1")
    out = capsys.readouterr().out
    best = p["ranking"]["fastest"][0]
    assert rc == 1 and not p["fits"] and p["step_seconds"] is None and p["step_seconds_all_at_max"] is None
    assert "step: no time for a layout that does not fit; the fastest that fits is listed below" in out
    assert p["host"]["stage_seconds"] == round(100 * best["step_seconds"]["total"])
    layout = f"tp {best['layout']['tp']} pp {best['layout']['pp']} dp {best['layout']['dp']}"
    assert p["host"]["timed_layout"].startswith(layout)
    assert f"at the fastest layout that fits, {p['host']['timed_layout']} (as configured it does not fit)" in out
    # --fastest 0 still looks for one to time the stage with, and does not list it
    rc, q = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, *tp1,
                  "--fastest", "0")
    assert q["ranking"] is None and q["host"]["stage_seconds"] == p["host"]["stage_seconds"]


def test_engine_stages_are_timed_from_problems_samples_and_mean_length():
    """The megatron engine at TP2 with a 55 GiB budget: its rows, calls of 4 x rows, and no time without a
    budget (every one of 256 sequences at full length does not fit)."""
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-14b"))
    h100 = gpu_named("h100")
    common = dict(gpus=8, tp=2, pp=1, precision="bf16", n=32, prompt_tokens=1024, max_tokens=14336, models=5)
    p = plan_engine_stage(arch, h100, problems=(30, 30), mean_tokens=9054, kv_cache_gib=55.0, **common)
    rows = math.floor(55 * 2**30 / ((1024 + 14336) * 2 * 48 * 4 * 128 * 2))  # the budget's rows at full length
    assert p.engine == "megatron" and p.replicas == 4 and p.rows == rows == 39 and p.fits
    assert p.call_sequences == CALL_WAVES * rows == 156  # 4 problems of 32 a call: 128 sequences
    # 1,920 sequences a model in calls of 128: 15 calls over 4 replicas, 4 a replica
    assert p.calls == 4 and p.seconds == pytest.approx(5 * 4 * p.call_seconds) and p.worst_seconds > 1.4 * p.seconds
    q = plan_engine_stage(arch, h100, problems=(30, 30), mean_tokens=9054, **common)
    assert q.rows == 256 and not q.fits and q.seconds is None and q.worst_seconds is None
    with pytest.raises(ValueError, match="not a multiple of tp x pp"):
        plan_engine_stage(arch, h100, problems=(30,), mean_tokens=None, **{**common, "gpus": 7})


def test_a_vllm_stage_by_hand():
    """lead-14b's eval on vLLM (TP4, two replicas, a 60 GiB pool, five models of 60 problems x 32 samples),
    every response at max_tokens, computed here step by step from the formulas of nemo_lead/plan."""
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-14b"))
    h100 = gpu_named("h100")
    p = plan_engine_stage(arch, h100, engine="vllm", gpus=8, tp=4, pp=1, precision="bf16", problems=(30, 30), n=32,
                          prompt_tokens=1024, max_tokens=14336, mean_tokens=None, models=5, kv_cache_gib=60.0)
    slot = 2 * 48 * (8 // 4) * 128 * 2  # K and V, 48 layers, 2 of 8 KV heads at TP4, head 128, bf16: 49,152 B
    rows = math.floor(60 * 2**30 / (15360 * slot))  # sequences of 1,024 + 14,336 tokens the pool holds: 85
    assert (p.engine, p.replicas, p.rows, p.call_sequences) == ("vllm", 2, rows, 4 * rows) == ("vllm", 2, 85, 340)
    # a call: whole problems of 32 samples, 10 of them (320 sequences); 1,920 a model: 6 calls, 3 a replica
    (r,) = p.rounds
    assert (r.samples, r.problems, r.calls) == (32, 60, 3)
    # 320 responses of 14,336 tokens through 85 slots: one slot runs 4 of them one after the other
    steps = 4 * 14336
    assert decode_steps((14336,) * 320, 85) == steps
    weights = p.per_gpu["engine_copy"]  # vLLM's weights at TP4 (the job's own copy, "weights", is the same size)
    assert p.per_gpu["weights"] == weights and p.per_gpu["kv_cache"] == 60 * 2**30
    read = steps * weights + 320 * (14336 * 1024 + 14336 * 14337 // 2) * slot  # bytes over all decode steps
    decode = read / (3.35e12 * VLLM_DECODE_BANDWIDTH_FRACTION)  # CUDA graphs: no host time per step
    prefill = 10 * 1024 * (2 * matmul_parameters(arch) + 4 * 48 * 5120 * 1024) / (4 * 989e12 * update_fraction(8192))
    assert p.worst_call_seconds == pytest.approx(decode + prefill, rel=1e-9)
    assert p.worst_seconds == pytest.approx(5 * 3 * (decode + prefill), rel=1e-9)
    assert 0.5 * 3600 < p.worst_seconds < 10 * 3600  # hours, not days
    # the memory: both copies of the weights, the pool, the graphs and the temporaries fit the usable 76.2 GiB
    assert p.total_bytes == sum(p.per_gpu.values()) <= p.usable_bytes == int(79.2 * 2**30) - 3 * 2**30


def test_rounds_sample_only_the_unsolved_share_again():
    """A distill stage in rounds ([1]: sample 0, then 3 more for the unsolved): round 2 takes the share the
    stated first-round solve rate leaves, in calls of whole problems' 3 samples; without a rate, every problem."""
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-32b"))
    common = dict(engine="vllm", gpus=8, tp=8, pp=1, precision="bf16", problems=(13000,), n=4, prompt_tokens=1024,
                  max_tokens=16384, mean_tokens=9054, kv_cache_gib=60.0, rounds=(1,))
    p = plan_engine_stage(arch, gpu_named("h100"), first_round_solve_rate=0.75, **common)
    one, two = p.rounds
    size = p.call_sequences
    assert (one.samples, one.problems, one.calls) == (1, 13000, math.ceil(13000 / size))
    assert (two.samples, two.problems) == (3, 3250) and two.sequences == 9750
    assert two.calls == math.ceil(9750 / (3 * (size // 3)))
    q = plan_engine_stage(arch, gpu_named("h100"), **common)  # no rate: round 2 for every problem
    assert q.rounds[1].problems == 13000 and q.seconds > p.seconds
    all_at_once = plan_engine_stage(arch, gpu_named("h100"), **{**common, "rounds": ()})
    assert all_at_once.rounds[0].sequences == 52000 and all_at_once.seconds > p.seconds


def test_auto_takes_the_faster_that_fits():
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-14b"))
    common = dict(gpus=8, tp=4, pp=1, precision="bf16", problems=(30, 30), n=32, prompt_tokens=1024,
                  max_tokens=14336, mean_tokens=9054, models=5, kv_cache_gib=60.0)
    chosen, plans = plan_auto_engine(arch, gpu_named("h100"), StageShape(**common), "auto")
    assert set(plans) == {"vllm", "megatron"} and all(q.fits for q in plans.values())
    assert chosen is min(plans.values(), key=lambda q: q.seconds) and chosen.engine == "vllm"
    # vLLM runs at one stage: over pp 2 only the megatron engine is planned to fit
    chosen, plans = plan_auto_engine(arch, gpu_named("h100"), StageShape(**{**common, "tp": 2, "pp": 2}), "auto")
    assert not plans["vllm"].fits and "pp must be 1" in plans["vllm"].why_not and chosen.engine == "megatron"


def test_the_recipes_eval_and_distill_stages_in_the_plan(tmp_path, capsys):
    rc, p = _plan(tmp_path, "lead-14b", "--gpus", "8", "--gpu", "h100", R14B, "paths.teacher_model=qwq-32b",
                  "--fastest", "0", megatron=False)  # the recipe's engine.kind=auto
    out = capsys.readouterr().out
    stages = {s["stage"]: s for s in p["stages"]}
    distill, ev = stages["distill"], stages["eval"]
    assert distill["problems"] == [13000] and distill["mean_response_tokens"] == 9054  # the paper's ~13k
    assert "assumed" in distill["mean_response_source"] and "assumed" in distill["first_round_solve_source"]
    assert distill["rounds"] == [1] and distill["first_round_solve_rate"] == 0.75 and distill["engine"] == "vllm"
    assert [r["problems"] for r in distill["rounds_planned"]] == [13000, 3250]
    assert 0 < distill["stage_seconds"] < distill["stage_seconds_all_at_max"]
    assert distill["engine_seconds"]["megatron"] > 10 * distill["engine_seconds"]["vllm"]
    assert ev["problems"] == [30, 30] and ev["models"] == 5 and ev["mean_response_tokens"] == 9054
    assert ev["engine"] == "vllm" and ev["redo_seconds"] < 3600  # a killed eval redoes minutes, not hours
    assert p["total_seconds"] <= 72 * 3600  # the recipe on one node of 8 x H100: at most 72 h at the stated lengths
    assert "  by stage: distill " in out and "eval " in out.split("  by stage: ")[1]
    assert stages["sft"]["host"]["steps"] == math.ceil(13000 / 32)  # plan.data_rows traces, 32 a step, 1 epoch
    timed = [s.get("stage_seconds", s.get("host", {}).get("stage_seconds")) for s in p["stages"]]
    assert p["total_seconds"] == pytest.approx(sum(timed), abs=len(timed)) and p["untimed_stages"] == []
    assert f"total: {p['total_seconds'] / 3600:,.1f} h of GPU-job time over 6 of 6 planned stages" in out
    assert f"(every response at max_tokens: {p['total_seconds_all_at_max'] / 3600:,.1f} h)" in out
    # a distill stage whose problems an earlier stage writes, without plan.data_rows: no time, and how to give it
    rc, p = _plan(tmp_path, "lead-14b", "--gpus", "8", "--gpu", "h100", R14B, "paths.teacher_model=qwq-32b",
                  "--stage", "distill", "stages.distill.plan.data_rows=null")
    assert p["stage_seconds"] is None and "stages.distill.plan.data_rows=N" in p["no_time"] and p["fits"] is None
    assert rc == 0  # not planned is not "does not fit"
    assert main(["plan", "lead-14b", "--gpus", "6", "--stage", "distill", R14B]) == 2
    assert "stages.distill.tp, stages.distill.pp: tp x pp = 8 does not divide the job's 6 GPUs" in (
        capsys.readouterr().err)
