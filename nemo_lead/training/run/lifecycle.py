"""What the SFT and RL loops share around their steps: start (parallel state, actor, run folder, resume),
checkpoint, stop on a signal, stop on a non-finite number, finish.

    run = start_run(cfg, "rl")                      # every rank; resumes from RUN/checkpoints when there are any
    while run.step < cfg.steps:
        ...one step...; run.step += 1
        if end_of_step(run, loop_state): break      # checkpoint when due, or on a stop signal (loop_state: a
                                                    # dict, or a function called only when a save is due)
    finish_run(run, loop_state)                     # final checkpoint, done.json

A resumed run gets back the actor's weights, optimizer, learning-rate schedule and every rank's RNG
streams (`nemo_lead.training.run.train_state`), and the loop's own state (`Run.loop_state`: data position,
counters) from the checkpoint's meta.json, so it continues exactly where the checkpoint was taken.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from torch.distributed.checkpoint.api import CheckpointException

from nemo_lead.checkpoint.meta import checkpoint_dir, latest_checkpoint
from nemo_lead.data import prompt_settings, resolve_prompt
from nemo_lead.data.traces import check_vocab_covers
from nemo_lead.models import load_tokenizer
from nemo_lead.models.source import ModelSource, model_source
from nemo_lead.models.weights_checkpoint import load_checkpoint
from nemo_lead.parallel import (
    ParallelInfo,
    describe_hosts,
    destroy_parallel,
    detect_launch,
    init_parallel,
    rank_hosts,
)
from nemo_lead.parallel.local import JobError
from nemo_lead.parallel.ranks import on_writer_then_share
from nemo_lead.runtime.deadline import Deadline, requeue_or_advise, test_step_delay
from nemo_lead.runtime.processes import die_with_parent
from nemo_lead.runtime.progress import LoopProgress
from nemo_lead.runtime.quiet import backend_note, hide_import_noise
from nemo_lead.runtime.signals import StopRequest, install_stop_handlers
from nemo_lead.runtime.tracking import open_tracker
from nemo_lead.training.actor.megatron_actor import Actor, build_actor
from nemo_lead.training.run.config import TrainingSettings
from nemo_lead.training.run.folder import RunFolder
from nemo_lead.training.run.lock import FolderInUse, lock_folder
from nemo_lead.training.run.resume import choose_resume_checkpoint
from nemo_lead.training.run.train_state import load_actor_state, save_actor_state

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase  # transformers loads when the tokenizer does

LoopState = Union[dict[str, Any], Callable[[], dict[str, Any]]]  # or a function giving it, called when a save is due
Settings = TypeVar("Settings", bound=TrainingSettings)  # SFTConfig or RLConfig


TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"  # set by torchrun for its ranks
TORCHRUN_ADVICE = ("under torchrun, a signal to the torchrun agent is not a clean stop: SIGTERM / SIGINT give the "
                   "ranks --shutdown-timeout seconds (30 by default) before SIGKILL, SIGUSR1 / SIGHUP end the agent. "
                   "Start torchrun with --shutdown-timeout longer than a step plus a checkpoint, or signal the rank "
                   "processes themselves (docs/faults.md)")


class NonFiniteError(JobError):
    """A NaN / inf loss or gradient norm: the run stops, keeping its last good checkpoint."""

@dataclass
class Run:
    cfg: TrainingSettings  # the loop's SFTConfig or RLConfig
    name: str  # "sft" | "rl"
    info: ParallelInfo
    actor: Actor
    folder: RunFolder
    tokenizer: PreTrainedTokenizerBase
    tokenizer_dir: str
    stop: StopRequest
    progress: LoopProgress
    step: int  # optimizer steps done
    loop_state: dict[str, Any]  # what the checkpoint held (empty for a fresh run)
    last_saved: int = -1
    last_saved_at: float = dataclasses.field(default_factory=time.monotonic)  # or the run's start
    total_steps: int = 0
    resumed_from: Path | None = None  # the checkpoint this run continued from (None: a fresh start)
    # more checkpoint parts the loop writes: name -> writer(folder), called on every rank at each full save
    parts: dict[str, Callable[[Path], None]] = dataclasses.field(default_factory=dict)
    # the job's end (SLURM_JOB_END_TIME) and the measured step and save times (nemo_lead.runtime.deadline)
    deadline: Deadline | None = dataclasses.field(default_factory=lambda: Deadline.from_env(os.environ))
    step_ended_at: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def is_writer(self) -> bool:
        return self.info.rank == 0

    def say(self, message: str) -> None:
        self.progress.say(message)

    def warn(self, message: str) -> None:
        self.progress.warn(message)


def model_and_prompt(cfg: Settings) -> tuple[Settings, ModelSource]:
    """(`cfg` with the prompt the run uses, the `ModelSource` of its `actor.model`): a checkpoint's training
    prompt replaces `prompt` while its keys are at their defaults (`nemo_lead.data.resolve_prompt`, the rule
    of every command)."""
    source = model_source(cfg.actor.model, cfg.tokenizer, key="actor.model")
    prompt = resolve_prompt(cfg.prompt, source.prompt)
    return (cfg if prompt is cfg.prompt else dataclasses.replace(cfg, prompt=prompt)), source


def content_digest(rows: list) -> str:
    """A short hash of JSON-able rows (the problems or traces a run reads), for RUN/inputs.json."""
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:24]


def start_run(cfg: TrainingSettings, name: str, total_steps: int, log_names: tuple[str, ...] = (), *,
              source: ModelSource, tokenizer: PreTrainedTokenizerBase | None = None,
              inputs: dict[str, str] | None = None, layer_spec: str | None = None) -> Run:
    """Collective: set up the parallel state and the actor, open the run folder, resume from its latest
    checkpoint when it has one. `log_names`: the loop's per-step JSONL logs to cut
    back on resume; `tokenizer`: the run's tokenizer when the caller already loaded it; `inputs`: content
    hashes of the data (RUN/inputs.json). `source`: from `model_and_prompt`. `layer_spec`: the spec the actor is
    built with where the loop resolves the config's `auto` (SFT's packed traces); the config keeps `auto`."""
    hide_import_noise()
    _lock(cfg.out)
    tok_dir = source.require_tokenizer()
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(tok_dir)
    hf_config = source.hf_config
    try:
        check_vocab_covers(tokenizer, hf_config.get("vocab_size", len(tokenizer)))
    except ValueError as e:
        raise ValueError(f"actor.model={cfg.actor.model} with tokenizer {tok_dir}: {e}") from None
    stop = install_stop_handlers()
    if TORCHRUN_ENV in os.environ:
        die_with_parent()  # a killed torchrun agent leaves no rank writing the folder
    info = init_parallel(cfg.actor.tp, cfg.actor.pp, seed=cfg.seed, model_config=hf_config)
    hosts = rank_hosts()  # collective; said below when the ranks span several nodes (a resumed job may move)
    folder = RunFolder(cfg.out, writer=info.rank == 0, tensorboard=cfg.tensorboard)

    choice = choose_resume_checkpoint(info, cfg.out, total_steps)
    latest = choice.path

    def open_folder():  # the folder as the resumed step left it: its settings checked, its logs cut back to it
        folder.prepare(cfg, inputs, resumed_step=choice.step if latest is not None else None)
        folder.rewind(choice.step if latest is not None else -1, log_names)
        folder.tracker = open_tracker(cfg.wandb, cfg.out, cfg, job_type=name)

    on_writer_then_share(info, open_folder)
    actor_cfg = dataclasses.replace(cfg.actor, optim=cfg.actor.optim.for_run(total_steps),
                                    layer_spec=layer_spec or cfg.actor.layer_spec)
    actor = build_actor(actor_cfg, info)
    progress = LoopProgress(name, total_steps, mode=cfg.progress, active=info.rank == 0,
                            on_lost_output=lambda: stop.request("SIGPIPE"))
    if TORCHRUN_ENV in os.environ:
        progress.warn(TORCHRUN_ADVICE)
    if len(set(hosts)) > 1:
        progress.say(describe_hosts(hosts))
    step, loop_state = _resume(cfg, choice, actor, info, progress, total_steps)
    return Run(cfg=cfg, name=name, info=info, actor=actor, folder=folder, tokenizer=tokenizer, tokenizer_dir=tok_dir,
               stop=stop, progress=progress, step=step, loop_state=loop_state,
               last_saved=choice.saved_step(cfg.final_checkpoint, total_steps),
               total_steps=total_steps,
               resumed_from=latest)


def _lock(out: str) -> None:
    """Global rank 0 locks the run folder before anything is read or written: a second start is refused at
    once (in one line from the launcher, not a rank's traceback, when there are several ranks)."""
    launch = detect_launch(os.environ)
    if launch.rank == 0:
        try:
            lock_folder(out)
        except FolderInUse as e:
            if launch.world_size == 1:
                raise
            raise JobError(str(e)) from None


def _resume(cfg: TrainingSettings, choice: Any, actor: Actor, info: ParallelInfo, progress: LoopProgress,
            total_steps: int) -> tuple[int, dict[str, Any]]:
    """Collective: the step and loop state of the checkpoint `choice` names, loaded into `actor` (0 and {} for
    a fresh start), saying what was found and set aside."""
    for note in choice.notes:
        progress.say(f"note: {cfg.out}/checkpoints/{note}")
    for path, aside, problems in choice.damaged:
        progress.warn(f"{path} is damaged ({'; '.join(problems)}): not loaded, set aside as {aside.name}")
    step, loop_state = 0, {}
    if choice.path is not None:
        # a weights-only final checkpoint (final_checkpoint=weights) is only ever a finished run's
        meta = ({**load_checkpoint(choice.path, actor.model, verify=False), "rng_restored": True}
                if choice.weights_only else load_actor_state(actor, choice.path, verify=False))
        step, loop_state = int(meta["step"]), meta.get("loop", {})
        if not meta["rng_restored"]:
            progress.say("note: the checkpoint was written by another parallel layout; RNG streams start afresh")
        progress.say(f"resuming from {choice.path} (step {step} of {total_steps})")
    else:
        progress.say(f"starting {cfg.out} ({total_steps} steps; tp {info.tp}, pp {info.pp}, dp {info.dp}); "
                     + backend_note())
    progress.restart_at(step)
    return step, loop_state


def _final_weights_only(run: Run) -> bool:
    return run.cfg.final_checkpoint == "weights" and run.step >= run.total_steps


def save(run: Run, loop_state: LoopState, weights_only: bool = False) -> Path:
    """Collective: checkpoint the run at its current step (atomic), then keep the newest `keep_last`.
    `weights_only`: the model and tokenizer without the optimizer and RNG states (not resumable), and without
    `run.parts`."""
    path = checkpoint_dir(run.cfg.out, run.step)
    started = time.monotonic()
    loop_state = loop_state() if callable(loop_state) else loop_state
    previous = latest_checkpoint(run.cfg.out)
    try:
        # the prompt format goes along: `nemo-lead eval` of the checkpoint uses it (nemo_lead.eval.runner)
        save_actor_state(run.actor, path, step=run.step, loop_state=loop_state, tokenizer_dir=run.tokenizer_dir,
                         extra_meta={"prompt": prompt_settings(run.cfg.prompt)}, weights_only=weights_only,
                         extra_parts=None if weights_only else run.parts)
    except (OSError, RuntimeError, CheckpointException) as e:
        reason = save_error_reason(e)
        if reason is None:
            raise
        raise SaveFailed(save_failure_message(path, reason, previous)) from None
    run.folder.prune_checkpoints(run.cfg.keep_last)
    run.last_saved = run.step
    if run.deadline is not None:
        run.deadline.saved(time.monotonic() - started)
    run.last_saved_at = time.monotonic()
    return path


class SaveFailed(JobError):
    """A checkpoint could not be written (no space, quota, I/O error): the run stops, the previous checkpoint
    and the folder as they were."""


# what a failed write says; "worker failure": torch's checkpoint writer process failed (megatron-core 0.19 reports
# only that, its worker printed the cause)
_IO_WORDS = ("errno", "no space", "quota", "inline_container", "i/o", "write", "file", "worker failure")


def save_error_reason(e: BaseException) -> str | None:
    """The first line of what went wrong in a save, or None when `e` is no I/O failure (a bug: re-raised).
    torch's checkpoint writer wraps its workers' errors in a CheckpointException: the first one is taken."""
    if isinstance(e, CheckpointException):
        inner = [exc for exc, _ in e.failures.values()]
        e = inner[0] if inner else e
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text if isinstance(e, OSError) or any(w in text.lower() for w in _IO_WORDS) else None


def save_failure_message(path: Path, reason: str, previous: Path | None) -> str:
    """One line: the checkpoint, what failed, the bytes it needs (the previous checkpoint's size, when there
    is one) and the free space where it goes; what is kept and what to do."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    size = _bytes_in(previous) if previous else 0
    needed = f"about {_gb(size)} (the size of {previous.name})" if previous else "an unknown amount"
    if size > free:
        reason += " (not enough free space)"
    kept = f"{previous} is kept" if previous else "no earlier checkpoint exists"
    return (f"saving {path} failed: {reason}. The checkpoint needs {needed}; {_gb(free)} are free on that file "
            f"system. Nothing of the failed save is left; {kept}. Free space (or fix the file system) and run the "
            "same command again to resume.")


def _bytes_in(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def stop_if_not_finite(run: Run, metrics: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Stop the run (NonFiniteError) when one of `keys` is NaN / inf; nothing more is saved."""
    bad = [k for k in keys if isinstance(metrics.get(k), float) and not math.isfinite(metrics[k])]
    if bad and run.cfg.stop_on_nonfinite:
        last = f"step {run.last_saved}" if run.last_saved >= 0 else "none yet"
        lr = run.cfg.actor.optim.lr
        raise NonFiniteError(f"step {run.step}: {', '.join(f'{k} = {metrics[k]}' for k in bad)}; stopping. The last "
                             f"good checkpoint ({last}) is kept in {run.cfg.out}/checkpoints. Check the data, or "
                             f"resume with a lower learning rate: the same command with --allow-change "
                             f"actor.optim.lr actor.optim.lr={lr / 10:g}")


def _save_due(run: Run) -> bool:
    """`save_every` steps, or `save_every_minutes` since the last checkpoint (rank 0's clock decides, so
    every rank saves after the same step)."""
    every, minutes = run.cfg.save_every, run.cfg.save_every_minutes
    if every and run.step % every == 0:
        return True
    if not minutes:
        return False
    return bool(on_writer_then_share(run.info, lambda: time.monotonic() - run.last_saved_at >= 60 * minutes))


def end_of_step(run: Run, loop_state: LoopState) -> bool:
    """Collective, after each step: checkpoint when due (`_save_due`), and on a stop signal (then True: the
    loop must return; a SIGUSR1 under SLURM also requeues the job), and before a step that would run past the
    job's end (`_past_deadline`)."""
    if test_step_delay():
        time.sleep(test_step_delay())
    if run.deadline is not None:
        run.deadline.step_done(time.monotonic() - run.step_ended_at)
    if _save_due(run) and not _final_weights_only(run):  # finish_run writes that one
        save(run, loop_state)
    if _past_deadline(run, loop_state):
        return True
    run.step_ended_at = time.monotonic()
    if run.stop.agreed():
        if run.last_saved != run.step:
            save(run, loop_state)
        run.say(f"stopped by {run.stop.signal_name} after step {run.step}; checkpoint at step {run.step}")
        requeue_wanted = run.stop.signal_name == "SIGUSR1" and "SLURM_JOB_ID" in os.environ
        requeued = on_writer_then_share(run.info, run.stop.after_checkpoint)
        if requeue_wanted and not requeued:
            # exit non-zero: SLURM must not mark the job COMPLETED (a chained next stage would start)
            raise JobError(f"step {run.step} is checkpointed in {run.cfg.out}, but the job could not be requeued "
                           "(see the message above); submit it again to resume")
        return True
    return False


def _past_deadline(run: Run, loop_state: LoopState) -> bool:
    """Collective: when the next step and its checkpoint would end past the job's end (rank 0's clock
    decides), checkpoint, requeue the SLURM job and return True (the loop stops; the command exits 0)."""
    if run.deadline is None or run.step >= run.total_steps:
        return False
    why = on_writer_then_share(run.info, lambda: run.deadline.why(time.time(), run.step)
                                if run.deadline.next_would_pass(time.time()) else "")
    if not why:
        return False
    if run.last_saved != run.step:
        save(run, loop_state)
    run.say(f"{why}; checkpoint at step {run.step}")
    if not on_writer_then_share(run.info, lambda: requeue_or_advise(run.say)):
        raise JobError(f"step {run.step} is checkpointed in {run.cfg.out}, but the job could not be requeued "
                       "(see the message above); submit it again to resume")
    return True


def finish_run(run: Run, loop_state: LoopState, stopped: bool) -> None:
    """Collective: the final checkpoint and done.json (unless the loop was stopped early), then clean up."""
    try:
        if not stopped:
            if run.last_saved != run.step:
                save(run, loop_state, weights_only=_final_weights_only(run))
            final = checkpoint_dir(run.cfg.out, run.step)
            run.folder.mark_done(run.step, final)
            run.say(f"done: {run.step} steps; final checkpoint {final}")
    finally:
        close_run(run)
        destroy_parallel()


def close_run(run: Run) -> None:
    run.progress.close()
    run.folder.close()
    run.stop.uninstall()


def abort_run(run: Run) -> None:
    """After an exception in the loop: close files and the parallel state (nothing more is saved)."""
    close_run(run)
    destroy_parallel()
