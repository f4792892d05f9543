"""What `nemo-lead submit` asks SLURM for, from the plan (nemo_lead.launch.sizes): the README's and
docs/cluster.md's own commands render --mem, --cpus-per-task and a plan-sized --signal for every GPU job, no
job longer than the cap and no CPU-only stage as a job of its own; the recipe's hardware and presets stand in
for GPUs and models the login node does not have; the docs' job counts are the plan's."""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

import pytest

from nemo_lead.cli import main
from nemo_lead.config.loading import ConfigError, load_config
from nemo_lead.launch.sbatch import sbatch_options
from nemo_lead.launch.sizes import call_seconds, job_runs
from nemo_lead.launch.submit import SubmitConfig, render_jobs
from nemo_lead.launch.submit_config import time_seconds
from nemo_lead.pipeline.kinds import KINDS
from nemo_lead.pipeline.recipe import find_recipe, read_recipe
from nemo_lead.plan.settings import PlanSettings

ROOT = Path(__file__).resolve().parents[2]


def documented_command(page: str, start: str) -> list[str]:
    """The command a page's code block writes, continuation lines joined, comments dropped."""
    lines = (ROOT / page).read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(start))
    text = lines[i]
    while text.rstrip().endswith("\\"):
        i += 1
        text = text.rstrip()[:-1] + " " + lines[i]
    return shlex.split(text, comments=True)


def dry_run(argv: list[str], capsys) -> tuple[dict[str, tuple[str, dict]], str]:
    """{job: (its header line, its #SBATCH options)} of a dry run, and what it printed on stderr."""
    assert argv[0] == "nemo-lead" and "--dry-run" in argv
    assert main(argv[1:]) == 0
    out, err = capsys.readouterr()
    jobs = {}
    for part in out.split("# ===== job ")[1:]:
        head = part.splitlines()[0]
        jobs[Path(head.split(": ", 1)[1].split(";")[0]).stem] = (head, sbatch_options(part))
    return jobs, err


@pytest.mark.parametrize("page, start", [("README.md", "nemo-lead submit lead-14b"),
                                         ("docs/cluster.md", "nemo-lead submit lead-14b")])
def test_the_documented_command_asks_for_what_the_plan_says(page, start, capsys):
    jobs, err = dry_run(documented_command(page, start), capsys)
    recipe = read_recipe(find_recipe("lead-14b"))
    kinds = {s.name: s.kind for s in recipe.stages}
    host = [n for n, k in kinds.items() if not KINDS[k].needs_gpu]
    assert host and not set(host) & set(jobs)  # CPU-only stages run inside the GPU jobs
    assert set(jobs) == set(kinds) - set(host)
    for name, (head, opts) in jobs.items():
        assert opts["gpus-per-node"] == "8" and re.fullmatch(r"[1-9]\d*G", opts["mem"]), name
        assert int(opts["cpus-per-task"]) >= 2, name
        planned = re.search(r"signal (USR1@\d+), deadline margin \d+ s \(plan: ", head)
        assert planned and opts["signal"] == planned.group(1) != "USR1@300", name
        assert time_seconds(opts["time"]) <= 24 * 3600, name
    # the models are not on this machine: planned with the recipe's presets on its hardware, and said so
    assert "planned on the recipe's hardware, 8 x h100 per node" in err
    assert "planned with the shape of preset r1-distill-qwen-14b" in err
    assert "runs stage1_data first" in jobs["stage1"][0] and "runs sft_problems first" in jobs["distill"][0]


def test_the_docs_job_counts_are_the_plans(capsys):
    """docs/cluster.md's table of runs per stage against the dry run of its own command."""
    jobs, _ = dry_run(documented_command("docs/cluster.md", "nemo-lead submit lead-14b"), capsys)
    text = (ROOT / "docs" / "cluster.md").read_text()
    rows = re.findall(r"^\| (stage\w+) \| (\d+) \| ([\d,]+) s \| (\d+) \| (\d+) \|$", text, re.MULTILINE)
    assert {r[0] for r in rows} == {"stage1", "stage2a", "stage2b"}
    for stage, steps, step, per_job, runs in rows:
        head = jobs[stage][0]
        assert (f"{steps} steps x {step} s = " in head and f": {runs} runs of this job at {per_job} steps each"
                in head), (stage, head)
    # the excerpt of stage 1's batch script shows what the dry run writes
    excerpt = text.split("the RL stage 1 job, for example:")[1].split("```text")[1].split("```")[0]
    for option in ("cpus-per-task", "mem", "signal"):
        shown = re.search(rf"^#SBATCH --{option}=(\S+)$", excerpt, re.MULTILINE)
        assert shown and shown.group(1) == jobs["stage1"][1][option], (option, shown, jobs["stage1"][1][option])


