"""The evaluation job: generate the missing samples chunk by chunk, grade them, append them, score the run.

Every rank runs `eval_rank(cfg)` (SPMD, like `nemo-lead generate`). Global rank 0 is the writer: it reads
the run folder, decides which chunks are missing (the others get that list by broadcast), grades with
`MathVerifier`, writes every file, and prints progress. With more ranks than tp x pp (torchrun / srun), the
data-parallel replicas generate different chunks at the same time and send their rollouts to rank 0.

Output folder:
    run.json                the settings the samples were made with (store.py: resume rules)
    config.yaml             the resolved configuration of the latest run
    samples.jsonl           one line per sample: dataset, problem_id, sample, response, extracted, correct,
                            status, outcome, tokens, finish_reason, gold, grading, run
    summary.json / .md      per dataset: Cons@k, Pass@1, Len_avg, accuracy at the budgets, truncation share
    accuracy_vs_budget.png  the paper's Figure 3 for this run

Token counts (`tokens`, Len_avg, the budget curve) are `Rollout.num_tokens`: every generated token with the
stop token included -- the count `max_tokens` limits, so a response cut at the limit has tokens == max_tokens.
The response text is the tokens decoded without the final stop token, special tokens kept (the think tags
are special tokens in some tokenizers). Grading: responses cut at max_tokens (finish_reason "length") are
not graded (status "truncated", wrong); the others are graded in `verify.answer_region`. When the chat template
opens the thinking block in the prompt (R1-Distill's ends with `<think>\\n`), the grader sees the response
with that `<think>` in front, so a response that never closes it has no answer, as verify's regions define.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from nemo_lead.algorithms import outcome_label
from nemo_lead.config.loading import to_yaml
from nemo_lead.data import (
    Problem,
    PromptConfig,
    check_prompts_fit,
    open_think,
    prompt_settings,
    prompt_token_ids,
    resolve_prompt,
)
from nemo_lead.eval.chunks import Chunk, load_datasets, plan_chunks
from nemo_lead.eval.config import ANSWER_REGION, EvalConfig, budget_points, dataset_specs, default_out
from nemo_lead.eval.report import (
    FIGURE,
    dataset_summary,
    plot_accuracy_vs_budget,
    summary_markdown,
    wandb_row,
    write_summary,
)
from nemo_lead.eval.store import SampleStore
from nemo_lead.generation import SamplingParams, build_engine, engine_config_for
from nemo_lead.models import load_tokenizer
from nemo_lead.models.policy import load_policy, with_end_tokens
from nemo_lead.models.source import ModelSource, model_source, resolve_precision
from nemo_lead.parallel import destroy_parallel, init_parallel
from nemo_lead.parallel.local import JobError
from nemo_lead.runtime.deadline import Deadline, requeue_or_advise, test_step_delay
from nemo_lead.runtime.files import write_atomic
from nemo_lead.runtime.progress import LoopProgress
from nemo_lead.runtime.tracking import open_tracker
from nemo_lead.verify.extract import THINK_OPEN


@dataclass
class Prepared:
    """Everything the job needs before the model: computed the same way in the launcher and on each rank."""

    out: Path
    source: ModelSource
    precision: str  # resolved (`resolve_precision`)
    tokenizer: Any
    datasets: dict[str, list[Problem]]
    chunks: list[Chunk]
    params: SamplingParams  # with the stop tokens; its seed is the base seed
    settings: dict[str, Any]  # what run.json records (store.py)
    think_open: bool  # the prompt ends inside an open <think> block
    prompt: PromptConfig  # cfg.prompt, or the checkpoint's training prompt (`resolve_prompt`)


def prepare(cfg: EvalConfig) -> Prepared:
    """Read the model's description, tokenizer and datasets; raise on anything bad (no torch needed)."""
    source = model_source(cfg.model, cfg.tokenizer)
    if source.kind == "preset":
        raise ValueError(f"--model {cfg.model}: a model preset has random weights; evaluate a HF folder or a checkpoint")
    precision = resolve_precision(cfg.precision, source)
    tokenizer = load_tokenizer(source.require_tokenizer())
    datasets = load_datasets(dataset_specs(cfg.data), limit=cfg.limit, split=cfg.split, fields=dict(cfg.fields))
    params = with_end_tokens(cfg.sampling, tokenizer, source) if cfg.stop_at_eos else cfg.sampling
    prompt_cfg = resolve_prompt(cfg.prompt, source.prompt)
    settings = {
        "model": {**source.fingerprint(), "precision": precision},
        "sampling": dataclasses.asdict(params),
        "prompt": prompt_settings(prompt_cfg),
        "problems_per_call": cfg.problems_per_call,
    }
    return Prepared(
        out=Path(cfg.out or default_out(cfg)), source=source, precision=precision, tokenizer=tokenizer, datasets=datasets,
        chunks=plan_chunks(datasets, cfg.problems_per_call, params.seed), params=params, settings=settings,
        think_open=bool(open_think(tokenizer, prompt_cfg)), prompt=prompt_cfg,
    )


