"""The memory plan (`nemo-lead plan`, `nemo_lead.plan`) against what one GPU really allocates.

GPU (`--gpu`): the R1-Distill-Qwen-1.5B shape (random bf16 weights, local layer spec, TP1) on one device:
1. static: `torch.cuda.memory_allocated()` after the actor is built and has taken one step (Adam's state
   exists) against the plan's weights + gradient buffer + optimizer state;
2. update: the peak above that during a policy step (on-policy, entropy, temperature 0.8) of one micro-batch
   of 8 x 1,024 and of 2 x 4,096 tokens, without and with full recomputation, against the plan's activations +
   logits for the same settings, the log-probs in the actor's chunks (actor.logprob_chunk_tokens; the record
   of 2026-12-04 planned them unchunked, hence its 1.84x: bench/RESULTS.md `plan:gpu-replanned`)
   (`torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`);
3. generation: the peak above the static memory while the megatron engine samples 64 prompts of 128 tokens
   x 4 samples, 512 new tokens without a stop token, against the plan's KV cache + temporaries (eager decode
   steps: CUDA graphs keep a memory pool of their own that the plan does not model);
4. offload: the memory `actor.offload_during_generation` frees against the plan's gradient buffer + optimizer.
Each row gives planned and measured GiB and their ratio; the figures go to bench/RESULTS.md (`plan:gpu`).
The allocator's reserved-but-unused memory is not counted on either side (the plan's `plan.reserve_gib`).

    python bench/plan_check.py --gpu --record --out /tmp/plan_check.json      (bench/gpu_session.sh)
    .venv/bin/python bench/plan_check.py --gpu --dry-run                       # the code path on the CPU

The dry run uses the tiny preset in fp32 and measures live tensor bytes with the test suite's tracker
(tests/plan/tensor_memory.py), with the CPU variant of the attention term; the static memory is not
measured there.
"""

from __future__ import annotations

import sys
from pathlib import Path

from results_md import emit_json, machine_line, parse_gpu_args
from results_md import record as record_md

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
FULL = dict(model="r1-distill-qwen-1.5b", precision="bf16", batches=[(8, 1024), (2, 4096)], prompts=64, n=4,
            prompt_len=128, max_tokens=512)
DRY = dict(model="tiny-qwen2", precision="fp32", batches=[(4, 64), (2, 96)], prompts=4, n=4, prompt_len=8,
           max_tokens=24)


