"""`nemo-lead submit` scripts: their structure for 1 and 4 nodes, with and without a container, recipes as
chains of stage jobs, and the script run for real against stand-in `srun` / `scontrol` (no cluster)."""

import contextlib
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from nemo_lead.cli import main
from nemo_lead.config.loading import ConfigError, load_config
from nemo_lead.launch.sbatch import TASK_WRAPPER, sbatch_options
from nemo_lead.launch.submit import SubmitConfig, render_jobs


def config(*overrides: str) -> SubmitConfig:
    return load_config(SubmitConfig, [], list(overrides))


def srun_words(script: str) -> list[str]:
    line = next(line for line in script.splitlines() if line.startswith("srun "))
    return line.rstrip(" \\").split()


def command_line(script: str) -> str:
    return next(line for line in script.splitlines() if line.startswith("cmd=("))


@pytest.fixture
def rl_config_file(tmp_path):
    f = tmp_path / "conf" / "my-rl.yaml"
    f.parent.mkdir()
    f.write_text("steps: 10\n")
    return f


@pytest.fixture
def recipe(tmp_path):
    f = tmp_path / "recipe.yaml"
    f.write_text(textwrap.dedent("""\
        description: three stages
        stages:
          - name: pick
            kind: select
            problems: [aime24]
          - name: distill
            kind: distill
            slurm: {nodes: 2, time: "02:00:00"}
            model: tiny-qwen2
            data: ${stage:pick.data}
          - name: rl1
            kind: rl
            actor: {model: tiny-qwen2}
            data: {path: "${stage:pick.data}"}
          - name: eval
            kind: eval
            slurm: {nodes: 1, gpus_per_node: 4, time: "01:00:00"}
            models: {rl: "${stage:rl1.checkpoint}"}
        """))
    return f