def check_prompt_lengths(cfg: EvalConfig, prep: Prepared) -> None:
    """Every prompt + max_tokens must fit the model's positions (fail before loading weights)."""
    for name, problems in prep.datasets.items():
        check_prompts_fit(problems, prompt_token_ids(prep.tokenizer, problems, prep.prompt), prep.params.max_tokens,
                          prep.source.hf_config.get("max_position_embeddings"), name)


def missing_samples(store: SampleStore, chunk: Chunk, n: int) -> int:
    return sum(not store.has((chunk.dataset, p.id, s)) for p in chunk.problems for s in range(n))


def samples_left(prep: Prepared) -> int:
    """The samples the run folder still misses (0 once `nemo-lead eval` finished; more after it stopped
    before the job's end, which exits 0 too)."""
    store = SampleStore.open(prep.out, prep.settings, write=False, problems=prep.datasets)
    return sum(missing_samples(store, c, prep.params.n) for c in prep.chunks)


# ----------------------------------------------------------------------------- grading (writer rank)
class Grader:
    """Rollouts -> sample records (and regrading of stored ones) with one MathVerifier."""

    def __init__(self, cfg: EvalConfig, prep: Prepared, tag: str):
        self.region, self.tag, self.prep = cfg.verify.region(ANSWER_REGION), tag, prep
        self.verifier = cfg.verify.verifier()  # the paper's rule, read where it reads (ANSWER_REGION)
        self.stops = set(prep.params.stop_token_ids)

    def close(self) -> None:
        self.verifier.close()

    def _grade(self, texts: list[str], golds: list[str], finished: list[bool]):
        prefix = THINK_OPEN if self.prep.think_open else ""
        return self.verifier.grade([prefix + t for t in texts], golds, finished)

    def records(self, chunk: Chunk, rollouts: list[tuple[int, int, list[int], str]]) -> list[dict[str, Any]]:
        tok = self.prep.tokenizer
        texts = [tok.decode(ids[:-1] if ids and ids[-1] in self.stops else ids, skip_special_tokens=False)
                 for _, _, ids, _ in rollouts]
        problems = [chunk.problems[p] for p, _, _, _ in rollouts]
        grades = self._grade(texts, [p.answer for p in problems], [f == "stop" for *_, f in rollouts])
        return [
            {"dataset": chunk.dataset, "problem_id": p.id, "sample": s, "response": text, "extracted": g.extracted,
             "correct": g.correct, "status": g.status, "outcome": outcome_label(g.outcome, finish == "stop"),
             "tokens": len(ids),
             "finish_reason": finish, "gold": p.answer, "grading": self.region, "run": self.tag}
            for p, (_, s, ids, finish), text, g in zip(problems, rollouts, texts, grades)
        ]

    def regrade_stale(self, store: SampleStore, say) -> int:
        """Regrade stored samples graded in another answer region (no generation); their count."""
        stale = [r for r in store.records.values() if r.get("grading") != self.region]
        if stale:
            say(f"regrading {len(stale)} stored samples (verify.answer_region {self.region})")
            grades = self._grade([r["response"] for r in stale], [r["gold"] for r in stale],
                                 [r["finish_reason"] == "stop" for r in stale])
            store.rewrite({**r, "extracted": g.extracted, "correct": g.correct, "status": g.status,
                           "outcome": outcome_label(g.outcome, r["finish_reason"] == "stop"), "grading": self.region}
                          for r, g in zip(stale, grades))
        return len(stale)


