"""`SubmitConfig`: what `nemo-lead submit` reads (its defaults are the fields below).

What the job runs (the "target"):

| given | each SLURM job runs |
| --- | --- |
| `target=RECIPE` (a recipe file with `stages:`, or a name in recipes/) | `nemo-lead run RECIPE --out OUT only=STAGE`, one job per GPU stage, chained with `afterok` (or the whole recipe in one job with `chain=false`); a stage that needs no GPU runs as one task at the start of the next GPU job (`host_stages=job`: a short job of its own) |
| `command=CMD` (sft, rl, eval, generate, convert, run) and optionally `target=FILE` | `nemo-lead CMD [--config FILE] out=OUT`: one job |

`job.KEY=VALUE` overrides travel to the job's command line as `KEY=VALUE` (`job.steps=200`,
`job.paths.base_model=/lustre/models/x` for a recipe). Sizes, later wins: `DEFAULT_SIZE` < a recipe stage's
`slurm: {nodes, gpus_per_node, tasks_per_node, time}` < the command line's `nodes`, `gpus_per_node` (one
task per GPU), `tasks_per_node`, `time` (given for every job) < `stage_slurm.NAME.KEY=VALUE` (one stage;
also `partition`, `account`, `qos`), every `time` at most `max_time`. The dry run prints each job's size and
where each value came from. Memory, cores and the warning before the limit come from the plan
(`nemo_lead.launch.sizes`). Credentials pass by name (`secrets`), never as values (`env`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from nemo_lead.config.fields import setting
from nemo_lead.plan.settings import PlanSettings

COMMANDS = ("sft", "rl", "eval", "generate", "convert", "run")
SIZE_KEYS = ("nodes", "gpus_per_node", "tasks_per_node", "time")
WHERE_KEYS = ("partition", "account", "qos")  # per stage too: a CPU-only stage's own job may go elsewhere
SLURM_KEYS = SIZE_KEYS + WHERE_KEYS  # what a stage's `slurm:` and stage_slurm.NAME take
DEFAULT_SIZE = {"nodes": 1, "gpus_per_node": 8, "tasks_per_node": None, "time": "04:00:00"}  # tasks: one per GPU
HOST_STAGES = ("next", "job")


# environment names that hold credentials: their values never go into a file `submit` writes (scripts, the
# run folder); the job takes them from the submitting shell by name (`secrets`, sbatch --export)
SECRET_NAME = re.compile(r"^[A-Za-z0-9_]*_(KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# NAME=value inside a shell line or an sbatch / srun option (`export HF_TOKEN=...`, `--export=ALL,X_KEY=...`)
SECRET_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z0-9_]*_(?:KEY|TOKEN|SECRET|PASSWORD))=(?=\S)", re.IGNORECASE)


def secret_refusal(name: str, where: str) -> str:
    """The message that refuses a credential's value given as `where`, saying how to pass it instead."""
    return (f"{where}: {name} looks like a credential (*_KEY, *_TOKEN, *_SECRET, *_PASSWORD), and its value would "
            f"be written in plain text to OUT/slurm/*.sbatch. Export it in the shell you submit from "
            f"(export {name}=...; or `wandb login` / a credentials file on the cluster) and pass its name: "
            f"secrets=[{name}] (the job takes it from that shell through sbatch --export; no file holds it)")