def test_one_node_bare_metal(tmp_path, rl_config_file):
    out = tmp_path / "runs" / "rl1"
    (name, note, script), = render_jobs(config(str(f"target={rl_config_file}"), "command=rl", f"out={out}",
                                               "job.steps=20", "job.lead.alpha=0.1"))[0]
    # no model to plan with (the config names none): the whole node's memory, saying why
    assert name == "rl" and note.startswith("1 node(s) x 8 GPU(s), 8 task(s) per node, time 04:00:00; --mem=0 (the "
                                            "whole node): no plan here (invalid configuration: --model is required")
    opts = sbatch_options(script)
    assert opts["mem"] == "0" and "cpus-per-task" not in opts
    assert opts["nodes"] == "1" and opts["ntasks-per-node"] == "8" and opts["gpus-per-node"] == "8"
    assert opts["time"] == "04:00:00" and opts["signal"] == "USR1@300" and opts["requeue"] is True
    assert opts["output"] == f"{out}/slurm/rl-%j.log" and opts["open-mode"] == "append"
    assert opts["chdir"] == str(out) and opts["job-name"] == "nemo-lead-rl" and opts["exclusive"] is True
    assert "partition" not in opts and "account" not in opts
    assert "container" not in script
    # the command: this Python, the config file, the run folder, the job's overrides
    assert command_line(script) == (f"cmd=({sys.executable} -m nemo_lead.cli rl --config {rl_config_file} "
                                    f"out={out} steps=20 lead.alpha=0.1)")
    words = srun_words(script)
    assert words[:4] == ["srun", "--kill-on-bad-exit=1", "--nodes=1", "--ntasks-per-node=8"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in script and "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in script
    assert "HF_HUB_OFFLINE=1" in script
    # caches: Hugging Face's in the run folder, compiled kernels on the node; env.NAME wins
    assert f'\nexport HF_HOME="{out}/cache/huggingface"\n' in script
    for name, folder in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("XDG_CACHE_HOME", "xdg")):
        assert f'\nexport {name}="/tmp/nemo-lead-${{SLURM_JOB_ID:-job}}/{folder}"\n' in script
    (_, _, mine), = render_jobs(config(f"target={rl_config_file}", "command=rl", f"out={out}",
                                       "env.TRITON_CACHE_DIR=/scratch/t"))[0]
    assert mine.count("TRITON_CACHE_DIR=") == 1 and "\nexport TRITON_CACHE_DIR=/scratch/t\n" in mine
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_four_nodes_in_a_container(tmp_path, rl_config_file):
    out = tmp_path / "runs" / "rl4"
    jobs, run_dir = render_jobs(config(
        f"target={rl_config_file}", "command=rl", f"out={out}", "nodes=4", "gpus_per_node=8", "time=1-00:00:00",
        "partition=batch", "account=llm", "container_image=nvcr.io#nvidia/pytorch:25.09-py3",
        "container_mounts=[/lustre:/lustre, /scratch/data:/data:ro]", "signal_seconds=600"))
    assert run_dir == str(out)
    (_, _, script), = jobs
    opts = sbatch_options(script)
    assert opts["nodes"] == "4" and opts["ntasks-per-node"] == "8" and opts["gpus-per-node"] == "8"
    assert opts["time"] == "1-00:00:00" and opts["signal"] == "USR1@600"
    assert opts["partition"] == "batch" and opts["account"] == "llm"
    words = srun_words(script)
    assert "--nodes=4" in words and "--ntasks-per-node=8" in words
    assert "--container-image=nvcr.io#nvidia/pytorch:25.09-py3" in " ".join(words)
    assert "--no-container-mount-home" in words and f"--container-workdir={out}" in words
    mounts = next(w for w in words if w.startswith("--container-mounts=")).split("=", 1)[1].split(",")
    # the user's mounts, then the run folder and the config's folder (neither is under a mount)
    assert mounts == ["/lustre:/lustre", "/scratch/data:/data:ro", f"{out}:{out}",
                      f"{rl_config_file.parent}:{rl_config_file.parent}"]
    assert command_line(script).startswith("cmd=(nemo-lead rl --config ")  # the image's own nemo-lead
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_mounts_that_cover_the_run_folder_are_not_repeated(tmp_path, rl_config_file):
    (_, _, script), = render_jobs(config(f"target={rl_config_file}", "command=rl", f"out={tmp_path}/run",
                                         "container_image=img.sqsh", f"container_mounts=[{tmp_path}]"))[0]
    assert f"--container-mounts={tmp_path}:{tmp_path} " in script  # SRC alone means SRC:SRC; nothing added


