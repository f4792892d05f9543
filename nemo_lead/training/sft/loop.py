"""`nemo-lead sft`: supervised fine-tuning of the Megatron actor on reasoning traces.

    nemo-lead sft --model HF_DIR|CKPT --data TRACES --out RUN [--steps N] [--tp T --pp P] [key=value ...]

One step: the next `global_batch` traces of a seeded per-epoch shuffle -> packed into rows of at most
`data.max_seq_len` tokens (`nemo_lead.training.sft.packing`) -> one optimizer step of the mean NLL over every
assistant token (EOS included) -> metrics -> validation loss and a checkpoint when due. Traces are rendered
exactly as RL and evaluation prompts are (`nemo_lead.data.traces`), so the three see one format.

Steps: `steps`, or `epochs` x (traces // global_batch). The learning rate warms up linearly and decays
(cosine by default) over the run's steps unless `actor.optim.lr_decay_steps` says otherwise.
Validation: the held-out traces (`data.val_path`, or a seeded `data.val_fraction` of the set) every
`val_every` steps and at the end, logged as `val/loss`.
Run folder and resume: `nemo_lead.training.run.folder` and `nemo_lead.training.run.lifecycle`; the data position is
part of the checkpoint, so a resumed run sees the same traces in the same order.
"""

from __future__ import annotations

import random
import time
from typing import Any

from nemo_lead.data.traces import fit_traces, load_traces
from nemo_lead.models import load_tokenizer
from nemo_lead.parallel.local import relaunches, run_command
from nemo_lead.plan.check import check_before_start
from nemo_lead.runtime.files import write_json
from nemo_lead.training.actor.sft_update import sft_eval_loss, sft_train_step
from nemo_lead.training.run.data_order import DataOrder
from nemo_lead.training.run.folder import DATA_REPORT_FILE
from nemo_lead.training.run.lifecycle import (
    abort_run,
    content_digest,
    end_of_step,
    finish_run,
    model_and_prompt,
    start_run,
    stop_if_not_finite,
)
from nemo_lead.training.run.lock import refuse_if_in_use
from nemo_lead.training.sft.config import SFTConfig
from nemo_lead.training.sft.packing import pack_traces

SFT_METRIC_CHECKS = ("loss", "grad_norm")


def load_sft_data(cfg: SFTConfig, tokenizer: Any) -> tuple[list, list, dict[str, Any]]:
    """(train traces, validation traces, a report of what was kept) for `cfg` (errors name file and line)."""
    d = cfg.data
    traces = load_traces(d.path, tokenizer, cfg.prompt, split=d.split, fields=dict(d.fields), limit=d.limit)
    val: list = []
    if d.val_path:
        val = load_traces(d.val_path, tokenizer, cfg.prompt, fields=dict(d.fields))
    elif d.val_fraction > 0:
        order = list(range(len(traces)))
        random.Random(f"{cfg.seed}/validation").shuffle(order)
        held = set(order[: max(1, int(len(traces) * d.val_fraction))])
        val = [t for i, t in enumerate(traces) if i in held]
        traces = [t for i, t in enumerate(traces) if i not in held]
    train, counts = fit_traces(traces, d.max_seq_len, d.overlong)
    val, val_counts = fit_traces(val, d.max_seq_len, d.overlong) if val else ([], {})
    if not train:
        raise ValueError(f"data.path={d.path}: no trace fits data.max_seq_len={d.max_seq_len} "
                         f"({counts.get('dropped', 0)} dropped)")
    report = {"train": counts, "validation": val_counts, "train_traces": len(train), "val_traces": len(val),
              "max_seq_len": d.max_seq_len, "overlong": d.overlong}
    return train, val, report


