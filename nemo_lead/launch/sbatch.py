"""The sbatch script of one job: SLURM resources, rendezvous, NCCL / CUDA settings, the container, srun.

One task per GPU. Each task runs the job's command through a small wrapper that turns SLURM's task
variables into the torchrun-style ones every entry point reads (RANK <- SLURM_PROCID, LOCAL_RANK <-
SLURM_LOCALID, WORLD_SIZE <- SLURM_NTASKS; MASTER_ADDR is the allocation's first node and MASTER_PORT a
port derived from the job id, exported by the batch script) and starts it with SIGUSR1 ignored until the
training loop installs its handlers (`nemo_lead.runtime.signals`). With a container image, srun gets
pyxis's flags; without one the same script runs on a bare cluster in the submitting environment.

Preemption and time limits: `--signal=USR1@S` (no `B:`) makes SLURM signal the step's tasks S seconds
before the limit; the loop checkpoints after the current step and runs `scontrol requeue`, which needs
`--requeue`. The requeued job keeps its id and runs this script again, and the command resumes from the
run folder. Logs go to OUT/slurm/<name>-<job id>.log, appended across restarts.

Several nodes: srun starts the tasks of every node (`--nodes=N --ntasks-per-node=T`); each task's RANK is
its SLURM_PROCID (node by node: node i holds ranks i*T .. i*T+T-1), every rank meets rank 0 at the first node
of the allocation, and only rank 0 writes the run folder (checkpoints take a shard from every rank).
SLURM ends an attempt with SIGTERM to every process of the job: at its time limit, on scancel, on a requeue,
and when a node of the job stops answering (after SlurmdTimeout; the job is requeued, as it was submitted
with --requeue, and the ranks left waiting for the lost node's are killed KillWait later). The batch script
says so in the log as it happens, with the job's state and the attempt's nodes that SLURM reports down (srun
runs in the background so that the script hears the signal at once, not after srun ends), and a restarted
attempt names the nodes of the attempt before it that are down (when the lost node ran the batch script
itself, nobody was left to say so).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Optional

from nemo_lead.launch.submit_config import SubmitConfig, time_seconds
from nemo_lead.runtime.deadline import END_ENV, LIMIT_ENV, MARGIN_ENV, START_ENVS

# name -> (value, why); the user's `env` wins, and so does a value already set in the submitting shell for
# the ones written as ${NAME:-value}
DEFAULT_ENV: dict[str, tuple[str, str]] = {
    "CUDA_DEVICE_MAX_CONNECTIONS": ("1", "megatron-core: TP/SP communication kernels queue ahead of compute"),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": ("1", "a failed or timed-out collective ends the rank instead of hanging"),
    "TORCH_NCCL_AVOID_RECORD_STREAMS": ("1", "NCCL buffers are freed when the collective ends"),
    "NCCL_DEBUG": ("${NCCL_DEBUG:-WARN}", "NCCL says why when it fails"),
    "PYTORCH_CUDA_ALLOC_CONF": ("${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}",
                                "less fragmentation between rollout and training memory"),
    "OMP_NUM_THREADS": ("${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}", "host threads per rank"),
    "TOKENIZERS_PARALLELISM": ("false", "no tokenizer thread pools inside forked workers"),
    "PYTHONUNBUFFERED": ("1", "log lines reach the job's log as they are written"),
    "HF_HUB_OFFLINE": ("1", "models and data come from the shared file system, never from a hub"),
    "TRANSFORMERS_OFFLINE": ("1", "same"),
}

def cache_env(run_dir: str) -> dict[str, str]:
    """Where the jobs' libraries cache: Hugging Face's (tokenizers, datasets) in the run folder, kept across the
    chain; compiled kernels (Triton, TorchInductor) and other XDG caches on the node's own /tmp, per job (fast,
    and no file locking on a shared file system). The home folder is not mounted in the container
    (--no-container-mount-home) and may not be writable on compute nodes. `env.NAME=...` overrides each."""
    node = "/tmp/nemo-lead-${SLURM_JOB_ID:-job}"
    return {"HF_HOME": f"{run_dir.rstrip('/')}/cache/huggingface", "TRITON_CACHE_DIR": f"{node}/triton",
            "TORCHINDUCTOR_CACHE_DIR": f"{node}/inductor", "XDG_CACHE_HOME": f"{node}/xdg"}


DEFAULT_SIGNAL_S = 300  # the warning of a job without a plan of its step time (eval, distill, select)

TASK_WRAPPER = ('trap "" USR1; export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; '
                'exec "$@"')


@dataclass(frozen=True)
class SlurmJob:
    """One SLURM job: its name (a stage or a command), what each task runs, and its size."""

    name: str
    argv: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    time: str
    note: str = ""  # one line for the script's header (e.g. which stage it waits for)
    resources: str = ""  # the size in words and where it came from (printed by the dry run)
    mem_gib: Optional[int] = None  # the plan's host memory per node (GiB, SLURM's G)
    cpus_per_task: Optional[int] = None  # the plan's CPU cores per task
    signal_seconds: Optional[int] = None  # the plan's warning before the limit (nemo_lead.plan.stop_times)
    margin_s: Optional[int] = None  # the plan's deadline margin (NEMO_LEAD_DEADLINE_MARGIN_S)
    stops: str = ""  # how the plan sized the two, in words (printed by the dry run)
    # stages that need no GPU, run first as one task each: (stage name, what the task runs)
    before: tuple[tuple[str, tuple[str, ...]], ...] = ()
    partition: Optional[str] = None  # None: the submit's partition / account / qos
    account: Optional[str] = None
    qos: Optional[str] = None


def log_path(log_dir: str, name: str) -> str:
    return f"{log_dir}/{name}-%j.log"


def _no_space(value: str, key: str) -> str:
    if any(c.isspace() for c in value):
        raise ValueError(f"{key} {value!r} has white space, which #SBATCH lines cannot carry; use another path")
    return value


def container_mounts(cfg: SubmitConfig, needed: list[str]) -> list[str]:
    """cfg.container_mounts (SRC becomes SRC:SRC), plus each `needed` folder no mount covers (same path)."""
    mounts = [m if ":" in m else f"{m}:{m}" for m in cfg.container_mounts]
    targets = [m.split(":")[1].rstrip("/") or "/" for m in mounts]
    for path in needed:
        path = path.rstrip("/") or "/"
        if not any(path == t or path.startswith(t.rstrip("/") + "/") for t in targets):
            mounts.append(f"{path}:{path}")
            targets.append(path)
    return mounts


def srun_line(cfg: SubmitConfig, plan: SlurmJob, mounts: list[str], workdir: str, one_task: bool = False) -> list[str]:
    """The srun command (as words) that starts the job's tasks (`one_task`: a single task on the first node,
    for a stage that needs no GPU)."""
    words = ["srun", "--kill-on-bad-exit=1"]
    words += ["--nodes=1", "--ntasks=1"] if one_task else [f"--nodes={plan.nodes}",
                                                           f"--ntasks-per-node={plan.tasks_per_node}"]
    if cfg.container_image:
        words += [f"--container-image={cfg.container_image}", f"--container-workdir={workdir}"]
        if mounts:
            words.append(f"--container-mounts={','.join(mounts)}")
        words.append("--container-mount-home" if cfg.container_mount_home else "--no-container-mount-home")
    words += list(cfg.srun_args)
    return words


def signal_seconds(cfg: SubmitConfig, plan: SlurmJob) -> int:
    """SIGUSR1's seconds before the limit: `signal_seconds` when set, else the plan's (SFT / RL stages),
    else DEFAULT_SIGNAL_S; 0: none."""
    if cfg.signal_seconds is not None:
        return cfg.signal_seconds
    return plan.signal_seconds or DEFAULT_SIGNAL_S


def render_sbatch(cfg: SubmitConfig, plan: SlurmJob, run_dir: str, mounts: Optional[list[str]] = None) -> str:
    """The complete sbatch script of `plan` (pure: nothing is written or submitted). `run_dir`: the absolute
    run folder (the batch script's working folder, and the container's unless container_workdir says)."""
    _no_space(run_dir, "the run folder")
    log_dir = f"{run_dir.rstrip('/')}/slurm"
    workdir = cfg.container_workdir or run_dir
    limit = time_seconds(plan.time)
    signal = signal_seconds(cfg, plan)
    if signal and signal >= limit and (cfg.signal_seconds is not None or not plan.signal_seconds):
        raise ValueError(f"signal_seconds ({signal}) must be shorter than the time limit of job "
                         f"{plan.name!r} ({plan.time})")
    if signal and signal >= limit:
        raise ValueError(f"job {plan.name!r}: one step, a checkpoint and the margin ({plan.stops}) "
                         f"take {signal:,} s, not less than its time limit {plan.time} ({limit:,} s): give it more "
                         f"time (stage_slurm.{plan.name}.time=...) or set signal_seconds")
    name = f"{cfg.job_name}-{plan.name}"
    sb: list[str] = [f"--job-name={_no_space(name, 'job_name')}", f"--nodes={plan.nodes}",
                     f"--ntasks-per-node={plan.tasks_per_node}"]
    if plan.gpus_per_node:
        sb.append(f"--gpus-per-node={plan.gpus_per_node}")
    cpus = cfg.cpus_per_task or plan.cpus_per_task
    if cpus:
        sb.append(f"--cpus-per-task={cpus}")
    if cfg.mem == "plan" and plan.mem_gib is not None:
        sb.append(f"--mem={plan.mem_gib}G" if plan.mem_gib else "--mem=0")  # 0: no plan, the whole node
    elif cfg.mem not in (None, "plan"):
        sb.append(f"--mem={_no_space(str(cfg.mem), 'mem')}")
    sb.append(f"--time={plan.time}")
    for key in ("partition", "account", "qos"):
        value = getattr(plan, key) or getattr(cfg, key)
        if value:
            sb.append(f"--{key}={_no_space(str(value), key)}")
    if cfg.exclusive and plan.gpus_per_node:
        sb.append("--exclusive")
    sb += [f"--output={log_path(log_dir, plan.name)}", "--open-mode=append", f"--chdir={run_dir}"]
    if cfg.requeue:
        sb.append("--requeue")
    if signal:
        sb.append(f"--signal=USR1@{signal}")
    if cfg.secrets:  # by name: SLURM copies the values from the submitting shell (ALL: the rest as before)
        sb.append("--export=" + ",".join(["ALL", *cfg.secrets]))
    sb += list(cfg.sbatch_args)

    lines = ["#!/bin/bash", f"# nemo-lead job {plan.name!r}, written by `nemo-lead submit`."]
    if plan.note:
        lines.append(f"# {plan.note}")
    lines += [f"#SBATCH {opt}" for opt in sb]
    lines += ["", "set -uo pipefail",
              'echo "[nemo-lead] job $SLURM_JOB_ID (' + plan.name + ') attempt $((${SLURM_RESTART_COUNT:-0} + 1)) '
              'on $SLURM_JOB_NODELIST at $(date -u +%FT%TZ)"',
              "",
              "# rendezvous: rank 0 listens on the first node of the allocation, on a port derived from the job id",
              'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
              f"export MASTER_PORT={cfg.master_port or '$((20000 + SLURM_JOB_ID % 20000))'}",
              "",
              *_attempt_lines(plan.name, log_dir),
              "",
              f"# the job's end where SLURM does not export {END_ENV}: its start plus this limit (--time)",
              f"export {LIMIT_ENV}={limit}",
              f'export {START_ENVS[1]}="${{{START_ENVS[0]}:-$(date +%s)}}"',
              *([f"export {MARGIN_ENV}={plan.margin_s}  # {plan.stops}"]
                if plan.margin_s and MARGIN_ENV not in cfg.env else []),
              "",
              "# NCCL / CUDA / host settings"]
    for key, (value, why) in DEFAULT_ENV.items():
        if key not in cfg.env:
            lines.append(f"export {key}={value if value.startswith('${') else shlex.quote(value)}  # {why}")
    caches = [(k, v) for k, v in cache_env(run_dir).items() if k not in cfg.env]
    if caches:
        lines += ["# caches: in the run folder and on the node, never in a home folder the job may not see"]
        lines += [f'export {k}="{v}"' for k, v in caches]
    for key, value in cfg.env.items():
        lines.append(f"export {key}={shlex.quote(str(value))}")
    if cfg.secrets:
        lines += ["", "# credentials come from the submitting shell (sbatch --export), never from a file",
                  f"for name in {' '.join(cfg.secrets)}; do",
                  '  [ -n "${!name:-}" ] || { echo "[nemo-lead] $name is not set: export it in the shell that runs '
                  'nemo-lead submit" >&2; exit 1; }',
                  "done"]
    if cfg.setup:
        lines += ["", "# setup", *cfg.setup]
    for stage, argv in plan.before:
        lines += ["", f"# stage {stage} needs no GPU: one task before the job's own stage (skipped once it is done)",
                  " ".join(shlex.quote(w) for w in srun_line(cfg, plan, mounts or [], workdir, one_task=True))
                  + f" \\\n    bash -c {shlex.quote(TASK_WRAPPER)} nemo-lead-task "
                  + " ".join(shlex.quote(a) for a in argv) + " || exit $?"]
    lines += ["", "cmd=(" + " ".join(shlex.quote(a) for a in plan.argv) + ")",
              " ".join(shlex.quote(w) for w in srun_line(cfg, plan, mounts or [], workdir))
              + f" \\\n    bash -c {shlex.quote(TASK_WRAPPER)} nemo-lead-task \"${{cmd[@]}}\" &",
              "wait_for_srun $!",
              "status=$?",
              'echo "[nemo-lead] job $SLURM_JOB_ID (' + plan.name + '): srun ended with status $status at '
              '$(date -u +%FT%TZ)"',
              "exit $status", ""]
    return "\n".join(lines)


def _attempt_lines(name: str, log_dir: str) -> list[str]:
    """The script's lines that say how an attempt ends and which nodes were lost (module docstring)."""
    job = f"[nemo-lead] job $SLURM_JOB_ID ({name})"
    return [
        "# SLURM ends an attempt with SIGTERM (time limit, scancel, requeue, a node of the job lost): say so, naming",
        "# the attempt's nodes that SLURM reports down",
        "nodes_down() {  # nodes_down NODELIST: those SLURM reports down, drained or not responding, one line",
        "    timeout 10 sinfo -h -N -n \"$1\" -t down,drain,fail,no_respond -o '%N %t (%E)' 2>/dev/null | sort -u "
        "| paste -sd ' ' -",
        "}",
        "ended_by_slurm() {",
        f'    echo "{job}: SLURM ends this attempt (SIGTERM) at $(date -u +%FT%TZ): $(timeout 10 scontrol show job -o '
        '\"$SLURM_JOB_ID\" 2>/dev/null | grep -oE \'(JobState|Reason|Restarts)=[^ ]*\' | paste -sd \' \' -)"',
        '    local down; down="$(nodes_down "$SLURM_JOB_NODELIST")"',
        f'    [ -z "$down" ] || echo "{job}: nodes of this attempt that SLURM reports down: $down"',
        "}",
        "trap ended_by_slurm TERM",
        "wait_for_srun() {  # wait_for_srun PID: its status; the trap above interrupts `wait`, so wait until it ends",
        '    local status; wait "$1"; status=$?',
        '    while kill -0 "$1" 2>/dev/null; do wait "$1"; status=$?; done',
        '    return "$status"',
        "}",
        "# a restarted attempt: the nodes of the attempt before it that SLURM reports down (a requeue after a lost node)",
        f'nodes_file="{log_dir}/.{name}-$SLURM_JOB_ID.nodes"',
        'if [ -s "$nodes_file" ]; then',
        '    down="$(nodes_down "$(cat "$nodes_file")")"',
        f'    [ -z "$down" ] || echo "{job}: of the previous attempt\'s nodes ($(cat "$nodes_file")), SLURM reports down: '
        '$down"',
        "fi",
        'echo "$SLURM_JOB_NODELIST" > "$nodes_file"',
    ]


def sbatch_options(script: str) -> dict[str, Any]:
    """The #SBATCH options of a rendered script, `--key=value` -> {key: value} (flags map to True)."""
    out: dict[str, Any] = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            opt = line[len("#SBATCH "):].strip()
            key, _, value = opt.lstrip("-").partition("=")
            out[key] = value if _ else True
    return out