def test_runs_per_stage_by_hand():
    # a day a job, 959 s margin, a 207 s checkpoint: floor((86,400 - 959 - 207) / 4,193) = 20 steps a job
    assert job_runs(100, 4193.0, 207.0, 959, 86400).endswith("5 runs of this job at 20 steps each (4 requeues)")
    assert job_runs(20, 4193.0, 207.0, 959, 86400).endswith("1 run of this job at 20 steps each (no requeue)")
    assert job_runs(21, 4193.0, 207.0, 959, 86400).endswith("2 runs of this job at 20 steps each (1 requeue)")
    assert job_runs(None, 21.0, 207.0, 125, 86400) == ""  # SFT: the data sets the steps


def test_a_call_by_hand():
    """One call of 2 problems x 3 samples of the tiny model at TP1: every sequence fits at once, so its time
    is max_tokens decode steps of the weights and the mean KV read, eager (cuda_graphs=false), plus the prefill."""
    from nemo_lead.eval.config import EvalConfig
    from nemo_lead.models.hf_config import arch_from_hf, read_hf_config
    from nemo_lead.plan.engine_memory import kv_slot_bytes
    from nemo_lead.plan.parameters import parameter_count
    from nemo_lead.plan.timing import (
        DECODE_BANDWIDTH_FRACTION,
        EAGER_HOST_S_PER_LAYER,
        forward_flops,
        gpu_named,
        update_fraction,
    )

    cfg = load_config(EvalConfig, [], ["model=tiny-qwen2", "problems_per_call=2", "sampling.n=3",
                                       "sampling.max_tokens=100", "engine.cuda_graphs=false", "engine.kind=megatron"])
    hf = read_hf_config("tiny-qwen2")
    arch, gpu = arch_from_hf(hf), gpu_named("h100")
    weights, slot = parameter_count(arch, 128) * 2, kv_slot_bytes(arch, tp=1, pp=1, e=2)
    step = (weights + 6 * (1024 + 50) * slot) / (gpu.hbm_tbps * 1e12 * DECODE_BANDWIDTH_FRACTION)
    step += EAGER_HOST_S_PER_LAYER * arch.num_layers
    prefill = forward_flops(arch, 2 * 1024, 1024) / (gpu.bf16_tflops * 1e12 * update_fraction(8192))
    assert call_seconds(cfg, hf, 128, PlanSettings(gpu="h100")) == pytest.approx(100 * step + prefill)
    # a KV budget of one sequence at full length: six waves of 100 steps
    one = (1024 + 100) * slot / 2**30
    waves = load_config(EvalConfig, [], ["model=tiny-qwen2", "problems_per_call=2", "sampling.n=3",
                                         "sampling.max_tokens=100", "engine.cuda_graphs=false", "engine.kind=megatron",
                                         f"engine.kv_cache_gib={one * 1.001}"])
    assert call_seconds(waves, hf, 128, PlanSettings(gpu="h100")) > 5.5 * 100 * step


def _recipe(tmp_path: Path, extra: str = "") -> Path:
    f = tmp_path / "r.yaml"
    f.write_text(textwrap.dedent("""\
        paths: {base: /nowhere/R1-Distill-Qwen-14B}
        stages:
          - name: rl
            kind: rl
            slurm: {time: "24:00:00"}
            actor: {model: "${paths.base}", tp: 8, sequence_parallel: true, offload_during_generation: true}
            engine: {kv_cache_gib: 71.7, tp: actor, pp: actor}
            data: {path: aime24}
            steps: 100
            rollout: {n: 8, max_tokens: 14336}
        """) + extra)
    return f


