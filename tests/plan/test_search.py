"""The layouts that fit, ranked by step time (`nemo_lead.plan.search`), and how `nemo-lead plan` shows them.

The ranking's rules on plans whose times and memory are set by hand; then the search on the 14B recipe's
stage 1 (a conf/model preset: no weights), whose figures are checked by hand and by planning the fastest
layout's changes again.
"""

import dataclasses

import pytest
from plan_cli import plan_json

from nemo_lead.cli import main
from nemo_lead.models import arch_from_hf, read_hf_config
from nemo_lead.plan.activations import Recompute
from nemo_lead.plan.job import JobPlan, JobShape
from nemo_lead.plan.report import verdict
from nemo_lead.plan.search import Candidate, needed_budget_gib, ranking_of
from nemo_lead.plan.timing import StepTime, gpu_named

R14B = "paths.base_model=r1-distill-qwen-14b"
STAGE1 = ["lead-14b", "--stage", "stage1", "--gpus", "8", R14B]


@pytest.fixture(scope="module")
def shape():
    arch = arch_from_hf(read_hf_config("r1-distill-qwen-14b"))
    return JobShape(kind="rl", arch=arch, gpus=8, tp=8, pp=1, precision="bf16", distributed_optimizer=False,
                    sequence_parallel=True, recompute=Recompute(), micro_batch_tokens=16384,
                    logprob_chunk_tokens=2048, offload=True, longest=15360, sequences=256, prompts=32, n=8,
                    prompt_tokens=1024, max_tokens=14336, kv_cache_gib=65.2)


def _candidate(shape, changes, seconds, used, **fields):
    """A plan of `used` bytes of 100 taking `seconds` (all of it generation)."""
    plan = JobPlan(shape=dataclasses.replace(shape, **fields), gpu=gpu_named("h200"), memory_bytes=100,
                   usable_bytes=100, phases={"update": {"weights": used}}, stages={"update": 0},
                   tokens_per_microbatch=1, microbatches=1, engine_rows=1, time=StepTime(seconds, 0.0, 0.0))
    return Candidate(changes=changes, plan=plan)


def test_the_ranking_is_by_step_time_without_layouts_that_do_not_fit(shape):
    configured = _candidate(shape, {}, 30.0, 50)
    faster = _candidate(shape, {"actor.tp": 2}, 10.0, 90, tp=2)
    unfit = _candidate(shape, {"actor.tp": 4}, 5.0, 101, tp=4)  # the fastest, but 1 byte over
    # the same layout and step time (to 0.1 s) with more changes: listed once, under the fewest changes
    same_as_configured = _candidate(shape, {"actor.sequence_parallel": False}, 30.04, 40, sequence_parallel=False)
    same_as_faster = _candidate(shape, {"actor.tp": 2, "actor.sequence_parallel": False}, 10.0, 10, tp=2,
                                sequence_parallel=False)
    # equal time, equal changes: the one with more memory left first
    roomier = _candidate(shape, {"actor.pp": 2}, 20.0, 60, tp=4, pp=2)
    tighter = _candidate(shape, {"actor.pp": 4}, 20.0, 70, tp=2, pp=4)
    r = ranking_of(configured.plan, [configured, unfit, same_as_configured, tighter, faster, same_as_faster, roomier],
                   limit=3)
    assert [c.changes for c in r.fastest] == [{"actor.tp": 2}, {"actor.pp": 2}, {"actor.pp": 4}]
    assert r.fitting == 4 and r.rank == 4 and r.slower == 3.0
    assert verdict(r) == ("as configured: rank 4 of 4; fits but 3.00 x slower than tp 2 pp 1 dp 4 "
                          "(30 s vs 10 s)")
    alone = ranking_of(configured.plan, [configured, unfit, same_as_configured])
    assert alone.rank == 1 and alone.slower == 1.0 and verdict(alone) == "as configured: the fastest of 1 that fit"
    close = _candidate(shape, {}, 30.15, 50)  # 0.5% slower: a ratio of 1.00 would say nothing
    assert verdict(ranking_of(close.plan, [close, _candidate(shape, {"actor.tp": 2}, 30.0, 50, tp=2)])) == (
        "as configured: rank 2 of 2; fits but 0.5% slower than tp 2 pp 1 dp 4 (30 s vs 30 s)")
    over = _candidate(shape, {}, 30.0, 101)
    lost = ranking_of(over.plan, [over, faster])
    assert lost.rank is None and lost.slower is None and lost.fitting == 1
    assert verdict(lost) == "as configured it does not fit; the fastest that fits is #1"