class Meter:
    """Peak bytes above the current ones during a block: the CUDA allocator's counters, or on the CPU the
    test suite's exact tracker of live tensor storage."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def __enter__(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            sys.path.insert(0, str(ROOT / "tests" / "plan"))
            from tensor_memory import LiveTensorBytes

            self.tracker = LiveTensorBytes().__enter__()
        return self

    def __exit__(self, *exc):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.tracker.__exit__(*exc)
            self.peak = self.tracker.peak
        return False


def _row(name: str, planned: int, measured: int | None) -> dict:
    return {"check": name, "planned_gib": planned / GIB, "measured_gib": None if measured is None else measured / GIB,
            "ratio": None if measured is None else measured / planned}


def planned_update(arch, count: int, length: int, e: int, recompute, chunk: int, largest: int, device: str):
    """The plan of the measured policy step (one micro-batch of `count` x `length` tokens, TP1, on-policy with
    the entropy, temperature 0.8, the log-probs in chunks of `chunk` tokens as the actor computes them)."""
    from nemo_lead.models import padded_vocab_size
    from nemo_lead.plan.activations import update_memory

    return update_memory(arch, tp=1, pp=1, stage=0, tokens=count * length, longest=length, microbatches=1, e=e,
                         sequence_parallel=False, recompute=recompute, vocab_local=padded_vocab_size(arch.vocab_size),
                         padded=arch.vocab_size % 128 != 0, temperature=0.8, entropy=True, logprob_chunk_tokens=chunk,
                         largest_weight=largest, device=device)


def run(shape: dict, cuda: bool) -> list[dict]:
    import torch

    from nemo_lead.algorithms import LeadConfig
    from nemo_lead.generation import MegatronEngine, SamplingParams
    from nemo_lead.models import arch_from_hf, read_hf_config
    from nemo_lead.parallel import init_parallel
    from nemo_lead.plan.activations import Recompute
    from nemo_lead.plan.engine_memory import engine_memory
    from nemo_lead.plan.parameters import DTYPE_BYTES, stage_parameters, static_bytes
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.microbatch import SequenceBatch
    from nemo_lead.training.actor.offload import offloaded
    from nemo_lead.training.actor.rl_update import policy_train_step

    arch = arch_from_hf(read_hf_config(shape["model"]))
    e = DTYPE_BYTES[shape["precision"]]
    device = "cuda" if cuda else "cpu"
    info = init_parallel(1, 1)
    rows = []
    lead = LeadConfig.paper()
    g = torch.Generator().manual_seed(0)
    largest = max(p.numel for p in stage_parameters(arch, 1, 1, 0))
    for recompute in (Recompute(), Recompute("full", "uniform", 1)):
        for count, length in shape["batches"]:
            actor = build_actor(ActorConfig(model=shape["model"], precision=shape["precision"], layer_spec="local",
                                            micro_batch_tokens=count * length, recompute_granularity=recompute.granularity,
                                            recompute_method=recompute.method, recompute_num_layers=recompute.num_layers),
                                info)
            batch = SequenceBatch(tokens=[torch.randint(1, arch.vocab_size, (length,), generator=g) for _ in range(count)],
                                  prompt_lens=[16] * count, advantages=torch.randn(count, generator=g))
            policy_train_step(actor, batch, lead, temperature=0.8, on_policy=True)  # Adam's state exists now
            if recompute.granularity is None and (count, length) == shape["batches"][0]:
                st = static_bytes(arch, tp=1, pp=1, dp=1, stage=0, precision=shape["precision"], distributed_optimizer=False)
                measured = torch.cuda.memory_allocated() if cuda else None
                rows.append(_row("static: weights + grads + optimizer", st.weights + st.grads + st.optimizer, measured))
                freed = None
                if cuda:
                    before = torch.cuda.memory_allocated()
                    with offloaded(actor):
                        freed = before - torch.cuda.memory_allocated()
                rows.append(_row("offload: grads + optimizer freed", st.grads + st.optimizer, freed))
                rows += generation_rows(actor, arch, shape, e, cuda, device, MegatronEngine, SamplingParams, engine_memory)
            with Meter(cuda) as m:
                policy_train_step(actor, batch, lead, temperature=0.8, on_policy=True)
            u = planned_update(arch, count, length, e, recompute, actor.cfg.logprob_chunk_tokens, largest, device)
            label = f"update: {count} x {length} tokens" + (", full recompute" if recompute.granularity else "")
            rows.append(_row(label, u.activations + u.logits, m.peak))
            del actor
    return rows


def generation_rows(actor, arch, shape, e, cuda, device, MegatronEngine, SamplingParams, engine_memory) -> list[dict]:
    prompts = [[5 + i % 50] * shape["prompt_len"] for i in range(shape["prompts"])]
    engine = MegatronEngine(actor, max_batch_size=shape["prompts"] * shape["n"], cuda_graphs=False)
    params = SamplingParams(n=shape["n"], temperature=0.8, max_tokens=shape["max_tokens"], seed=0)
    with Meter(cuda) as m:
        engine.generate(prompts, params)
    sync = 8 if cuda else 1
    g = engine_memory(arch, tp=1, pp=1, stage=0, e=e, sequences=shape["prompts"] * shape["n"], n=shape["n"],
                      prompt_tokens=shape["prompt_len"], max_tokens=shape["max_tokens"],
                      max_batch_size=shape["prompts"] * shape["n"], max_prefill_tokens=16384, sync_every=sync,
                      kv_budget_bytes=None, device=device)
    return [_row(f"generation: {shape['prompts']} x {shape['n']} sequences of {shape['prompt_len']} + "
                 f"{shape['max_tokens']} tokens", g.total, m.peak)]


def main() -> None:
    args = parse_gpu_args(__doc__, "check the memory plan against one GPU's allocations", "plan:gpu", "GPU memory")
    from nemo_lead.runtime.quiet import hide_import_noise

    hide_import_noise()
    shape = DRY if args.dry_run else FULL
    rows = run(shape, cuda=not args.dry_run)
    emit_json({"shape": shape, "dry_run": args.dry_run, "rows": rows}, args.out)
    if args.record and not args.dry_run:
        import torch

        def gib(v):
            return "-" if v is None else f"{v:.2f}"

        def ratio(v):
            return "-" if v is None else f"{v:.3f}"

        body = [f"Command: `python bench/plan_check.py --gpu --record` (bench/gpu_session.sh); {machine_line()}, "
                f"{torch.cuda.get_device_name()}, torch {torch.__version__}.", "",
                f"{shape['model']} shape, random {shape['precision']} weights, local spec, TP1; planned by "
                "`nemo_lead.plan` (GPU variant), measured with torch.cuda.memory_allocated / max_memory_allocated.", "",
                "| check | planned GiB | measured GiB | measured / planned |", "| --- | --- | --- | --- |",
                *[f"| {r['check']} | {gib(r['planned_gib'])} | {gib(r['measured_gib'])} | {ratio(r['ratio'])} |"
                  for r in rows]]
        record_md("plan", "gpu", "Memory plan against one GPU", body)


if __name__ == "__main__":
    main()
