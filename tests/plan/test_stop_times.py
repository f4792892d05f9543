"""The warning (`--signal=USR1@S`) and the deadline margin of each job, from the plan's step time and a
checkpoint's save time (nemo_lead.plan.stop_times), as `nemo-lead submit` writes them."""

import math

import pytest

from nemo_lead.launch.sbatch import sbatch_options
from nemo_lead.launch.submit import render_jobs
from nemo_lead.launch.submit_config import SubmitConfig
from nemo_lead.models.hf_config import read_hf_config
from nemo_lead.pipeline.recipe_plan import PlanConfig, jobs_of
from nemo_lead.plan.host import host_needs
from nemo_lead.plan.job import job_shape, plan_job
from nemo_lead.plan.stop_times import stop_times
from nemo_lead.plan.timing import gpu_named

R14B = {"base_model": "r1-distill-qwen-14b"}


def test_the_margin_and_the_warning_by_hand():
    s = stop_times(4400.0, 200e9, nodes=1)  # 200 GB at 1 GB/s per node: 200 s
    assert (s.save_s, s.margin_s, s.signal_s) == (200.0, 120 + 880, 4400 + 200 + 1000)
    assert stop_times(4400.0, 200e9, nodes=2).signal_s == 4400 + 100 + 1000  # two nodes write half each
    assert stop_times(100_000.0, 0, nodes=1).signal_s == 65535  # SLURM's largest --signal time
    assert s.describe() == "signal USR1@5600, deadline margin 1000 s (plan: step 4,400 s, checkpoint 200 s)"


def _scripts(**over):
    cfg = SubmitConfig(target="lead-14b", out="/tmp/nemo-lead-test-run", nodes=1, job={"paths": dict(R14B)}, **over)
    return {name: (note, script) for name, note, script in render_jobs(cfg)[0]}


def test_the_14b_rl_job_from_the_plans_figures():
    job, = jobs_of(PlanConfig(target="lead-14b", gpus=8, stage="stage1", paths=dict(R14B)))
    shape = job_shape(job.config, "rl", read_hf_config("r1-distill-qwen-14b"), gpus=8, settings=job.config.plan)
    plan = plan_job(shape, gpu_named("h100"))
    # the longest step, every response at max_tokens (a step may take that long), not the one at the mean
    step, checkpoint = plan.worst_time.total, host_needs(plan, job.config, 8).checkpoint_bytes
    assert plan.time.total < 0.7 * step
    margin = math.ceil(120 + 0.2 * step)  # the loops' default margin + a fifth of a step
    signal = math.ceil(step + checkpoint / 1e9) + margin  # a step, a checkpoint at 1 GB/s, the margin
    assert 6000 < step < 7200 and 7500 < signal < 9500  # over an hour a step: far beyond SLURM's usual 300 s

    scripts = _scripts()
    note, script = scripts["stage1"]
    assert sbatch_options(script)["signal"] == f"USR1@{signal}"
    assert f"export NEMO_LEAD_DEADLINE_MARGIN_S={margin}  # signal USR1@{signal}" in script
    assert f"signal USR1@{signal}, deadline margin {margin} s (plan: step {step:,.0f} s" in note  # the dry run
    # distill and eval: one engine call instead of a step, on the slower engine for engine.kind=auto
    # (nemo_lead.launch.sizes, tests/launch/test_sizes.py)
    note, script = scripts["distill"]
    assert "(plan: an engine call at 16,384 tokens a response" in note
    assert sbatch_options(script)["signal"] != "USR1@300" and "export NEMO_LEAD_DEADLINE_MARGIN_S=" in script

    # the user's settings win: signal_seconds for every job, env.NEMO_LEAD_DEADLINE_MARGIN_S for the margin
    script = _scripts(signal_seconds=600, env={"NEMO_LEAD_DEADLINE_MARGIN_S": "50"})["stage1"][1]
    assert sbatch_options(script)["signal"] == "USR1@600"
    assert "export NEMO_LEAD_DEADLINE_MARGIN_S=50" in script and f"MARGIN_S={margin}" not in script


def test_a_time_limit_shorter_than_a_step_is_refused_naming_the_stage():
    with pytest.raises(ValueError, match=r"job 'stage1': one step, a checkpoint and the margin \(signal USR1@\d+, "
                                         r".*not less than its time limit 01:00:00 \(3,600 s\).*stage_slurm.stage1.time"):
        _scripts(stage_slurm={"stage1": {"time": "01:00:00"}})
