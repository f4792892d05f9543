"""Response lengths in the plan (nemo_lead.plan.timing): the spread around a stated mean, the decode steps of a
continuous batch, the worst case beside it, the engine stages (distill, eval), the paper's GPU and figure, and
no time for a layout that does not fit."""

import math

import pytest
from plan_cli import plan_json

from nemo_lead.cli import main
from nemo_lead.models.hf_config import arch_from_hf, read_hf_config
from nemo_lead.plan.engine_stage import plan_engine_stage
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import (
    GPUS,
    decode_steps,
    gpu_named,
    kv_positions_read,
    response_lengths,
    tail_share,
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
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-14b"))
    h100 = gpu_named("h100")
    common = dict(gpus=8, tp=2, pp=1, precision="bf16", n=32, prompt_tokens=1024, max_tokens=14336,
                  problems_per_call=8, models=5)
    p = plan_engine_stage(arch, h100, problems=(30, 30), mean_tokens=9054, kv_cache_gib=55.0, **common)
    # 4 replicas; each dataset 4 calls of <= 8 problems: 8 calls over 4 replicas = 2 per replica and model
    assert p.replicas == 4 and p.calls == 2 and p.fits
    assert p.rows == math.floor(55 * 2**30 / ((1024 + 14336) * 2 * 48 * 4 * 128 * 2))  # the budget's rows
    assert p.seconds == pytest.approx(5 * 2 * p.call_seconds) and p.worst_seconds > 1.4 * p.seconds
    # without a KV budget the whole call's 256 sequences at full length: 360 GiB per GPU, no time
    q = plan_engine_stage(arch, h100, problems=(30, 30), mean_tokens=9054, **common)
    assert q.rows == 256 and not q.fits and q.seconds is None and q.worst_seconds is None
    with pytest.raises(ValueError, match="not a multiple of tp x pp"):
        plan_engine_stage(arch, h100, problems=(30,), mean_tokens=None, **{**common, "gpus": 7})


def test_the_recipes_eval_and_distill_stages_in_the_plan(tmp_path, capsys):
    rc, p = _plan(tmp_path, "lead-14b", "--gpus", "8", "--gpu", "h100", R14B, "paths.teacher_model=qwq-32b",
                  "--fastest", "0")
    out = capsys.readouterr().out
    stages = {s["stage"]: s for s in p["stages"]}
    distill, ev = stages["distill"], stages["eval"]
    assert distill["problems"] == [13000] and distill["mean_response_tokens"] is None  # the paper's ~13k
    assert distill["stage_seconds"] == distill["stage_seconds_all_at_max"] > 0
    assert ev["problems"] == [30, 30] and ev["models"] == 5 and ev["mean_response_tokens"] == 9054
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
    assert "stages.distill.tp, stages.distill.pp: tp x pp = 4 does not divide the job's 6 GPUs" in (
        capsys.readouterr().err)
