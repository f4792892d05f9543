"""Step time of the off-policy layouts (`rollout.lag`, `rollout.generator_ranks`) against synchronous RL.

CPU (the default; 2 ranks, one torch thread each, one core each on a 2-core machine):
- `sync DP2`: the colocated on-policy loop on 2 data-parallel ranks (both generate half, both train half);
  the baseline;
- `sync 1+1`: the split layout, 1 trainer + 1 generator, lag 0 (each side waits for the other);
- `lag-1 1+1`: the split layout with `rollout.lag=1` (generation of step t+2 overlaps training of step t+1).
Each layout runs `nemo-lead rl` (`rl_job` on local ranks) from the same random tiny model, prompts without a
stop token (every sample runs the whole budget, so every step generates the same number of tokens); the runs
alternate (`--repeats`). Figures: the median `time/step` over the steps after the first two (warm-up, and
the lag's queue filling), the trainer's idle share (`time/wait_rollouts` / `time/step`), the generator's
(`time/wait_weights` / its time per batch: sampling + grading + waiting), the trainer's blocking share of a
weight send (`time/send_weights`: copying the weights into host buffers and starting the sends), and each
layout's step time over sync DP2's. On 2 cores no speed-up over DP2 is expected: the split gives each side
one core, DP2 gives each phase both.

    OMP_NUM_THREADS=1 .venv/bin/python bench/lag_bench.py [--steps 10] [--repeats 2] [--record]
    .venv/bin/python bench/lag_bench.py --gpu --record --out /tmp/lag.json     # the 1.5B shape on one GPU
    .venv/bin/python bench/lag_bench.py --gpu --dry-run                         # its code path on the CPU

GPU (`--gpu`): the R1-Distill-Qwen-1.5B shape (random bf16 weights, local layer spec, the R1 tokenizer), 32
prompts x 8 samples, 512 new tokens, no stop token; `sync` (the colocated loop, one process) against `lag-1
1+1` (two processes sharing the one GPU: trainer and generator each hold the model; weights cross through
host memory). Two processes on one GPU share its SMs, so this measures what overlap buys when decoding
leaves the GPU underused, not the two-GPU layout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from results_md import add_gpu_mode_args, emit_json, machine_line, require_gpu
from results_md import record as record_md

CPU = dict(model=dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2), prompts=8, n=8, max_tokens=96, precision="fp32")
GPU = dict(model="r1-distill-qwen-1.5b", prompts=32, n=8, max_tokens=512, precision="bf16")
DRY = dict(model="tiny-qwen2", prompts=4, n=4, max_tokens=16, precision="fp32")
LAYOUTS = {  # name: (ranks, overrides)
    "sync DP2": (2, []),
    "sync 1+1": (2, ["rollout.generator_ranks=1"]),
    "lag-1 1+1": (2, ["rollout.generator_ranks=1", "rollout.lag=1", "lead.rollout_correction.mode=tis"]),
}
GPU_LAYOUTS = {"sync": (1, []), "lag-1 1+1": LAYOUTS["lag-1 1+1"]}


def _prepare(work: Path, shape: dict) -> list[str]:
    """The model, tokenizer and problems in `work`; the overrides every layout shares."""
    from rl_step_bench import problems_file, tokenizer_folder

    data = problems_file(shape["prompts"] * 4, work)
    if isinstance(shape["model"], dict):  # a random model of that shape with the character tokenizer
        from nemo_lead.models import write_tiny_model

        model = write_tiny_model(work / "model", family="qwen2", seed=0, **shape["model"])
        model_keys = [f"actor.model={model}"]
    else:
        model_keys = [f"actor.model={shape['model']}", f"tokenizer={tokenizer_folder(shape is DRY, work)}"]
    return [*model_keys, f"data.path={data}", f"prompts_per_step={shape['prompts']}", f"rollout.n={shape['n']}",
            f"rollout.max_tokens={shape['max_tokens']}", "rollout.stop_at_eos=false", "rollout.temperature=1.0",
            f"actor.precision={shape['precision']}", "actor.layer_spec=local", "save_every=0", "save_every_minutes=0",
            "log_rollouts=false", "tensorboard=false", "progress=none", "data.shuffle=false"]


def run_layout(name: str, layouts: dict, common: list[str], steps: int, out: Path) -> list[dict]:
    """One `nemo-lead rl` run of a layout; its metrics.jsonl rows."""
    from nemo_lead.cli import resolve_config
    from nemo_lead.parallel.local import run_local
    from nemo_lead.training.rl.loop import rl_job

    ranks, extra = layouts[name]
    shutil.rmtree(out, ignore_errors=True)
    cfg = resolve_config("rl", [], [*common, f"out={out}", f"steps={steps}", *extra])
    run_local(rl_job, ranks, args=(cfg,), start_method="spawn", timeout=3600)
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def figures(rows: list[dict]) -> dict[str, float]:
    """Medians over the steps after the first two, and the idle shares over the same steps."""
    rows = rows[2:]
    total = sum(r["time/step"] for r in rows)
    gen_time = sum(r["time/generate"] + r["time/verify"] + r.get("time/wait_weights", 0.0) for r in rows)
    out = {"step_s": statistics.median(r["time/step"] for r in rows),
           **{k.split("/")[1] + "_s": statistics.median(r[k] for r in rows)
              for k in ("time/generate", "time/logprobs", "time/train")},
           "trainer_idle": sum(r.get("time/wait_rollouts", 0.0) for r in rows) / total}
    if "time/wait_weights" in rows[0]:
        out["generator_idle"] = sum(r["time/wait_weights"] for r in rows) / gen_time
        out["send_weights_s"] = statistics.mean(r["time/send_weights"] for r in rows)
    return out


def measure(layouts: dict, common: list[str], steps: int, repeats: int, work: Path) -> dict:
    per_run: dict[str, list[dict]] = {name: [] for name in layouts}
    for rep in range(repeats):  # alternated: the machine's load drifts
        for name in layouts:
            rows = run_layout(name, layouts, common, steps, work / f"run{rep}_{name.replace(' ', '_')}")
            per_run[name].append(figures(rows))
            print(f"[lag_bench] {name} (run {rep + 1}): {per_run[name][-1]}", file=sys.stderr, flush=True)
    summary = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in per_run.items()}
    base = next(iter(summary))
    for name in summary:
        summary[name]["step_over_baseline"] = summary[name]["step_s"] / summary[base]["step_s"]
        summary[name]["per_run_step_s"] = [r["step_s"] for r in per_run[name]]
    return {"baseline": base, "layouts": summary}


def weight_megabytes(common: list[str]) -> float:
    """The actor's parameter bytes (one version of the weights on the wire), counted on a meta-device copy."""
    import torch
    import transformers

    from nemo_lead.cli import resolve_config
    from nemo_lead.models.source import model_source

    cfg = resolve_config("rl", [], [*common, "out=unused", "steps=1"])
    hf = dict(model_source(cfg.actor.model, cfg.tokenizer).hf_config)
    config = transformers.AutoConfig.for_model(hf.pop("model_type"), **hf)
    with torch.device("meta"):
        params = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    return params * (2 if cfg.actor.precision == "bf16" else 4) / 1e6


