"""`nemo-lead submit`: render the sbatch script(s) of a recipe or a command and hand them to SLURM.

    nemo-lead submit lead-14b --out /lustre/runs/lead-14b --nodes 4 --container-image /lustre/nemo-lead.sqsh \
        --container-mounts /lustre:/lustre --partition batch --account me job.paths.base_model=/lustre/models/x
    nemo-lead submit conf/my-rl.yaml command=rl --out /lustre/runs/rl1 --nodes 2 job.steps=200
    nemo-lead submit lead-14b --out DIR --dry-run        # print the scripts, submit nothing

Without `dry_run` the scripts are written to OUT/slurm/<name>.sbatch and submitted in order (each stage of
a recipe after the previous one succeeded: `--dependency=afterok`, `--kill-on-invalid-dep=yes`), and the
job ids, log files and run folder are printed; OUT/slurm/submitted.jsonl keeps a line per job. What the
target and the sizes mean: `nemo_lead.launch.submit_config`; the script itself: `nemo_lead.launch.sbatch`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nemo_lead.launch.jobs import plan_jobs
from nemo_lead.launch.sbatch import container_mounts, log_path, render_sbatch
from nemo_lead.launch.sizes import check_submit, host_sizes, planned_config
from nemo_lead.launch.submit_config import SubmitConfig

__all__ = ["SubmitConfig", "run_submit", "render_jobs", "sbatch_argv", "submit_script"]


def render_jobs(cfg: SubmitConfig) -> tuple[list[tuple[str, str, str]], str]:
    """[(job name, header note, script)] in submission order, and the run folder. Pure."""
    plans, run_dir, needed = plan_jobs(cfg)
    plans = host_sizes(planned_config(cfg)[0], plans)
    mounts = container_mounts(cfg, needed) if cfg.container_image else []
    return [(p.name, "; ".join(x for x in (p.note, p.resources, p.stops) if x), render_sbatch(cfg, p, run_dir, mounts))
            for p in plans], run_dir


def sbatch_argv(script: str, after: str | None = None) -> list[str]:
    """How `submit` hands a script to SLURM: after the previous job of the chain succeeded, and cancelled when
    that one fails (`--kill-on-invalid-dep`)."""
    args = ["sbatch", "--parsable"]
    if after:
        args += [f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes"]
    return [*args, script]


def submit_script(script: Path, after: str | None = None) -> str:
    """`sbatch --parsable [--dependency=afterok:AFTER] SCRIPT`; the job id. RuntimeError with SLURM's message."""
    try:
        done = subprocess.run(sbatch_argv(str(script), after), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"sbatch {script}: no answer from SLURM within 120 s") from None
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {script} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip().split(";")[0]


def run_submit(cfg: SubmitConfig) -> int:
    """The `nemo-lead submit` command; exit status 0 submitted (or printed), 1 SLURM refused, 2 bad input."""
    try:
        jobs, run_dir = render_jobs(cfg)
        planned, notes = planned_config(cfg)
        if check_submit(cfg, planned, plan_jobs(cfg)[0], notes):
            return 2
    except (ValueError, OSError) as e:
        print(f"nemo-lead submit: {e}", file=sys.stderr)
        return 2
    log_dir = Path(run_dir) / "slurm"
    unset = [name for name in cfg.secrets if not os.environ.get(name)]
    if unset and not cfg.dry_run:
        print(f"nemo-lead submit: secrets: {', '.join(unset)} not set in this shell; export them first (the jobs "
              "take their values from the submitting shell, no file holds them)", file=sys.stderr)
        return 2
    if unset:
        print(f"nemo-lead submit: note: secrets: {', '.join(unset)} not set in this shell; a submit without "
              "--dry-run refuses to start until they are", file=sys.stderr)
    if cfg.dry_run:
        for i, (name, note, script) in enumerate(jobs):
            how = f"; {note}" if note else ""
            path = str(log_dir / (name + ".sbatch"))
            print(f"# ===== job {i + 1} of {len(jobs)}: {path}{how}")
            print("# " + " ".join(sbatch_argv(path, f"<job id of {jobs[i - 1][0]}>" if i else None)))
            print(script)
        return 0
    if shutil.which("sbatch") is None:
        print("nemo-lead submit: sbatch is not on PATH: run this on a SLURM login node "
              "(--dry-run prints the scripts anywhere)", file=sys.stderr)
        return 2
    log_dir.mkdir(parents=True, exist_ok=True)
    previous: str | None = None
    submitted: list[tuple[str, str]] = []
    for name, _, script in jobs:
        path = log_dir / f"{name}.sbatch"
        path.write_text(script)
        try:
            job_id = submit_script(path, previous)
        except RuntimeError as e:
            done = ", ".join(f"{n} = job {j}" for n, j in submitted) or "none"
            print(f"nemo-lead submit: {e}\n(already submitted: {done})", file=sys.stderr)
            return 1
        with (log_dir / "submitted.jsonl").open("a") as f:
            f.write(json.dumps({"job_id": job_id, "name": name, "script": str(path), "after": previous,
                                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
        print(f"submitted job {job_id}: {name}  (log {log_path(str(log_dir), name).replace('%j', job_id)})")
        submitted.append((name, job_id))
        previous = job_id
    print(f"run folder: {run_dir}")
    return 0
