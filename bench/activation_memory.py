"""What the local layer spec keeps for backward, measured on the CPU against the plan's formula
(`nemo_lead.plan.activations`), at larger shapes than the tests' (tests/plan/test_saved_activations.py), and
the recorded H200 update peaks (`plan:gpu`, bench/plan_check.py) planned again with the formula as it is now.

Per case: the decoder layers' bytes kept from the forward to the backward (torch's saved-tensor hooks, each
storage once, parameters left out) and the peak of their forward + backward (every storage an aten op
allocates, alive at once: tests/plan/tensor_memory.py), weight gradients freed once accumulated as
megatron's DDP does; and the log-probs' loss peak. Planned: `block_memory` / `chunked_logits_peak_bytes` /
`logits_peak_bytes` for the same shape with the CPU's norm and the case's attention path ("gpu": SDPA on
megatron's views, as a GPU runs it). No baseline: the figure is the ratio measured / planned.

    OMP_NUM_THREADS=1 .venv/bin/python bench/activation_memory.py [--record] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "plan"), str(ROOT / "tests")]

from results_md import machine_line  # noqa: E402
from results_md import record as record_md  # noqa: E402

MIB = 1 << 20


def cases(quick: bool):
    from saved_activations import Case, LossCase

    wide = dict(hidden=512, ffn=1408, heads=8, kv_heads=2)
    qwen15 = dict(hidden=1536, ffn=8960, heads=12, kv_heads=2)  # R1-Distill-Qwen-1.5B's widths, 1 layer
    blocks = [Case(**wide, rows=rows, length=length, precision=p, attention=a, recompute=r)
              for rows, length in ((1, 2048), (4, 512)) for p, a in (("bf16", "gpu"), ("bf16", "cpu"), ("fp32", "gpu"))
              for r in ("none", "selective", "full")]
    blocks += [Case(**qwen15, rows=1, length=512, layers=1, precision="bf16", attention=a) for a in ("gpu", "cpu")]
    blocks += [Case(**wide, rows=2, length=512, tp=2, sp=sp, precision="bf16", attention="gpu", recompute=r)
               for sp in (False, True) for r in ("none", "full")]
    losses = [LossCase(hidden=512, vocab=151936, rows=1, length=1024, chunk=c, precision="bf16") for c in (256, 2048)]
    losses += [LossCase(hidden=512, vocab=32000, rows=1, length=1024, chunk=0, precision=p) for p in ("bf16", "fp32")]
    losses += [LossCase(hidden=512, vocab=151936, rows=1, length=1024, tp=2, chunk=2048, precision="bf16")]
    if quick:
        blocks = [c for c in blocks if c.length * c.rows <= 1024 and c.hidden < 1536][:4]
        losses = losses[:1]
    return blocks, losses


def _run(blocks, losses):
    from megatron.core import parallel_state as ps
    from saved_activations import measure_block, measure_loss

    from nemo_lead.parallel import destroy_parallel, init_parallel

    out = []
    for c in blocks + losses:
        init_parallel(c.tp, 1)
        rank = ps.get_tensor_model_parallel_rank()
        out.append((c, measure_block(c) if c in blocks else measure_loss(c), rank))
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def block_row(c, m) -> str:
    sys.path.insert(0, str(ROOT / "tests" / "plan"))
    from test_saved_activations import planned_block

    b = planned_block(c, m.largest_weight)
    where = f"TP{c.tp}" + (" SP" if c.sp else "")
    return (f"| {c.hidden} / {c.ffn} / {c.heads}:{c.kv_heads} | {c.layers} | {c.rows} x {c.length} | {where} | "
            f"{c.precision} | {c.attention} | {c.recompute} | {m.saved / MIB:.2f} | {b.saved / MIB:.2f} | "
            f"{m.saved / b.saved:.4f} | {m.peak / MIB:.2f} | {(b.saved + b.working) / MIB:.2f} | "
            f"{m.peak / (b.saved + b.working):.4f} |")


def loss_row(c, measured) -> str:
    from nemo_lead.plan.activations import chunked_logits_peak_bytes, logits_peak_bytes

    peak, local, padded = measured
    e, tokens = (2 if c.precision == "bf16" else 4), c.rows * c.length
    planned = (chunked_logits_peak_bytes(tokens, c.chunk, local, c.hidden, e, entropy=c.entropy) if c.chunk
               else logits_peak_bytes(tokens, local, e, temperature=c.temperature, padded=padded, entropy=c.entropy))
    return (f"| {c.hidden} | {c.vocab} ({local} a rank) | {c.rows} x {c.length} | TP{c.tp} | {c.precision} | "
            f"{c.chunk or 'unchunked'} | {peak / MIB:.2f} | {planned / MIB:.2f} | {peak / planned:.4f} |")


def h200_rows() -> list[str]:
    """The `plan:gpu` record's update rows with the plan of the same settings now."""
    sys.path.insert(0, str(ROOT / "tests" / "plan"))
    from plan_check import FULL, planned_update
    from test_h200_rows import recorded_update_rows

    from nemo_lead.models import arch_from_hf, read_hf_config
    from nemo_lead.plan.activations import Recompute
    from nemo_lead.plan.parameters import stage_parameters
    from nemo_lead.training.actor.config import ActorConfig

    arch = arch_from_hf(read_hf_config(FULL["model"]))
    largest = max(p.numel for p in stage_parameters(arch, 1, 1, 0))
    chunk = ActorConfig(model="-").logprob_chunk_tokens
    rows = []
    for count, length, full, measured in recorded_update_rows():
        recompute = Recompute("full", "uniform", 1) if full else Recompute()
        now = planned_update(arch, count, length, 2, recompute, chunk, largest, "cuda")
        unchunked = planned_update(arch, count, length, 2, recompute, 0, largest, "cuda")
        planned = (now.activations + now.logits) / 2**30
        rows.append(f"| {count} x {length}{', full recompute' if full else ''} | {measured:.2f} | "
                    f"{(unchunked.activations + unchunked.logits) / 2**30:.2f} | {planned:.2f} | {measured / planned:.4f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="write the tables to bench/RESULTS.md")
    ap.add_argument("--quick", action="store_true", help="a few small cases (the code path)")
    args = ap.parse_args()
    from distributed import run_distributed

    from nemo_lead.runtime.quiet import hide_import_noise

    hide_import_noise()
    load = os.getloadavg()
    blocks, losses = cases(args.quick)
    one = [c for c in blocks + losses if c.tp == 1]
    two = [c for c in blocks + losses if c.tp == 2]
    found = run_distributed(_run, 1, [c for c in one if c in blocks], [c for c in one if c in losses], timeout=3600)[0]
    if two:
        found += [r for rank in run_distributed(_run, 2, [c for c in two if c in blocks],
                                                [c for c in two if c in losses], timeout=3600) for r in rank]
    block_lines = [block_row(c, m) for c, m, rank in found if c in blocks and rank == 0]
    loss_lines = [loss_row(c, m) for c, m, rank in found if c in losses and rank == 0]
    table = ["| hidden / ffn / heads:kv | layers | rows x tokens | layout | dtype | attention | recompute | "
             "saved MiB | planned | measured / planned | peak MiB | planned | measured / planned |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", *block_lines, "",
             "| hidden | vocabulary | rows x tokens | layout | dtype | log-prob chunk | loss peak MiB | planned | "
             "measured / planned |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |", *loss_lines]
    gpu = ["| update (bench/plan_check.py) | measured GiB (H200, 2026-12-04) | planned now, loss unchunked (as "
           "the record compared) | planned now | measured / planned now |", "| --- | --- | --- | --- | --- |", *h200_rows()]
    print("\n".join(table + [""] + gpu))
    if args.record and not args.quick:
        import platform

        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   platform.processor())
        record_md("plan", "activations-cpu", "Activation memory: the formula against the CPU's saved tensors",
                  [f"Command: `OMP_NUM_THREADS=1 .venv/bin/python bench/activation_memory.py --record`; "
                   f"{machine_line(load_start=load)}; CPU: {cpu}.", "",
                   "Local layer spec (random weights), one process per TP rank (gloo); the block is the decoder "
                   "layers without the final norm; every TP rank gives the same figures (one row each shown). "
                   "Attention \"gpu\": SDPA on megatron's views as a GPU runs it; \"cpu\": the CPU path. The norms "
                   "are the CPU's (bf16: torch's composite RMSNorm). Weight gradients are freed once accumulated "
                   "(megatron's DDP). Loss: on-policy log-probs with the entropy, temperature 0.8.", "", *table])
        record_md("plan", "gpu-replanned", "The recorded H200 update peaks, planned again",
                  ["Command: `.venv/bin/python bench/activation_memory.py --record` (no GPU: the measured column "
                   "is the `plan:gpu` record's). That record's planned column took the loss unchunked while the "
                   "actor computed it in chunks of actor.logprob_chunk_tokens (2,048): the third column is that "
                   "comparison with the formula as it is now; \"planned now\" takes the chunks the run used.", "", *gpu])


if __name__ == "__main__":
    main()