def test_recipe_becomes_a_chain_of_stage_jobs(tmp_path, recipe):
    jobs, run_dir = render_jobs(config(f"target={recipe}", f"out={tmp_path}/lead", "nodes=4",
                                       "stage_slurm.rl1.time=20:00:00", "job.paths.base_model=/m"))
    # the stage that needs no GPU runs as one task at the start of the next GPU job, not as a job of its own
    assert [name for name, _, _ in jobs] == ["distill", "rl1", "eval"]
    sizes = {name: sbatch_options(s) for name, _, s in jobs}
    lines = jobs[0][2].splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("srun ") and "--ntasks=1" in line)
    assert lines[at].split()[:4] == ["srun", "--kill-on-bad-exit=1", "--nodes=1", "--ntasks=1"]
    assert lines[at + 1].endswith(f"run {recipe} --out {run_dir} only=pick paths.base_model=/m || exit $?")
    assert at < next(i for i, line in enumerate(lines) if line.startswith("cmd=("))
    assert jobs[0][1].startswith("runs pick first (no GPU: one task each, seconds); 4 node(s) x 8 GPU(s)")
    # the flags win over a stage's slurm: (and say so), stage_slurm over both; the rest comes from the recipe
    assert (sizes["distill"]["nodes"], sizes["distill"]["time"]) == ("4", "02:00:00")
    assert (sizes["rl1"]["nodes"], sizes["rl1"]["time"], sizes["rl1"]["gpus-per-node"]) == ("4", "20:00:00", "8")
    assert (sizes["eval"]["nodes"], sizes["eval"]["gpus-per-node"], sizes["eval"]["ntasks-per-node"]) == ("4", "4", "4")
    notes = {name: note for name, note, _ in jobs}
    assert notes["distill"].endswith("4 node(s) x 8 GPU(s), 8 task(s) per node, time 02:00:00; from the command "
                                     "line: nodes 4 (the recipe says 2)")
    flagless, _ = render_jobs(config(f"target={recipe}", f"out={tmp_path}/lead"))
    assert {n: sbatch_options(s)["nodes"] for n, _, s in flagless} == {"distill": "2", "rl1": "1", "eval": "1"}
    for name, _, script in jobs:
        assert command_line(script).endswith(f"run {recipe} --out {run_dir} only={name} paths.base_model=/m)")
        assert sbatch_options(script)["output"] == f"{run_dir}/slurm/{name}-%j.log"
    assert [note.split("; ")[0] for _, note, _ in jobs[1:]] == [
        "starts after job 'distill' succeeded (afterok)", "starts after job 'rl1' succeeded (afterok)"]
    # host_stages=job: a short job of its own, one task without GPUs, on the partition stage_slurm names
    own, _ = render_jobs(config(f"target={recipe}", f"out={tmp_path}/lead", "host_stages=job", "partition=gpu",
                                "stage_slurm.pick.partition=cpu", "stage_slurm.pick.qos=short"))
    assert [n for n, _, _ in own] == ["pick", "distill", "rl1", "eval"] and "--ntasks=1" not in own[1][2]
    pick = sbatch_options(own[0][2])
    assert (pick["nodes"], pick["ntasks-per-node"], pick["time"], pick["partition"], pick["qos"]) == (
        "1", "1", "00:30:00", "cpu", "short")
    assert "gpus-per-node" not in pick and "exclusive" not in pick
    assert sbatch_options(own[1][2])["partition"] == "gpu"  # the others: the command line's
    assert own[0][1].startswith("1 node(s) x 0 GPU(s), 1 task(s) per node, time 00:30:00, partition cpu, qos short")
    one, _ = render_jobs(config(f"target={recipe}", f"out={tmp_path}/lead", "chain=false"))
    assert len(one) == 1 and command_line(one[0][2]).endswith(f"run {recipe} --out {run_dir})")
    some, _ = render_jobs(config(f"target={recipe}", f"out={tmp_path}/lead", "stages=[rl1, eval]"))
    assert [name for name, _, _ in some] == ["rl1", "eval"]


def test_recipe_bases_and_names(tmp_path, recipe):
    child = tmp_path / "child.yaml"
    child.write_text(f"_base_: {recipe.name}\nstages:\n  - name: rl1\n    slurm: {{nodes: 8}}\n")
    jobs, run_dir = render_jobs(config(f"target={child}"))
    assert run_dir == os.path.abspath("runs/child")  # a recipe's default run folder, as `nemo-lead run` has it
    assert [(n, sbatch_options(s)["nodes"]) for n, _, s in jobs] == [("distill", "2"), ("rl1", "8"), ("eval", "1")]


