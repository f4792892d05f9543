"""The evaluation job: generate the missing samples call by call, grade them, append them, score the run.

Every rank runs `eval_rank(cfg)` (SPMD, like `nemo-lead generate`). Global rank 0 is the writer: it reads
the run folder, decides which samples are missing and cuts them into engine calls (calls.py: every sample
has its own seed, so the cut does not change any sample; the others get the list by broadcast), grades with
`MathVerifier`, writes every file, and prints progress. With more ranks than tp x pp (torchrun / srun), the
data-parallel replicas generate different calls at the same time and send their rollouts to rank 0.

Calls: `call_sequences` sequences each (default CALL_WAVES x what the engine holds at once: its KV budget at
the longest prompt + max_tokens, or its batch limit), so the engine's continuous batching keeps its cache
full through a call; a call's samples are stored when it ends, so a killed job redoes at most one call per
data-parallel replica. Rounds (`rounds`, the distill stage's keep: first): a round samples only the
problems with no correct sample in the earlier rounds; the next round starts once the last one is graded.

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
from nemo_lead.eval.calls import Call, Item, load_datasets, pending_items, plan_calls, round_ranges
from nemo_lead.eval.config import (
    ANSWER_REGION,
    EvalConfig,
    budget_points,
    dataset_specs,
    default_out,
)
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
from nemo_lead.parallel.ranks import share_from_rank0
from nemo_lead.plan.engine_stage import call_sequences
from nemo_lead.runtime.deadline import Deadline, requeue_or_advise, test_step_delay
from nemo_lead.runtime.files import write_atomic
from nemo_lead.runtime.progress import LoopProgress
from nemo_lead.runtime.tracking import open_tracker
from nemo_lead.verify.extract import THINK_OPEN

SEEDING = "per sample: (seed, dataset, problem id) -> the problem's seed, then its sample index (eval/calls.py)"


@dataclass
class Prepared:
    """Everything the job needs before the model: computed the same way in the launcher and on each rank."""

    out: Path
    source: ModelSource
    precision: str  # resolved (`resolve_precision`)
    tokenizer: Any
    datasets: dict[str, list[Problem]]
    rounds: list[range]  # the sample indices of each round (`calls.round_ranges`)
    params: SamplingParams  # with the stop tokens; its seed is the base seed
    settings: dict[str, Any]  # what run.json records (store.py)
    think_open: bool  # the prompt ends inside an open <think> block
    prompt: PromptConfig  # cfg.prompt, or the checkpoint's training prompt (`resolve_prompt`)

    def order(self) -> dict[tuple[str, str], int]:
        """Each problem's place: datasets in order, each in file order (samples.jsonl's order at the end)."""
        return {(name, p.id): i for i, (name, p) in enumerate((name, p) for name, ps in self.datasets.items() for p in ps)}


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
        "seeding": SEEDING,
    }
    return Prepared(
        out=Path(cfg.out or default_out(cfg)), source=source, precision=precision, tokenizer=tokenizer, datasets=datasets,
        rounds=round_ranges(params.n, list(cfg.rounds)), params=params, settings=settings,
        think_open=bool(open_think(tokenizer, prompt_cfg)), prompt=prompt_cfg,
    )


def check_prompt_lengths(cfg: EvalConfig, prep: Prepared) -> None:
    """Every prompt + max_tokens must fit the model's positions (fail before loading weights)."""
    for name, problems in prep.datasets.items():
        check_prompts_fit(problems, prompt_token_ids(prep.tokenizer, problems, prep.prompt), prep.params.max_tokens,
                          prep.source.hf_config.get("max_position_embeddings"), name)


def round_items(prep: Prepared, store: SampleStore, r: int) -> list[Item]:
    """Round r's work given what the store holds (`calls.pending_items`)."""
    samples = prep.rounds[r]
    earlier = range(0, samples.start)

    def correct(key) -> bool:
        rec = store.records.get(key)
        return bool(rec and rec.get("correct"))

    return pending_items(prep.datasets, prep.params.seed, samples, earlier, store.has, correct)


