"""The job's time limit: SLURM's --time in each of its forms as seconds, and the job's end where SLURM does
not export SLURM_JOB_END_TIME (the start plus the limit the `nemo-lead submit` script exports)."""

import os
import subprocess
import time

import pytest

from nemo_lead.config.loading import load_config
from nemo_lead.launch.submit import SubmitConfig, render_jobs
from nemo_lead.launch.submit_config import time_seconds
from nemo_lead.runtime.deadline import Deadline


@pytest.mark.parametrize("value, seconds", [
    ("90", 90 * 60),                          # M
    ("90:30", 90 * 60 + 30),                  # M:S
    ("1:02:03", 3600 + 2 * 60 + 3),           # H:M:S
    ("30:00:00", 30 * 3600),
    ("2-3", (2 * 24 + 3) * 3600),             # D-H
    ("2-3:04", (2 * 24 + 3) * 3600 + 4 * 60),  # D-H:M
    ("2-03:04:05", (2 * 24 + 3) * 3600 + 4 * 60 + 5),  # D-H:M:S
    ("1-00:00:00", 24 * 3600),
])
def test_every_slurm_time_form(value, seconds):
    assert time_seconds(value) == seconds


@pytest.mark.parametrize("value, message", [
    ("4h", "time must be HH:MM:SS"), ("", "time must be"), ("1:2:3:4", "time must be"), ("x-1", "time must be"),
    ("-1", "time must be"), ("UNLIMITED", "time must be"), ("0", "is no time limit"), ("0-0:00", "is no time limit"),
])
def test_bad_times_are_refused_naming_the_key(value, message):
    with pytest.raises(ValueError, match=message):
        time_seconds(value, "time")


def test_the_end_from_the_start_and_the_limit():
    limit = {"NEMO_LEAD_JOB_TIME_LIMIT_S": "3600"}
    assert Deadline.from_env({**limit, "SLURM_JOB_START_TIME": "1000"}).end == 4600
    assert Deadline.from_env({**limit, "NEMO_LEAD_JOB_START_TIME": "2000"}).end == 5600
    # SLURM's own start wins over the script's; SLURM's end wins over both
    both = {**limit, "SLURM_JOB_START_TIME": "1000", "NEMO_LEAD_JOB_START_TIME": "1003"}
    assert Deadline.from_env(both).end == 4600
    assert Deadline.from_env({**both, "SLURM_JOB_END_TIME": "9000"}).end == 9000
    assert Deadline.from_env(limit) is None and Deadline.from_env({"SLURM_JOB_START_TIME": "1000"}) is None
    with pytest.raises(ValueError, match="NEMO_LEAD_JOB_TIME_LIMIT_S='1h' is not a number of seconds"):
        Deadline.from_env({"NEMO_LEAD_JOB_TIME_LIMIT_S": "1h", "SLURM_JOB_START_TIME": "1000"})


def test_the_script_exports_the_limit_and_the_start(tmp_path):
    """The lines the script runs before srun, run by bash: the job's end is its start plus `time`."""
    (tmp_path / "rl.yaml").write_text("steps: 10\n")
    (_, _, script), = render_jobs(load_config(SubmitConfig, [], [
        f"target={tmp_path / 'rl.yaml'}", "command=rl", f"out={tmp_path / 'run'}", "time=1-12", "max_time=2-0"]))[0]
    lines = [line for line in script.splitlines() if line.startswith("export NEMO_LEAD_JOB_")]
    assert lines[0] == "export NEMO_LEAD_JOB_TIME_LIMIT_S=129600"  # 1 day 12 hours

    def end_in_job(**slurm: str) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        shown = subprocess.run(["bash", "-c", "\n".join([*lines, "env"])], env={**env, **slurm},
                               capture_output=True, text=True, check=True).stdout
        return Deadline.from_env(dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)).end

    assert end_in_job(SLURM_JOB_START_TIME="1700000000") == 1_700_000_000 + 129_600
    before = int(time.time())
    assert before + 129_600 <= end_in_job() <= time.time() + 129_600  # the script's first second


@pytest.mark.parametrize("over, time, note", [
    (["time=1-12"], "24:00:00", "time 24:00:00 (capped from 1-12 at max_time; the stage continues after a requeue)"),
    (["time=30:00:00", "max_time=12:00:00"], "12:00:00", "(capped from 30:00:00 at max_time"),
    (["time=30:00:00", "max_time=null"], "30:00:00", "time 30:00:00;"),
    (["time=20:00:00"], "20:00:00", "time 20:00:00;"),  # not YAML 1.1's base-60 number 72000 (minutes)
])
def test_no_job_is_longer_than_max_time(tmp_path, over, time, note):
    (tmp_path / "rl.yaml").write_text("steps: 10\n")
    (_, text, script), = render_jobs(load_config(SubmitConfig, [], [
        f"target={tmp_path / 'rl.yaml'}", "command=rl", f"out={tmp_path / 'run'}", *over]))[0]
    assert f"\n#SBATCH --time={time}\n" in script and note in text


def test_an_unquoted_time_in_a_recipe_is_refused(tmp_path):
    (tmp_path / "r.yaml").write_text("stages:\n  - {name: e, kind: eval, models: {m: tiny-qwen2}, slurm: {time: 20:00:00}}\n")
    with pytest.raises(Exception, match=r"stages\[e\].slurm.time 72000 is a number: YAML reads an unquoted 20:00:00"):
        render_jobs(load_config(SubmitConfig, [], [f"target={tmp_path / 'r.yaml'}", f"out={tmp_path / 'run'}"]))