@pytest.mark.parametrize("overrides, message", [
    (["time=4h"], "time must be HH:MM:SS"),
    (["signal_seconds=7200", "time=01:00:00"], "signal_seconds (7200) must be shorter"),
    (["stage_slurm.train.nodes=2"], "no stage 'train'"),
    (["stage_slurm.rl1.nodez=2"], "unknown key stage_slurm.rl1.nodez"),
    (["nodes=0"], "nodes must be an integer >= 1"),
    (["job.out=/x"], "not job.out"),
])
def test_bad_settings_name_the_key(tmp_path, recipe, overrides, message):
    with pytest.raises((ConfigError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")):
        render_jobs(config(f"target={recipe}", f"out={tmp_path}/r", *overrides))


def test_command_needs_a_run_folder_and_an_existing_config(tmp_path):
    with pytest.raises(ConfigError, match="out must name the run folder"):
        render_jobs(config("command=sft"))
    with pytest.raises(ConfigError, match="config file not found"):
        render_jobs(config(f"target={tmp_path}/nope.yaml", "command=sft", f"out={tmp_path}/r"))
    with pytest.raises(ConfigError, match=r"recipe '.*nope.yaml' is neither a file nor one of recipes/; the recipes: "
                                          r"ablation-7b-grpo, .*lead-14b"):
        render_jobs(config(f"target={tmp_path}/nope.yaml", f"out={tmp_path}/r"))


@pytest.mark.parametrize("argv, hint", [
    (["submit", "lead14b", "--dry-run"], "did you mean 'lead-14b' or 'lead-14b-h200'"),
    (["plan", "lead14b", "--gpus", "8"], "did you mean 'lead-14b' or 'lead-14b-h200'"),
    (["submit", "lead-14b", "--partitoin", "batch"], "--partitoin: did you mean --partition?"),
    (["submit", "lead-14b", "--contaner-image=x"], "--contaner-image=x: did you mean --container-image or"),
    (["plan", "lead-14b", "--gpus", "8", "--gpu-memroy-gib", "80"], "did you mean --gpu-memory-gib?"),
])
def test_typos_get_the_nearest_names(tmp_path, monkeypatch, capsys, argv, hint):
    monkeypatch.chdir(tmp_path)  # a recipe name, not a file here
    with pytest.raises(SystemExit) if "--" in hint else contextlib.nullcontext():
        assert main(argv) == 2
    assert hint in capsys.readouterr().err


def test_cli_dry_run_prints_every_job_and_writes_nothing(tmp_path, recipe, capsys):
    out = tmp_path / "lead"
    assert main(["submit", str(recipe), "--out", str(out), "--nodes", "2", "--container-image", "img.sqsh",
                 "--container-mounts", "/lustre,/data:/data,/models:/models:ro", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("#!/bin/bash") == 3 and f"# ===== job 3 of 3: {out}/slurm/eval.sbatch" in printed
    # how each is handed to SLURM: after the one before it succeeded
    assert f"\n# sbatch --parsable {out}/slurm/distill.sbatch\n" in printed
    assert (f"\n# sbatch --parsable --dependency=afterok:<job id of rl1> --kill-on-invalid-dep=yes "
            f"{out}/slurm/eval.sbatch\n") in printed
    assert "--container-mounts=/lustre:/lustre,/data:/data,/models:/models:ro," in printed
    assert not out.exists()
    assert main(["submit", str(recipe), "--out", str(out), "--container-mounts", "data:/data", "dry_run=true"]) == 2
    assert "container_mounts: 'data:/data' must be an absolute" in capsys.readouterr().err


def test_cli_without_sbatch_says_where_to_run(tmp_path, recipe, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["submit", str(recipe), "--out", str(tmp_path / "r")]) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err


FAKE_SRUN = """#!/bin/bash
# stands in for srun: runs the command once per task with SLURM's task variables
nodes=1; per_node=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes=*) nodes="${1#*=}" ;; --ntasks-per-node=*) per_node="${1#*=}" ;; --*) ;; *) break ;;
  esac
  shift
done
n=$((nodes * per_node))
for ((i = 0; i < n; i++)); do
  SLURM_PROCID=$i SLURM_LOCALID=$((i % per_node)) SLURM_NTASKS=$n "$@" || exit $?
done
"""
FAKE_SCONTROL = """#!/bin/bash
[ "$1 $2 $3" = "show hostnames gpu[07-10]" ] && printf 'gpu07\\ngpu08\\ngpu09\\ngpu10\\n'
"""


def test_script_gives_every_task_its_rank_and_the_rendezvous(tmp_path, rl_config_file):
    """The rendered script, run by bash with stand-in srun / scontrol: each of the 4 x 2 tasks sees the
    torchrun-style variables the entry points read, and starts with SIGUSR1 ignored."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    probe = ("import os, signal; print('TASK', *(os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', "
             "'MASTER_ADDR', 'MASTER_PORT')), signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN)")
    (_, _, script), = render_jobs(config(f"target={rl_config_file}", "command=rl", f"out={tmp_path}/run",
                                         "nodes=4", "gpus_per_node=2", f"executable={sys.executable} -c \"{probe}\""))[0]
    assert shlex.quote(TASK_WRAPPER) in script
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": "gpu[07-10]"}
    env.pop("MASTER_PORT", None)
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    tasks = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("TASK")]
    assert tasks == [[str(r), str(r % 2), "8", "gpu07", str(20000 + 4242 % 20000), "True"] for r in range(8)]
    assert "srun ended with status 0" in done.stdout


ENDING_SRUN = """#!/bin/bash
# stands in for srun: says it started, then runs until SLURM's SIGTERM ends it
touch "$STARTED"
exec sleep 60
"""
ENDING_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && echo gpu07 && exit 0
[ "$1 $2 $3 $4" = "show job -o 4242" ] && echo "JobId=4242 JobState=COMPLETING Reason=None Restarts=1 BatchFlag=1"
"""
ENDING_SINFO = """#!/bin/bash
# stands in for sinfo: node gpu08 of gpu[07-10] is down and does not answer
case " $* " in *" -n gpu[07-10] -t down,drain,fail,no_respond "*) echo "gpu08 down* (Not responding)" ;; esac
"""


def test_script_says_how_slurm_ended_an_attempt_and_which_node_was_lost(tmp_path, rl_config_file):
    """SLURM's SIGTERM to the job (here: a lost node gpu08) reaches the batch script while srun runs: it logs the
    job's state and the attempt's nodes SLURM reports down, then waits for srun. The restarted attempt names the
    previous attempt's nodes that are down (what is left to say when the lost node ran the batch script)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", ENDING_SRUN), ("scontrol", ENDING_SCONTROL), ("sinfo", ENDING_SINFO)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    out = tmp_path / "run"
    (out / "slurm").mkdir(parents=True)
    (_, _, script), = render_jobs(config(f"target={rl_config_file}", "command=rl", f"out={out}", "nodes=4"))[0]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": "gpu[07-10]", "STARTED": str(tmp_path / "started")}
    attempt = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():  # srun is running
        assert time.monotonic() < deadline and attempt.poll() is None, attempt.communicate()[0]
        time.sleep(0.05)
    os.killpg(attempt.pid, signal.SIGTERM)  # as slurmd signals every process of the job
    log = attempt.communicate(timeout=60)[0]
    assert re.search(r"\[nemo-lead\] job 4242 \(rl\): SLURM ends this attempt \(SIGTERM\) at \S+Z: "
                     r"JobState=COMPLETING Reason=None Restarts=1\n", log), log
    assert "[nemo-lead] job 4242 (rl): nodes of this attempt that SLURM reports down: gpu08 down* (Not responding)\n" in log
    assert "[nemo-lead] job 4242 (rl): srun ended with status 143" in log  # it waited for srun to end
    assert (out / "slurm" / ".rl-4242.nodes").read_text() == "gpu[07-10]\n"
    # the requeued attempt, on other nodes
    (tmp_path / "started").unlink()
    env.update(SLURM_RESTART_COUNT="1", SLURM_JOB_NODELIST="gpu[01-04]")
    attempt = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and attempt.poll() is None, attempt.communicate()[0]
        time.sleep(0.05)
    os.killpg(attempt.pid, signal.SIGKILL)
    log = attempt.communicate(timeout=60)[0]
    assert log.splitlines()[:2] == [
        log.splitlines()[0],
        "[nemo-lead] job 4242 (rl): of the previous attempt's nodes (gpu[07-10]), SLURM reports down: gpu08 down* "
        "(Not responding)"]
    assert log.startswith("[nemo-lead] job 4242 (rl) attempt 2 on gpu[01-04] at ")
    assert (out / "slurm" / ".rl-4242.nodes").read_text() == "gpu[01-04]\n"