def test_a_model_the_login_node_cannot_read(tmp_path, capsys):
    """Without a preset: the whole node's memory and SLURM's usual warning, and a named GPU's memory plan is a
    note, not an exit 2; with `presets:` the plan reads the preset's shape."""
    bare = _recipe(tmp_path)
    argv = ["submit", str(bare), "--out", str(tmp_path / "run"), "plan.gpu=h100", "--dry-run"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    opts = sbatch_options(out)
    assert opts["mem"] == "0" and opts["signal"] == "USR1@300" and "cpus-per-task" not in opts
    assert "--mem=0 (the whole node): stage rl: no plan here (no HF config at '/nowhere/R1-Distill-Qwen-14B'" in out
    assert "note: rl: the memory plan is not checked here (no HF config at" in err
    assert main(argv[:-2] + ["--dry-run"]) == 0  # no GPU named, none in the recipe: left to the job, and said so
    assert "the memory plan is not checked here (name the GPUs" in capsys.readouterr().err
    _recipe(tmp_path, "presets: {base: r1-distill-qwen-14b}\nhardware: {gpu: h100}\n")
    assert main(argv[:-2] + ["--dry-run"]) == 0
    out, err = capsys.readouterr()
    opts = sbatch_options(out)
    assert opts["mem"] == "296G" and opts["cpus-per-task"] == "3" and opts["signal"] != "USR1@300"
    assert "paths.base=/nowhere/R1-Distill-Qwen-14B is not readable here: planned with the shape of preset " \
           "r1-distill-qwen-14b" in err and "not checked" not in err
    # no GPU named anywhere: the host memory, which does not depend on the GPU, is planned all the same
    _recipe(tmp_path, "presets: {base: r1-distill-qwen-14b}\n")
    assert main(argv[:-2] + ["--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert sbatch_options(out)["mem"] == "296G" and "the memory plan is not checked here" in err


def test_hardware_and_presets_are_read_and_checked(tmp_path):
    h200 = read_recipe(find_recipe("lead-14b-h200"))
    assert h200.hardware == {"gpu": "h200", "gpus_per_node": 8}  # its own GPU over lead-14b's, through _base_
    assert h200.presets == {"base_model": "r1-distill-qwen-14b", "teacher_model": "r1-distill-qwen-32b"}
    for extra, message in (("hardware: {gpus: 8}\n", r"unknown key hardware.gpus \(did you mean 'hardware.gpu'\?\)"),
                           ("hardware: {gpus_per_node: 0}\n", "hardware.gpus_per_node must be an integer >= 1"),
                           ("presets: {model: r1-distill-qwen-14b}\n", "presets.model: the recipe has no paths.model")):
        with pytest.raises(ConfigError, match=message):
            read_recipe(_recipe(tmp_path, extra))
    _recipe(tmp_path, "presets: {base: r1-distill-qwen-15b}\n")
    with pytest.raises(ConfigError, match="presets.base='r1-distill-qwen-15b' is not a conf/model preset"):
        render_jobs(load_config(SubmitConfig, [], [f"target={tmp_path / 'r.yaml'}", f"out={tmp_path / 'run'}"]))


def test_the_h200_recipe_is_planned_on_h200s(capsys):
    jobs, err = dry_run(["nemo-lead", "submit", "lead-14b-h200", "--out", "/lustre/runs/h200", "--dry-run",
                         "job.paths.base_model=/lustre/models/R1-Distill-Qwen-14B"], capsys)
    assert "planned on the recipe's hardware, 8 x h200 per node" in err
    h100, _ = dry_run(["nemo-lead", "submit", "lead-14b", "--out", "/lustre/runs/h100", "--dry-run",
                       "job.paths.base_model=/lustre/models/R1-Distill-Qwen-14B"], capsys)
    step = {name: float(re.search(r"step ([\d,]+) s", jobs[name][0]).group(1).replace(",", "")) for name in ("stage1",)}
    assert step["stage1"] < float(re.search(r"step ([\d,]+) s", h100["stage1"][0]).group(1).replace(",", ""))


def test_jobs_without_gpus_keep_slurms_defaults(tmp_path):
    """A command's job on a CPU partition (--gpus-per-node 0): no plan of GPU jobs' host memory applies."""
    (tmp_path / "sft.yaml").write_text("actor: {model: tiny-qwen2}\ndata: {path: t.jsonl}\n")
    cfg = ["command=sft", f"target={tmp_path / 'sft.yaml'}", f"out={tmp_path / 'run'}"]
    (_, _, cpu), = render_jobs(load_config(SubmitConfig, [], [*cfg, "gpus_per_node=0", "tasks_per_node=2"]))[0]
    assert "mem" not in sbatch_options(cpu) and "cpus-per-task" not in sbatch_options(cpu)
    (_, _, gpu), = render_jobs(load_config(SubmitConfig, [], cfg))[0]
    assert sbatch_options(gpu)["mem"].endswith("G") and sbatch_options(gpu)["mem"] != "0"