def test_the_largest_useful_kv_budget_holds_a_replicas_rows_at_full_length(shape):
    # TP8 DP1: min(256, 32 x 8) rows of 1,024 + 14,336 positions, K and V of 48 layers x 1 KV head x 128, bf16
    assert needed_budget_gib(shape) == 90.0  # 256 x 15360 x 24576 = 90 x 2^30 bytes
    # TP1 DP8: a replica's 4 prompts x 8 rows, 8 KV heads per rank
    assert needed_budget_gib(dataclasses.replace(shape, tp=1)) == 90.0  # 32 x 15360 x 196608
    assert needed_budget_gib(dataclasses.replace(shape, tp=2, max_batch_size=16)) == 22.5  # 16 x 15360 x 98304
    # rounded up to 0.1 GiB: 17 rows of the last are 23.9 GiB (25,669,140,480 bytes / 2^30 = 23.906)
    assert needed_budget_gib(dataclasses.replace(shape, tp=2, max_batch_size=17)) == 24.0


_plan = plan_json


def test_the_14b_stage_on_8_h200_ranks_the_engine_at_tp1_first_and_says_how_much_slower_tp8_is(tmp_path, capsys):
    rc, p = _plan(tmp_path, *STAGE1, "--gpu", "h200", "--fastest", "12")
    out = capsys.readouterr().out
    r = p["ranking"]
    assert rc == 0 and set(r) == {"configured_rank", "fitting", "slower_than_fastest", "verdict", "fastest"}
    best = r["fastest"][0]
    # the engine at TP1 x 8 replicas: over an actor at TP > 1 with its own copy of the weights (engine.tp=1
    # engine.pp=1), or over a TP1 / DP8 actor (which needs the distributed optimizer and full recomputation,
    # so its update is slower); the KV budget holds all 32 of a replica's rows either way
    assert best["fits"] and best["engine_layout"] == {"tp": 1, "pp": 1, "replicas": 8} and best["layout"]["tp"] > 1
    assert best["changes"]["engine.tp"] == best["changes"]["engine.pp"] == 1
    assert best["changes"]["engine.kv_cache_gib"] == 90.0
    totals = [f["step_seconds"]["total"] for f in r["fastest"]]
    assert totals == sorted(totals) and all(f["fits"] for f in r["fastest"])
    assert not any(f["layout"]["tp"] == 1 and "actor.optim.use_distributed_optimizer" not in f["changes"]
                   for f in r["fastest"])
    # the configured TP8 with the engine at TP1: the same generation as TP1 / DP8, TP8's update
    tp8 = next(f for f in r["fastest"] if f["layout"]["tp"] == 8 and set(f["changes"]) == {
        "engine.kv_cache_gib", "engine.tp", "engine.pp"})
    tp1 = next(f for f in r["fastest"] if f["layout"]["tp"] == 1)
    assert tp8["step_seconds"]["generation"] == pytest.approx(tp1["step_seconds"]["generation"])
    assert tp8["step_seconds"]["update"] == pytest.approx(p["step_seconds"]["update"])
    assert tp8["step_seconds"]["total"] < tp1["step_seconds"]["total"] <= 0.65 * 3844  # issue 37's goal on H200
    # the copy (29.6 GB at bf16) and the refit's buckets, in the generation phase; without offload the copy
    # stays through the update too. The refit: 7/8 of the copy over NVLink (450 GB/s)
    gen = tp8["per_gpu_bytes"]["generation"]
    assert gen["engine_copy"] == tp1["per_gpu_bytes"]["update"]["weights"] and gen["refit_buckets"] == 9 * 512e6
    assert "engine_copy" not in tp8["per_gpu_bytes"]["update"]  # lead-14b offloads during generation
    assert tp8["step_seconds"]["refit"] == pytest.approx(
        p["step_seconds"]["refit"] + gen["engine_copy"] * 7 / 8 / 450e9)
    assert r["configured_rank"] > 1 and r["slower_than_fastest"] == pytest.approx(
        p["step_seconds"]["total"] / best["step_seconds"]["total"])
    # 3,775 s vs 1,744 s at the efficiencies of 2026-12-04 and the recipe's mean response (9,081 tokens)
    assert 2.1 < r["slower_than_fastest"] < 2.25
    assert f"fits but {r['slower_than_fastest']:.2f} x slower than tp {best['layout']['tp']} pp 1 dp" in out
    assert r["verdict"] in out and ", engine tp 1 x 8:" in out
    # offload: one node's 8 ranks each pin their optimizer state (TP8 DP1: every rank's is the update's)
    assert p["host_bytes_per_node"] == 8 * p["per_gpu_bytes"]["update"]["optimizer"]
    assert "host memory per node while generating: 165.1 GiB" in out
    # the recipe for 8 x H200 (TP1 / DP8) ships the fastest layout with the engine at the actor's layout:
    # its numbers are that candidate's, within 3% of the fastest
    rc, q = _plan(tmp_path, "lead-14b-h200", *STAGE1[1:], "--gpu", "h200")
    assert rc == 0 and q["per_gpu_bytes"] == tp1["per_gpu_bytes"] and q["step_seconds"] == tp1["step_seconds"]
    assert 1.0 < q["ranking"]["slower_than_fastest"] < 1.03
    assert q["host_bytes_per_node"] == tp1["host_bytes_per_node"] > 0
    assert q["step_seconds"]["total"] <= 0.65 * 3844