def time_seconds(value: str, key: str = "time") -> int:
    """SLURM's --time in any of its forms as seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (so 90 is 90
    minutes and 1-12 is a day and a half); a ValueError naming `key` otherwise, and for a limit of 0 or
    UNLIMITED, which leave the job no end to plan for."""
    text = str(value).strip()
    days, dash, rest = text.rpartition("-")
    fields = rest.split(":")
    if not all(f.isdigit() for f in fields) or len(fields) > 3 or (dash and not days.isdigit()):
        raise ValueError(f"{key} must be HH:MM:SS, D-HH:MM:SS or another of SLURM's --time forms (M, M:S, H:M:S, "
                         f"D-H, D-H:M, D-H:M:S), got {value!r}")
    numbers = [int(f) for f in fields]
    if dash:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    elif len(numbers) == 3:  # H:M:S
        hours, minutes, seconds = numbers
    else:  # M, M:S
        hours, (minutes, seconds) = 0, (numbers + [0])[:2]
    total = ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{key} {value!r} is no time limit; give the job one (SLURM's --time)")
    return total


@dataclass
class SubmitConfig:
    """`nemo-lead submit TARGET [flags] [key=value ...]`: render sbatch script(s) and submit them."""

    target: Optional[str] = None  # a recipe (file or name in recipes/), or the config file of `command`
    command: Optional[str] = None  # sft | rl | eval | generate | convert | run; None: the target is a recipe
    out: Optional[str] = None  # the run folder (logs and scripts in OUT/slurm/); a recipe's default: runs/<name>
    job: dict[str, Any] = field(default_factory=dict)  # overrides for the job's command (job.steps=200)
    # size of every job (None: a recipe stage's `slurm:`, else DEFAULT_SIZE); stage_slurm wins over these
    nodes: Optional[int] = None  # DEFAULT_SIZE: 1
    gpus_per_node: Optional[int] = None  # GPUs requested per node (--gpus-per-node); 0 on CPU-only partitions; 8
    tasks_per_node: Optional[int] = None  # ranks per node; None: one per GPU
    time: Optional[str] = None  # wall-clock limit in SLURM's --time forms ([D-]HH:MM:SS, M, D-H, ...); 04:00:00
    # NAME: {nodes, gpus_per_node, tasks_per_node, time, partition, account, qos}
    stage_slurm: dict[str, Any] = field(default_factory=dict)
    stages: list[str] = field(default_factory=list)  # recipe stages to submit (default: all, in order)
    chain: bool = True  # recipes: one job per GPU stage (afterok chain); false: one job runs the whole recipe
    # the longest --time of a job (most clusters cap jobs at a day): a stage that needs more continues in the
    # same job after a requeue (the loops checkpoint and requeue before the limit); null: no cap
    max_time: Optional[str] = "24:00:00"
    # stages that need no GPU (select, prepare): next = run as one task at the start of the next GPU job (the
    # chain has no CPU-only job on the GPU partition); job = each in a job of its own (one task, no GPU,
    # 00:30:00; its partition / account / qos / time from stage_slurm.NAME). A stage given in stage_slurm, and
    # one with no GPU job after it, gets its own job either way
    host_stages: str = setting("next", choices=HOST_STAGES)
    # where
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    cpus_per_task: Optional[int] = None  # None: the plan's (SFT / RL stages), else SLURM's default
    # --mem: "plan" (the plan's host memory per node, SFT / RL stages), "0" (the whole node's memory), a SLURM
    # size ("500G"), or null (no --mem)
    mem: Optional[str] = "plan"
    exclusive: bool = True  # whole nodes for jobs that ask for GPUs (usual for GPU training)
    job_name: str = "nemo-lead"  # jobs are named <job_name>-<stage or command>
    # container (pyxis / enroot); empty image: a bare-metal job with the submitting environment
    container_image: Optional[str] = None  # an enroot URI (nvcr.io#nvidia/pytorch:25.09-py3) or a .sqsh path
    container_mounts: Any = None  # pyxis's "SRC:DST[:FLAGS],..." or a list of them; the run folder is added
    container_workdir: Optional[str] = None  # None: the run folder
    container_mount_home: bool = False  # pyxis --no-container-mount-home unless true
    # preemption and time limits
    # SIGUSR1 this many seconds before the time limit (0: none), then checkpoint + requeue; None: from the plan's
    # step and checkpoint times (SFT / RL stages: nemo_lead.plan.stop_times), else 300
    signal_seconds: Optional[int] = None
    requeue: bool = True  # sbatch --requeue (needed by `scontrol requeue` and by preemption with requeue)
    # the job's environment
    executable: Optional[str] = None  # what runs `nemo-lead`; None: `nemo-lead` in a container, else this Python
    env: dict[str, str] = field(default_factory=dict)  # extra exports (NAME: value); they win over the defaults
    # names of variables the jobs take from the submitting shell (sbatch --export=ALL,NAME): credentials such as
    # WANDB_API_KEY or HF_TOKEN, whose values are never written to a file (env.NAME=value refuses them)
    secrets: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)  # shell lines before srun (module load ..., source venv)
    sbatch_args: list[str] = field(default_factory=list)  # extra #SBATCH options ("--mem=0", "--reservation=x")
    srun_args: list[str] = field(default_factory=list)  # extra srun options
    master_port: Optional[int] = None  # None: 20000 + job id % 20000 (what every rank computes alike)
    dry_run: bool = False  # print the script(s); submit nothing
    # the memory plan of each job on these GPUs before submitting (plan.gpu=h100 or plan.gpu_memory_gib=80;
    # without either the recipe's `hardware.gpu`, else it is left to the jobs); plan.check=warn|off also
    # reaches the jobs
    plan: PlanSettings = field(default_factory=PlanSettings)

    def __post_init__(self) -> None:
        if self.command is not None and self.command not in COMMANDS:
            raise ValueError(f"command must be one of {', '.join(COMMANDS)} (or unset for a recipe), "
                             f"got {self.command!r}")
        if self.command is None and not self.target:
            raise ValueError("give a recipe (nemo-lead submit RECIPE) or a command (command=rl [CONFIG_FILE])")
        check_size({k: getattr(self, k) for k in SIZE_KEYS}, "")
        if self.max_time is not None:
            time_seconds(self.max_time, "max_time")
        if self.host_stages not in HOST_STAGES:
            raise ValueError(f"host_stages must be one of {', '.join(HOST_STAGES)}, got {self.host_stages!r}")
        if self.signal_seconds is not None and self.signal_seconds < 0:
            raise ValueError(f"signal_seconds must be >= 0, got {self.signal_seconds}")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise ValueError(f"cpus_per_task must be >= 1, got {self.cpus_per_task}")
        if self.master_port is not None and not 1024 <= self.master_port < 65536:
            raise ValueError(f"master_port must be in 1024..65535, got {self.master_port}")
        if "out" in self.job:
            raise ValueError("set the run folder with out=DIR (--out), not job.out")
        for name in self.env:
            if SECRET_NAME.match(str(name)):
                raise ValueError(secret_refusal(str(name), f"env.{name}"))
        for key in ("setup", "sbatch_args", "srun_args"):
            for line in getattr(self, key):
                hit = SECRET_ASSIGNMENT.search(str(line))
                if hit:
                    raise ValueError(secret_refusal(hit.group(1), key))
        for name in self.secrets:
            if not ENV_NAME.match(str(name)):
                raise ValueError(f"secrets: {name!r} is not an environment variable's name (give the name, not "
                                 "NAME=value: the value stays in the submitting shell)")
        for name, size in self.stage_slurm.items():
            if not isinstance(size, dict):
                raise ValueError(f"stage_slurm.{name} must be a mapping of {', '.join(SLURM_KEYS)}")
            check_size(size, f"stage_slurm.{name}.")
        # pyxis's comma-separated form or a list (of either)
        items = self.container_mounts or []
        items = [items] if isinstance(items, str) else list(items)
        self.container_mounts = [m.strip() for item in items for m in str(item).split(",") if m.strip()]
        for mount in self.container_mounts:
            if not mount.startswith("/"):
                raise ValueError(f"container_mounts: {mount!r} must be an absolute SRC[:DST[:FLAGS]]")


def check_size(size: dict[str, Any], prefix: str) -> None:
    """nodes / gpus_per_node / tasks_per_node / time (and partition / account / qos) of a job; ValueErrors
    name `prefix + key`."""
    unknown = sorted(set(size) - set(SLURM_KEYS))
    if unknown:
        raise ValueError(f"unknown key {prefix}{unknown[0]}; sizes take {', '.join(SLURM_KEYS)}")
    for key in ("nodes", "gpus_per_node", "tasks_per_node"):
        value = size.get(key)
        if value is None:
            continue
        least = 0 if key == "gpus_per_node" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{prefix}{key} must be an integer >= {least}, got {value!r}")
    if isinstance(size.get("time"), (int, float)) and not isinstance(size.get("time"), bool):
        raise ValueError(f"{prefix}time {size['time']!r} is a number: YAML reads an unquoted 20:00:00 as the base-60 "
                         f"number 72000; quote it (time: \"20:00:00\")")
    if size.get("time") is not None:
        time_seconds(size["time"], prefix + "time")
    for key in WHERE_KEYS:
        if size.get(key) is not None and (not isinstance(size[key], str) or not size[key].strip()):
            raise ValueError(f"{prefix}{key} must be a name, got {size[key]!r}")