class EvalProgress:
    """Per finished chunk: counts, throughput, Pass@1 so far and the time left, shown the way `progress` says
    (`nemo_lead.runtime.progress`: a bar, log lines, or nothing); only the writer rank shows anything."""

    def __init__(self, cfg: EvalConfig, total_samples: int, total_chunks: int, active: bool):
        self.shown = LoopProgress("eval", total_chunks, mode=cfg.progress, active=active, unit="chunk")
        self.total = total_samples
        self.done = self.chunks_done = self.tokens = 0
        self.start = time.monotonic()

    def say(self, message: str) -> None:
        self.shown.say(message)

    def update(self, chunk: Chunk, records: list[dict[str, Any]], store: SampleStore, problems: int) -> None:
        self.done += len(records)
        self.chunks_done += 1
        self.tokens += sum(r["tokens"] for r in records)
        elapsed = time.monotonic() - self.start
        mine = [r for r in store.records.values() if r["dataset"] == chunk.dataset]
        acc = sum(r["correct"] for r in mine) / len(mine)
        have = len({r["problem_id"] for r in mine})
        self.shown.step(self.chunks_done, {
            chunk.dataset: f"{have}/{problems} problems", "samples": f"{self.done}/{self.total}",
            "tok/s": f"{self.tokens / max(elapsed, 1e-9):,.0f}", "Pass@1 so far": f"{acc:.3f}"})

    def close(self) -> None:
        self.shown.close()


# ----------------------------------------------------------------------------- distributed plumbing
def _broadcast(value: Any) -> Any:
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gather_to_writer(item: Any, info) -> list[Any]:
    """Rank 0: the items of every data-parallel replica (one model-parallel rank of each sends); others: []."""
    if info.dp == 1:
        return [item] if info.rank == 0 else []
    from megatron.core import parallel_state as ps

    leader = dist.get_rank(group=ps.get_model_parallel_group()) == 0
    got: list[Any] | None = [None] * info.world_size if info.rank == 0 else None
    dist.gather_object(item if leader else None, got, dst=0)
    return [x for x in got if x is not None] if got is not None else []


# ----------------------------------------------------------------------------- the job
def eval_rank(cfg: EvalConfig) -> None:
    """The evaluation on one rank (every rank of the job calls it; see the module docstring)."""
    prep = prepare(cfg)
    info = init_parallel(cfg.tp, cfg.pp, model_config=prep.source.hf_config)
    grader = progress = None
    try:
        store = None
        if info.rank == 0:
            store = SampleStore.open(prep.out, prep.settings, write=True, problems=prep.datasets)
            write_atomic(prep.out / "config.yaml", to_yaml(cfg))
        n = prep.params.n
        pending = _broadcast([i for i, c in enumerate(prep.chunks) if missing_samples(store, c, n)]
                             if store is not None else None)
        total = sum(missing_samples(store, prep.chunks[i], n) for i in pending) if store is not None else 0
        progress = EvalProgress(cfg, total, len(pending), active=info.rank == 0)
        if info.rank == 0:
            grader = Grader(cfg, prep, store.tag)
            grader.regrade_stale(store, progress.say)
            progress.say(f"{prep.source.kind} model {prep.source.path} ({prep.precision}; tp {info.tp}, "
                         f"pp {info.pp}, dp {info.dp}) | {', '.join(f'{k} ({len(v)})' for k, v in prep.datasets.items())}"
                         f" | n {n}, T {prep.params.temperature:g}, top-p {prep.params.top_p:g}, max_tokens "
                         f"{prep.params.max_tokens} | {len(store.records)} samples already in {prep.out}; {total} to "
                         f"generate in {len(pending)} chunks")
        stopped = bool(pending) and _generate_pending(cfg, prep, info, pending, store, grader, progress)
        if stopped:
            _requeue_after_stop(info, prep, store, progress)
        elif info.rank == 0:
            _write_reports(cfg, prep, store, progress.say)
        dist.barrier()
    finally:
        if progress is not None:
            progress.close()
        if grader is not None:
            grader.close()
        destroy_parallel()


def _generate_pending(cfg, prep: Prepared, info, pending: list[int], store, grader, progress: EvalProgress) -> bool:
    """Generate, grade and store the pending chunks, `dp` at a time; True when it stopped before the job's
    end (`_stop_before`), with every finished chunk stored. As in the training loops, the first chunk(s) of
    a job always run (nothing is measured yet), so that every attempt of a requeued job makes progress."""
    engine = build_engine(engine_config_for(cfg.engine, prep.source), load_policy(prep.source, info, prep.precision))
    try:
        return _generate_with(engine, cfg, prep, info, pending, store, grader, progress)
    finally:
        if hasattr(engine, "close"):  # vllm: before the job's process groups go
            engine.close()