def total_steps(cfg: SFTConfig, num_traces: int) -> int:
    return cfg.steps if cfg.steps is not None else cfg.epochs * max(1, num_traces // cfg.global_batch)


def validation_loss(run, val: list) -> float:
    """Mean NLL over every assistant token of the held-out traces (chunks of global_batch traces)."""
    cfg = run.cfg
    nll = tokens = 0.0
    for start in range(0, len(val), cfg.global_batch):
        m = sft_eval_loss(run.actor, pack_traces(val[start:start + cfg.global_batch], cfg.data.max_seq_len,
                                                 cfg.data.pack))
        nll += m["loss"] * m["tokens"]
        tokens += m["tokens"]
    return nll / max(tokens, 1.0)


def sft_job(cfg: SFTConfig) -> None:
    """The SFT loop on one rank (every rank of the job calls it)."""
    cfg, source = model_and_prompt(cfg)
    tokenizer = load_tokenizer(source.require_tokenizer())
    train, val, report = load_sft_data(cfg, tokenizer)
    steps = total_steps(cfg, len(train))
    inputs = {"data.path": content_digest([(t.id, t.prompt_ids, t.response_ids) for t in train]),
              "data.val_path": content_digest([(t.id, t.prompt_ids, t.response_ids) for t in val])}
    layer_spec, note = cfg.packing_layer_spec()
    run = start_run(cfg, "sft", steps, source=source, tokenizer=tokenizer, inputs=inputs, layer_spec=layer_spec)
    if note:
        run.say(note)
    stopped = False
    try:
        order = DataOrder(len(train), cfg.seed, shuffle=True)
        if run.loop_state.get("data"):
            order.load_state_dict(run.loop_state["data"])
        if run.is_writer:
            write_json(run.folder.path / DATA_REPORT_FILE, report, indent=1)
        c = report["train"]
        run.say(f"{report['train_traces']} training traces ({c.get('dropped', 0)} dropped, {c.get('truncated', 0)} "
                f"truncated at {cfg.data.max_seq_len} tokens), {report['val_traces']} held out")

        def state() -> dict[str, Any]:
            return {"data": order.state_dict()}

        while run.step < steps:
            t0 = time.monotonic()
            items = [train[i] for i in order.take(cfg.global_batch)]
            batch = pack_traces(items, cfg.data.max_seq_len, cfg.data.pack)
            m = sft_train_step(run.actor, batch)
            run.step += 1
            stop_if_not_finite(run, m, SFT_METRIC_CHECKS)
            seconds = time.monotonic() - t0
            metrics = {"step": run.step, "loss": m["loss"], "lr": m["lr"], "grad_norm": m["grad_norm"],
                       "tokens": m["tokens"], "traces": len(items), "sequences": m["sequences"],
                       "padding_fraction": m["padding_fraction"],
                       "epoch": order.epoch + order.position / len(train)}
            if val and ((cfg.val_every and run.step % cfg.val_every == 0) or run.step == steps):
                metrics["val/loss"] = validation_loss(run, val)
            metrics.update({"time/step": seconds, "tokens_per_s": sum(batch.lengths) / max(seconds, 1e-9)})
            run.folder.log_metrics(metrics)
            shown = {"loss": f"{m['loss']:.4f}", "lr": f"{m['lr']:.2e}"}
            if "val/loss" in metrics:
                shown["val"] = f"{metrics['val/loss']:.4f}"
            run.progress.step(run.step, shown)
            if end_of_step(run, state()):
                stopped = True
                break
        finish_run(run, state(), stopped)
    except BaseException:
        abort_run(run)
        raise


def _preflight(cfg: SFTConfig) -> None:
    """Before local ranks start (`relaunches`): a run folder in use is refused in one line naming its holder,
    and bad data fails with the file and line."""
    refuse_if_in_use(cfg.out)
    cfg, source = model_and_prompt(cfg)
    load_sft_data(cfg, load_tokenizer(source.require_tokenizer()))


def run_sft(cfg: SFTConfig) -> int:
    """`nemo-lead sft`: the exit status (0 done or stopped by a signal after a checkpoint)."""
    if check_before_start(cfg, "sft"):  # on GPUs: a layout that cannot fit stops here, saying what to change
        return 2
    ranks = cfg.actor.tp * cfg.actor.pp
    return run_command("sft", sft_job, (cfg,), ranks=ranks, preflight=(lambda: _preflight(cfg)) if relaunches(ranks) else None)