def test_the_14b_recipe_on_8_h100_is_the_fastest_with_the_engine_on_the_actors_modules(tmp_path, capsys):
    # TP1 and TP2 / DP4 do not fit 80 GB. The fastest: the engine at TP1 over TP4 / PP2 (its own copy, run on
    # CPUs only so far); with the engine at the actor's layout TP8 is the fastest, its fastest KV budget
    # rounded down to 71.7 GiB in the recipe
    rc, p = _plan(tmp_path, *STAGE1, "--gpu", "h100", "--fastest", "40")
    r = p["ranking"]
    best = r["fastest"][0]
    assert rc == 0 and p["layout"] == {"tp": 8, "pp": 1, "dp": 1} and best["engine_layout"]["tp"] == 1
    at_actor = [f for f in r["fastest"] if "engine.tp" not in f["changes"]]
    assert at_actor[0]["layout"] == p["layout"] and set(at_actor[0]["changes"]) == {"engine.kv_cache_gib"}
    assert 71.7 <= at_actor[0]["changes"]["engine.kv_cache_gib"] < 72.7
    assert at_actor[1]["changes"] == {}  # then the recipe as shipped, 0.5% slower
    assert 1.12 < r["slower_than_fastest"] < 1.22 and "slower than tp 4 pp 2 dp 1" in capsys.readouterr().out
    assert [f["layout"]["tp"] for f in at_actor[:4]] == [8, 8, 8, 8]  # TP4 / TP2 at the actor's layout: slower


def test_the_7b_ablation_is_within_4_percent_of_the_fastest_layout_on_8_h100_and_8_h200(tmp_path):
    # TP1 / DP8 (the recipe): the engine at TP1 with CUDA graphs; an actor at TP4 with the engine at TP1
    # trains faster in the plan (selective recomputation; TP communication is not counted)
    # every response at max_tokens: 666 s and 481 s at the efficiencies of 2026-12-04 (522 s and 380 s at
    # those of 2026-11-30; TP4 / DP2, before 2026-12-01: 861 s and 785 s); at the stated mean (the base
    # model's Len_avg, 7,052 of 8,192 tokens) less
    for gpu, seconds in (("h100", 605), ("h200", 436)):
        rc, p = _plan(tmp_path, "ablation-7b-grpo", "--gpus", "8", "--gpu", gpu, "paths.base_model=r1-distill-qwen-7b")
        p = next(s for s in p["stages"] if s["stage"] == "rl")
        assert rc == 0 and p["layout"] == {"tp": 1, "pp": 1, "dp": 8} and round(p["step_seconds"]["total"]) == seconds
        assert round(p["step_seconds_all_at_max"]["total"]) == {"h100": 666, "h200": 481}[gpu]
        r = p["ranking"]
        assert 1 <= r["slower_than_fastest"] < 1.04 and r["fastest"][0]["changes"]["engine.tp"] == 1, gpu
        assert all(f["engine_layout"] == {"tp": 1, "pp": 1, "replicas": 8} for f in r["fastest"])


def test_fastest_takes_a_count(tmp_path, capsys):
    assert main(["plan", *STAGE1, "--fastest", "-1"]) == 2
    assert "fastest must be >= 0" in capsys.readouterr().err
    rc, p = _plan(tmp_path, *STAGE1, "--gpu", "h200", "--fastest", "0")
    assert rc == 0 and p["ranking"] is None and "fastest layouts" not in capsys.readouterr().out


def test_a_configured_engine_at_tp1_is_planned_with_its_copy(tmp_path, capsys):
    stage = "stages.stage1."
    rc, p = _plan(tmp_path, *STAGE1, "--gpu", "h200", f"{stage}engine.tp=1", f"{stage}engine.pp=1")
    out = capsys.readouterr().out
    assert rc == 0 and p["engine_layout"] == {"tp": 1, "pp": 1, "replicas": 8} and p["layout"]["tp"] == 8
    gen = p["per_gpu_bytes"]["generation"]
    assert gen["engine_copy"] > 20 * p["per_gpu_bytes"]["update"]["weights"] / 8  # the whole model, not 1/8
    assert "tp 8 pp 1 dp 1, engine tp 1 x 8\n" in out and "    engine_copy " in out and "    refit_buckets " in out
    # offload (lead-14b's RL stages): the copy is freed for the update; without it, it stays
    rc, q = _plan(tmp_path, *STAGE1, "--gpu", "h200", f"{stage}engine.tp=1", f"{stage}engine.pp=1",
                  f"{stage}actor.offload_during_generation=false")
    assert "engine_copy" not in p["per_gpu_bytes"]["update"]
    assert q["per_gpu_bytes"]["update"]["engine_copy"] == gen["engine_copy"]
