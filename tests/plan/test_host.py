"""The host side of the plan (nemo_lead.plan.host) and the job resources `nemo-lead submit` asks for from it."""

import dataclasses
import math

import pytest

from nemo_lead.launch.sbatch import sbatch_options
from nemo_lead.launch.submit import render_jobs
from nemo_lead.launch.submit_config import SubmitConfig
from nemo_lead.models.hf_config import read_hf_config
from nemo_lead.pipeline.recipe_plan import PlanConfig, jobs_of
from nemo_lead.plan.host import HOST_GIB_PER_RANK, VERIFIER_GIB, host_needs
from nemo_lead.plan.job import GIB, job_shape, plan_job
from nemo_lead.plan.parameters import parameter_count
from nemo_lead.plan.timing import gpu_named

R14B = {"base_model": "r1-distill-qwen-14b"}


@pytest.fixture(scope="module")
def stage1():
    job, = jobs_of(PlanConfig(target="lead-14b", gpus=8, stage="stage1", paths=dict(R14B)))
    shape = job_shape(job.config, "rl", read_hf_config("r1-distill-qwen-14b"), gpus=8, settings=job.config.plan)
    return job, plan_job(shape, gpu_named("h100"))


def test_host_needs_of_the_14b_rl_stage(stage1):
    job, plan = stage1
    h = host_needs(plan, job.config, 8)
    update = plan.phases["update"]
    assert job.config.actor.offload_during_generation and job.config.verify.workers == 2
    pinned_gib = update["optimizer"] / GIB  # per rank, copied to pinned host memory while the engine generates (grads are freed)
    assert h.memory_gib_per_node == pytest.approx(8 * (pinned_gib + HOST_GIB_PER_RANK) + 2 * VERIFIER_GIB)
    assert 160 < 8 * update["optimizer"] / GIB < 170  # the optimizer copies alone: ~165 GiB per node
    assert 8 * update["optimizer"] == plan.host_bytes_per_node  # the figure the layout ranking shows
    params = parameter_count(plan.shape.arch, plan.shape.vocab_divisible_by)
    assert h.checkpoint_bytes == params * 14  # bf16 weights + fp32 master + two fp32 Adam moments
    assert 200e9 < h.checkpoint_bytes < 210e9
    assert job.config.keep_last == 2 and h.disk_bytes == 3 * h.checkpoint_bytes
    assert h.steps == 100 and h.stage_seconds == pytest.approx(100 * plan.time.total)
    assert h.cpus_per_task == 2 + 1  # two grader processes over eight ranks: one more core each


def test_without_offload_nothing_is_pinned(stage1):
    job, plan = stage1
    shape = dataclasses.replace(plan.shape, offload=False)
    h = host_needs(plan_job(shape, gpu_named("h100")), job.config, 4)
    assert h.memory_gib_per_node == pytest.approx(4 * HOST_GIB_PER_RANK + 2 * VERIFIER_GIB)


def _vllm_plan(job):
    config = dataclasses.replace(job.config, engine=dataclasses.replace(job.config.engine, kind="vllm"))
    shape = job_shape(config, "rl", read_hf_config("r1-distill-qwen-14b"), gpus=8, settings=config.plan)
    return plan_job(shape, gpu_named("h100"))


def test_vllms_sleeping_weights_are_host_memory(stage1):
    job, _ = stage1
    vllm = _vllm_plan(job)
    weights = vllm.phases["generation"]["engine_copy"]  # vLLM's weights at its engine TP, per rank
    optimizer = vllm.phases["update"]["optimizer"]  # pinned while the engine generates (offload)
    assert weights > 0 and vllm.host_bytes_per_node == 8 * (optimizer + weights)
    h = host_needs(vllm, job.config, 8)
    assert h.memory_gib_per_node == pytest.approx(8 * ((optimizer + weights) / GIB + HOST_GIB_PER_RANK)
                                                  + 2 * VERIFIER_GIB)


def _scripts(**over):
    cfg = SubmitConfig(target="lead-14b", out="/tmp/nemo-lead-test-run", nodes=1, job={"paths": dict(R14B)}, **over)
    return {name: sbatch_options(script) for name, _, script in render_jobs(cfg)[0]}


def test_sbatch_asks_for_the_plans_memory_and_cores(stage1):
    job, _ = stage1
    assert job.config.engine.kind == "auto"  # vllm where installed, else megatron: sized for the larger need
    h = host_needs(_vllm_plan(job), job.config, 8)
    scripts = _scripts()
    assert scripts["stage1"]["mem"] == f"{math.ceil(h.memory_gib_per_node)}G"
    assert scripts["stage1"]["cpus-per-task"] == "3"
    assert "sft_problems" not in scripts  # no GPU: it runs at the start of the distill job
    # distill: the plan's allowance per rank and grader process (verify.workers = 2)
    assert scripts["distill"]["mem"] == f"{math.ceil(8 * HOST_GIB_PER_RANK + 2 * VERIFIER_GIB)}G"
    whole = _scripts(mem="0", cpus_per_task=16)
    assert whole["stage1"]["mem"] == "0" and whole["stage1"]["cpus-per-task"] == "16"
    assert whole["distill"]["mem"] == "0"
    assert "mem" not in _scripts(mem=None)["stage1"]