def samples_left(prep: Prepared, store: SampleStore | None = None) -> int:
    """The samples the run folder still misses (0 once `nemo-lead eval` finished; more after it stopped
    before the job's end, which exits 0 too). With rounds, a later round's samples of a problem count only
    once its earlier rounds are in and none of them is correct."""
    if store is None:
        store = SampleStore.open(prep.out, prep.settings, write=False, problems=prep.datasets)
    left = 0
    for r in range(len(prep.rounds)):
        items = round_items(prep, store, r)
        left += sum(sum(not store.has((i.dataset, i.problem.id, s)) for s in range(i.first, i.first + i.count))
                    for i in items)
        if items:  # a later round waits for this one's grades
            break
    return left


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

    def records(self, call: Call, rollouts: list[tuple[int, int, list[int], str]]) -> list[dict[str, Any]]:
        tok = self.prep.tokenizer
        texts = [tok.decode(ids[:-1] if ids and ids[-1] in self.stops else ids, skip_special_tokens=False)
                 for _, _, ids, _ in rollouts]
        items = [call.items[p] for p, _, _, _ in rollouts]
        grades = self._grade(texts, [i.problem.answer for i in items], [f == "stop" for *_, f in rollouts])
        return [
            {"dataset": i.dataset, "problem_id": i.problem.id, "sample": s, "response": text, "extracted": g.extracted,
             "correct": g.correct, "status": g.status, "outcome": outcome_label(g.outcome, finish == "stop"),
             "tokens": len(ids),
             "finish_reason": finish, "gold": i.problem.answer, "grading": self.region, "run": self.tag}
            for i, (_, s, ids, finish), text, g in zip(items, rollouts, texts, grades)
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
    """Per finished call: counts, throughput, Pass@1 so far and the time left, shown the way `progress` says
    (`nemo_lead.runtime.progress`: a bar, log lines, or nothing); only the writer rank shows anything. A run
    in rounds starts a count of its own per round (`start_round`)."""

    def __init__(self, cfg: EvalConfig, active: bool):
        self.mode, self.active = cfg.progress, active
        self.shown = LoopProgress("eval", 1, mode=cfg.progress, active=active, unit="call")
        self.total = self.done = self.calls_done = self.tokens = 0
        self.start = time.monotonic()

    def start_round(self, label: str, samples: int, calls: int) -> None:
        self.shown.close()
        self.shown = LoopProgress(f"eval{label}", max(calls, 1), mode=self.mode, active=self.active, unit="call")
        self.total, self.done, self.calls_done = samples, 0, 0

    def say(self, message: str) -> None:
        self.shown.say(message)

    def update(self, dataset: str, records: list[dict[str, Any]], store: SampleStore, problems: int) -> None:
        self.done += len(records)
        self.calls_done += 1
        self.tokens += sum(r["tokens"] for r in records)
        elapsed = time.monotonic() - self.start
        mine = [r for r in store.records.values() if r["dataset"] == dataset]
        acc = sum(r["correct"] for r in mine) / max(len(mine), 1)
        have = len({r["problem_id"] for r in mine})
        self.shown.step(self.calls_done, {
            dataset: f"{have}/{problems} problems", "samples": f"{self.done}/{self.total}",
            "tok/s": f"{self.tokens / max(elapsed, 1e-9):,.0f}", "Pass@1 so far": f"{acc:.3f}"})

    def close(self) -> None:
        self.shown.close()


# ----------------------------------------------------------------------------- distributed plumbing
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
        progress = EvalProgress(cfg, active=info.rank == 0)
        left = 0
        if info.rank == 0:
            grader = Grader(cfg, prep, store.tag)
            grader.regrade_stale(store, progress.say)
            left = samples_left(prep, store)
            n, rounds = prep.params.n, [len(r) for r in prep.rounds]
            progress.say(f"{prep.source.kind} model {prep.source.path} ({prep.precision}; tp {info.tp}, "
                         f"pp {info.pp}, dp {info.dp}) | {', '.join(f'{k} ({len(v)})' for k, v in prep.datasets.items())}"
                         f" | n {n}{f' in rounds of {rounds}' if len(rounds) > 1 else ''}, T {prep.params.temperature:g},"
                         f" top-p {prep.params.top_p:g}, max_tokens {prep.params.max_tokens} | {len(store.records)} "
                         f"samples already in {prep.out}; {left} to generate"
                         + (" in this round" if len(rounds) > 1 and left else ""))
        left = share_from_rank0(left)
        stopped = bool(left) and _generate_pending(cfg, prep, info, store, grader, progress)
        if stopped:
            _requeue_after_stop(info, prep, store, progress)
        elif info.rank == 0:
            store.put_in_order(prep.order())  # the same file whatever the calls, replicas and resumes
            _write_reports(cfg, prep, store, progress.say)
        dist.barrier()
    finally:
        if progress is not None:
            progress.close()
        if grader is not None:
            grader.close()
        destroy_parallel()


def call_size(cfg: EvalConfig, engine: Any, positions: int) -> int:
    """Sequences per engine call (`nemo_lead.plan.engine_stage.call_sequences`: `call_sequences`, or
    problems_per_call x n, or CALL_WAVES x what the engine holds at once at `positions`, the longest prompt +
    max_tokens): the plan sizes calls by the same rule."""
    return call_sequences(cfg.call_sequences, cfg.problems_per_call, cfg.sampling.n, engine.concurrency(positions))


def _generate_pending(cfg, prep: Prepared, info, store, grader, progress: EvalProgress) -> bool:
    """Generate, grade and store the missing samples, round by round, `dp` calls at a time; True when it
    stopped before the job's end (`_stop_before`), with every finished call stored. As in the training loops,
    the first call(s) of a job always run (nothing is measured yet), so that every attempt of a requeued job
    makes progress."""
    engine = build_engine(engine_config_for(cfg.engine, prep.source), load_policy(prep.source, info, prep.precision))
    try:
        ids = {(name, p.id): t for name, ps in prep.datasets.items()
               for p, t in zip(ps, prompt_token_ids(prep.tokenizer, ps, prep.prompt))}
        positions = max(len(t) for t in ids.values()) + prep.params.max_tokens
        size = share_from_rank0(call_size(cfg, engine, positions) if info.rank == 0 else None)
        if info.rank == 0:
            progress.say(f"engine {type(engine).__name__}: {engine.concurrency(positions)} sequences of {positions:,} "
                         f"tokens at once, calls of up to {size} sequences")
        deadline = Deadline.from_env(os.environ)  # the same environment on every rank; rank 0 measures and decides
        done = 0
        for r in range(len(prep.rounds)):
            items = share_from_rank0(round_items(prep, store, r) if info.rank == 0 else None)
            calls = plan_calls(items, size)
            if not calls:
                continue
            if info.rank == 0 and len(prep.rounds) > 1:
                span = prep.rounds[r]
                progress.start_round(f" round {r + 1}", sum(c.sequences for c in calls), len(calls))
                progress.say(f"round {r + 1} of {len(prep.rounds)} (samples {span.start}..{span.stop - 1}): "
                             f"{len(items)} problems, {sum(c.sequences for c in calls)} samples in {len(calls)} calls")
            elif info.rank == 0:
                progress.start_round("", sum(c.sequences for c in calls), len(calls))
            stopped, done = _generate_calls(engine, prep, info, calls, ids, store, grader, progress, deadline, done)
            if stopped:
                return True
        return False
    finally:
        engine.close()  # vllm: before the job's process groups go


def _generate_calls(engine, prep: Prepared, info, calls: list[Call], ids, store, grader, progress: EvalProgress,
                    deadline, done: int) -> tuple[bool, int]:
    """The calls of one round, `dp` at a time (one per data-parallel replica); (stopped, batches done so far)."""
    for start in range(0, len(calls), info.dp):
        if deadline is not None and done and _stop_before(deadline, info, start, len(calls), progress):
            return True, done
        began = time.monotonic()
        if test_step_delay():
            time.sleep(test_step_delay())
        batch = calls[start:start + info.dp]  # one call per data-parallel replica
        mine = start + info.dp_rank if info.dp_rank < len(batch) else None
        item, flushed = None, 0.0
        if mine is not None:
            call = calls[mine]
            rollouts = engine.generate([ids[(i.dataset, i.problem.id)] for i in call.items],
                                       dataclasses.replace(prep.params, n=call.count),
                                       prompt_seeds=[i.seed for i in call.items], first_sample=call.first)
            item = (mine, [(r.prompt_index, r.sample_index, r.token_ids, r.finish_reason) for r in rollouts])
        for index, rollouts in _gather_to_writer(item, info):
            call = calls[index]
            new = [r for r in grader.records(call, rollouts)
                   if not store.has((r["dataset"], r["problem_id"], r["sample"]))]
            flushing = time.monotonic()
            store.append(new)
            flushed += time.monotonic() - flushing
            dataset = call.items[0].dataset
            progress.update(dataset, new, store, len(prep.datasets[dataset]))
        done += 1
        if deadline is not None:  # the batch's time, less the store's flushes (the "save" of a call)
            deadline.step_done(time.monotonic() - began - flushed)
            deadline.saved(flushed)
    return False, done


def _stop_before(deadline: Deadline, info, done: int, total: int, progress: EvalProgress) -> bool:
    """Collective: whether the next call(s) and the store's flush would end past the job's end less the
    margin (rank 0's measurements and clock decide, as in the training loops); says why on rank 0."""
    now = time.time()
    why = share_from_rank0(deadline.why(now, done, unit="call", save="the store's flush")
                     + f" ({done} of {total} pending calls of this round done)"
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
    if not share_from_rank0(ok):
        raise JobError(f"the samples so far are in {prep.out}, but the job could not be requeued (see the message "
                       "above); submit it again to resume")


def _write_reports(cfg: EvalConfig, prep: Prepared, store: SampleStore, say) -> dict[str, Any]:
    budgets = budget_points(cfg)
    summary = {
        "model": prep.source.path, "model_kind": prep.source.kind, "model_step": prep.source.step,
        "precision": prep.precision, "run": store.tag, "answer_region": cfg.verify.region(ANSWER_REGION),
        "sampling": dataclasses.asdict(prep.params), "budgets": budgets, "report_budgets": list(cfg.report_budgets),
        # in rounds the first round's samples are the ones every problem has: they are what is scored
        **({"rounds": [len(r) for r in prep.rounds], "scored_samples": len(prep.rounds[0])} if len(prep.rounds) > 1 else {}),
        "datasets": {name: dataset_summary(name, problems, store.records, len(prep.rounds[0]), budgets)
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