def _generate_with(engine, cfg, prep: Prepared, info, pending: list[int], store, grader, progress: EvalProgress) -> bool:
    deadline = Deadline.from_env(os.environ)  # the same environment on every rank; rank 0 measures and decides
    for start in range(0, len(pending), info.dp):
        if deadline is not None and start and _stop_before(deadline, info, start, len(pending), progress):
            return True
        began = time.monotonic()
        if test_step_delay():
            time.sleep(test_step_delay())
        batch = pending[start:start + info.dp]  # one chunk per data-parallel replica
        mine = batch[info.dp_rank] if info.dp_rank < len(batch) else None
        item, flushed = None, 0.0
        if mine is not None:
            chunk = prep.chunks[mine]
            ids = prompt_token_ids(prep.tokenizer, chunk.problems, prep.prompt)
            rollouts = engine.generate(ids, dataclasses.replace(prep.params, seed=chunk.seed))
            item = (mine, [(r.prompt_index, r.sample_index, r.token_ids, r.finish_reason) for r in rollouts])
        for index, rollouts in _gather_to_writer(item, info):
            chunk = prep.chunks[index]
            new = [r for r in grader.records(chunk, rollouts)
                   if not store.has((r["dataset"], r["problem_id"], r["sample"]))]
            flushing = time.monotonic()
            store.append(new)
            flushed += time.monotonic() - flushing
            progress.update(chunk, new, store, len(prep.datasets[chunk.dataset]))
        if deadline is not None:  # the batch's time, less the store's flushes (the "save" of a chunk)
            deadline.step_done(time.monotonic() - began - flushed)
            deadline.saved(flushed)
    return False


def _stop_before(deadline: Deadline, info, done: int, total: int, progress: EvalProgress) -> bool:
    """Collective: whether the next chunk(s) and the store's flush would end past the job's end less the
    margin (rank 0's measurements and clock decide, as in the training loops); says why on rank 0."""
    now = time.time()
    why = _broadcast(deadline.why(now, done, unit="chunk", save="the store's flush")
                     + f" ({done} of {total} pending chunks done)"
                     if info.rank == 0 and deadline.next_would_pass(now) else "")
    if why:
        progress.say(why)
    return bool(why)


def _requeue_after_stop(info, prep: Prepared, store, progress: EvalProgress) -> None:
    """Collective, after a stop before the job's end: every stored sample is kept; requeue the SLURM job
    (or say how to resume). A refused requeue is a JobError (exit 1) on every rank."""
    ok = True
    if info.rank == 0:
        progress.say(f"{len(store.records)} samples are in {prep.out}; a rerun generates only the missing ones")
        ok = requeue_or_advise(progress.say)
    if not _broadcast(ok):
        raise JobError(f"the samples so far are in {prep.out}, but the job could not be requeued (see the message "
                       "above); submit it again to resume")


def _write_reports(cfg: EvalConfig, prep: Prepared, store: SampleStore, say) -> dict[str, Any]:
    budgets = budget_points(cfg)
    summary = {
        "model": prep.source.path, "model_kind": prep.source.kind, "model_step": prep.source.step,
        "precision": prep.precision, "run": store.tag, "answer_region": cfg.verify.region(ANSWER_REGION),
        "sampling": dataclasses.asdict(prep.params), "problems_per_call": cfg.problems_per_call,
        "budgets": budgets, "report_budgets": list(cfg.report_budgets),
        "datasets": {name: dataset_summary(name, problems, store.records, prep.params.n, budgets)
                     for name, problems in prep.datasets.items()},
    }
    write_summary(prep.out, summary)
    tracker = open_tracker(cfg.wandb, prep.out, cfg, job_type="eval")
    if tracker is not None:
        tracker.summary("eval/summary", {name: wandb_row(d) for name, d in summary["datasets"].items()},
                        step=prep.source.step or 0)
        tracker.finish()
    if cfg.plot:
        plot_accuracy_vs_budget(summary, prep.out / FIGURE)
    print(summary_markdown(summary), flush=True)
    say(f"wrote {prep.out}")
    return summary
