"""One GRPO-LEAD step of `nemo-lead rl`, timed phase by phase, against the engine alone on the same prompts.

GPU (`--gpu`): the R1-Distill-Qwen-1.5B shape (the `r1-distill-qwen-1.5b` preset: random weights, bf16, local
layer spec) with the real R1-Distill tokenizer (tests/data/fixtures/r1_tokenizer), 64 prompts x 8 samples,
1,024 new tokens, no stop token: every sample runs the whole budget, as the long responses of the paper do.
The loop (`nemo_lead.training.rl.loop.rl_job`) runs 2 steps; step 2 is reported (step 1 includes warm-up: CUDA
graph capture, allocator growth). Its time split (`time/generate`, `time/verify`, `time/logprobs`,
`time/train`, `time/refit`) and generated tokens/s go to bench/RESULTS.md (`rl:gpu`).

Baseline, measured in the same run: the rollout engine alone (`MegatronEngine.generate`) on the same prompts
with the same sampling settings and weights. "loop / engine" is the step's generation throughput over the
engine's own, so loop overhead (prompt rendering, DP gathers, sleep / wake) shows up as a ratio below 1;
"step / engine" is the whole step's tokens/s over the engine's (what training costs on top of sampling).

    .venv/bin/python bench/rl_step_bench.py --gpu --record --out /tmp/rl_step.json
    .venv/bin/python bench/rl_step_bench.py --gpu --dry-run        # the same code path on the CPU, tiny shape
"""

from __future__ import annotations

import json
import lzma
import shutil
import sys
import tempfile
import time
from pathlib import Path

from results_md import cuda_sync, emit_json, machine_line, parse_gpu_args
from results_md import record as record_md

ROOT = Path(__file__).resolve().parent.parent
R1_TOKENIZER = ROOT / "tests" / "data" / "fixtures" / "r1_tokenizer"
FULL = dict(model="r1-distill-qwen-1.5b", prompts=64, n=8, max_tokens=1024, precision="bf16")
DRY = dict(model="tiny-qwen2", prompts=4, n=4, max_tokens=16, precision="fp32")


def tokenizer_folder(dry: bool, work: Path) -> Path:
    """The R1-Distill tokenizer (decompressed fixture), or the tiny character tokenizer for the dry run."""
    folder = work / "tokenizer"
    if dry:
        from nemo_lead.models.tiny import char_tokenizer

        char_tokenizer().save_pretrained(folder)
        return folder
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(lzma.decompress((R1_TOKENIZER / "tokenizer.json.xz").read_bytes()))
    shutil.copy2(R1_TOKENIZER / "tokenizer_config.json", folder)
    return folder


def problems_file(count: int, work: Path) -> Path:
    path = work / "problems.jsonl"
    rows = [{"id": f"b{i}", "problem": f"What is {i} + {2 * i + 1}?", "answer": str(3 * i + 1)} for i in range(count * 4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def engine_alone(cfg, prompts: list[list[int]]) -> float:
    """Generated tokens/s of the rollout engine by itself (one warm-up call, then one timed)."""
    import dataclasses

    from nemo_lead.generation import SamplingParams, build_engine
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor

    info = init_parallel(1, 1, seed=cfg.seed)
    actor = build_actor(dataclasses.replace(cfg.actor), info)
    engine = build_engine(cfg.engine, actor)
    params = SamplingParams(n=cfg.rollout.n, temperature=cfg.rollout.temperature, max_tokens=cfg.rollout.max_tokens,
                            seed=1)
    engine.generate(prompts[:2], dataclasses.replace(params, max_tokens=8))
    cuda_sync()
    t0 = time.perf_counter()
    rollouts = engine.generate(prompts, params)
    cuda_sync()
    seconds = time.perf_counter() - t0
    del engine, actor
    destroy_parallel()
    return sum(r.num_tokens for r in rollouts) / seconds


def main() -> None:
    args = parse_gpu_args(__doc__, "time one RL step at the 1.5B shape on a GPU", "rl:gpu", "a GPU step")
    from nemo_lead.cli import resolve_config
    from nemo_lead.data import PromptConfig, prompt_token_ids
    from nemo_lead.data.problems import load_problems
    from nemo_lead.models import load_tokenizer
    from nemo_lead.runtime.quiet import hide_import_noise
    from nemo_lead.training.rl.loop import rl_job

    hide_import_noise()
    shape = DRY if args.dry_run else FULL
    work = Path(tempfile.mkdtemp(prefix="rl-step-bench-"))
    try:
        tok_dir = tokenizer_folder(args.dry_run, work)
        data = problems_file(shape["prompts"], work)
        overrides = [f"actor.model={shape['model']}", f"tokenizer={tok_dir}", f"data.path={data}", f"out={work / 'run'}",
                     "steps=2", "save_every=0", "keep_last=1", f"prompts_per_step={shape['prompts']}",
                     f"rollout.n={shape['n']}", f"rollout.max_tokens={shape['max_tokens']}", "rollout.stop_at_eos=false",
                     f"actor.precision={shape['precision']}", "actor.layer_spec=local", "progress=lines",
                     "log_rollouts=false", "tensorboard=false", "engine.max_batch_size=512"]
        cfg = resolve_config("rl", [], overrides)
        tokenizer = load_tokenizer(tok_dir)
        prompts = prompt_token_ids(tokenizer, load_problems(str(data))[: shape["prompts"]], PromptConfig())
        baseline = engine_alone(cfg, prompts)
        t0 = time.perf_counter()
        rl_job(cfg)
        wall = time.perf_counter() - t0
        step = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gen_tokens = step["samples"] * step["response_length/mean"]
    out = {
        "shape": shape, "dry_run": args.dry_run, "wall_two_steps_s": wall,
        "step2": {k: v for k, v in step.items() if k.startswith("time/") or k in ("tokens_per_s", "samples")},
        "engine_alone_tokens_per_s": baseline,
        "loop_generate_tokens_per_s": gen_tokens / step["time/generate"],
        "loop_over_engine": gen_tokens / step["time/generate"] / baseline,
        "step_over_engine": step["tokens_per_s"] / baseline,
    }
    emit_json(out, args.out)
    if args.record and not args.dry_run:
        import torch

        s = out["step2"]
        body = [
            f"- Machine: {torch.cuda.get_device_name()}, torch {torch.__version__}; {machine_line()}",
            f"- Command: `python bench/rl_step_bench.py --gpu --record` ({shape['model']} shape, random bf16 weights, "
            f"{shape['prompts']} prompts x {shape['n']} samples, {shape['max_tokens']} new tokens, no stop token)",
            "",
            "| phase | seconds |", "| --- | --- |",
            *[f"| {k} | {s[k]:.2f} |" for k in ("time/generate", "time/verify", "time/logprobs", "time/train",
                                                  "time/refit", "time/step") if k in s],
            "",
            f"- Step throughput: {s['tokens_per_s']:,.0f} generated tok/s; engine alone (baseline, same run): "
            f"{baseline:,.0f} tok/s; loop generation / engine alone: **{out['loop_over_engine']:.2f}x**; "
            f"whole step / engine alone: {out['step_over_engine']:.2f}x",
        ]
        record_md("rl", "gpu", "One RL step at the 1.5B shape (GPU)", body)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