def table(result: dict) -> list[str]:
    rows = ["| layout | step (median s) | step / baseline | generate s | logprobs s | train s | trainer idle | "
            "generator idle | weight send s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, f in result["layouts"].items():
        gen = f"{f['generator_idle']:.0%}" if "generator_idle" in f else "-"
        send = f"{f['send_weights_s']:.4f}" if "send_weights_s" in f else "-"
        runs = ", ".join(f"{x:.3f}" for x in f["per_run_step_s"])
        rows.append(f"| {name} | {f['step_s']:.3f} ({runs}) | {f['step_over_baseline']:.2f}x | {f['generate_s']:.3f} | "
                    f"{f['logprobs_s']:.3f} | {f['train_s']:.3f} | {f['trainer_idle']:.0%} | {gen} | {send} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_gpu_mode_args(ap, "the 1.5B shape: sync against lag-1 1+1 on one GPU")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md (rl:lag / rl:lag-gpu)")
    args = ap.parse_args()
    if args.gpu:
        require_gpu(args)
    shape = (DRY if args.dry_run else GPU) if args.gpu else CPU
    layouts = GPU_LAYOUTS if args.gpu else LAYOUTS
    steps = 4 if args.gpu else args.steps
    repeats = 1 if args.gpu else args.repeats
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="lag-bench-"))
    try:
        common = _prepare(work, shape)
        result = measure(layouts, common, steps, repeats, work)
        result["weights_mb"] = weight_megabytes(common)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update(shape={k: v for k, v in shape.items()}, steps=steps, repeats=repeats)
    emit_json(result, args.out)
    print("\n".join(table(result)))
    if args.record and not args.dry_run:
        record(result, args, load_start)


def record(result: dict, args: argparse.Namespace, load_start: tuple[float, ...]) -> None:
    import torch

    s = result["shape"]
    where = f"{torch.cuda.get_device_name()}, torch {torch.__version__}" if args.gpu else f"torch {torch.__version__}"
    command = ("python bench/lag_bench.py --gpu --record" if args.gpu else
               f"OMP_NUM_THREADS=1 .venv/bin/python bench/lag_bench.py --steps {args.steps} --repeats {args.repeats} --record")
    model = s["model"] if isinstance(s["model"], str) else "random Qwen2, " + ", ".join(f"{k} {v}" for k, v in s["model"].items())
    body = [
        f"Command: `{command}`; {where}; {machine_line(None if args.gpu else 1, load_start)}.",
        "",
        f"Setup: {model} ({s['precision']}, local layer spec), {s['prompts']} prompts x {s['n']} samples, "
        f"{s['max_tokens']} new tokens, no stop token; {result['steps']} steps per run, medians over steps 3 and "
        f"later, {result['repeats']} alternated run(s) per layout (each run's median in brackets); one version of "
        f"the weights is {result['weights_mb']:.1f} MB. Baseline: {result['baseline']}.",
        "",
        *table(result),
        "",
        "- trainer idle: share of the trainer's step time spent waiting for its batch; generator idle: share of "
        "the generator's time per batch spent waiting for weights; weight send: what a send blocks the trainer "
        "for (copy into host buffers, start the sends, wait for the oldest in flight).",
    ]
    if args.gpu:
        record_md("rl", "lag-gpu", "Fixed-lag off-policy RL at the 1.5B shape (one GPU)", body)
    else:
        record_md("rl", "lag", "Fixed-lag off-policy RL on 2 CPU cores: sync DP2, sync 1+1 split, lag-1 1+1 split", body)


if __name__ == "__main__":
    main()
