"""Settings every training run shares (`nemo-lead sft` and `nemo-lead rl`): where the run folder is, how often
to checkpoint and how many checkpoints to keep, the seed, logging, and which settings a continued run may
change. Each field declares its rule for reruns (`nemo_lead.config.fields.setting`).

`TrainingSettings` is what a run's life (`nemo_lead.training.run.lifecycle`) reads of a command's config:
these settings, the actor, the prompt format, the tokenizer and whether a non-finite loss stops the run.
`SFTConfig` and `RLConfig` satisfy it; `training/run/` imports neither."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

from nemo_lead.config.fields import setting
from nemo_lead.data.prompts import PromptConfig
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.runtime.progress import PROGRESS_MODES, check_progress_mode
from nemo_lead.runtime.tracking import WandbSettings
from nemo_lead.training.actor.config import ActorConfig


@dataclass
class RunSettings:
    """Mixed into SFTConfig / RLConfig (same keys at the top level of both)."""

    # the run folder (config.yaml, metrics.jsonl, tb/, checkpoints/); required; a run folder may be moved
    out: Optional[str] = setting(None, resume="free", results=False)
    # optimizer steps in all (a rerun may raise it to extend the run)
    steps: Optional[int] = setting(None, resume="free")
    # checkpoint every N steps (0: not by steps); also on SIGTERM / SIGUSR1 / SIGINT / SIGHUP / a lost output
    save_every: int = setting(0, resume="flag", results=False)
    # and whenever this many minutes passed since the last checkpoint (0: not by time): bounds what a crash,
    # an OOM or kill -9 can lose, whatever a step costs
    save_every_minutes: float = setting(30.0, resume="flag", results=False)
    keep_last: int = setting(2, resume="flag", results=False)  # complete checkpoints kept (the newest); 0 keeps all
    # the final checkpoint: full (model, optimizer, RNG: resumable, ~3x the fp32 weights) | weights (model and
    # tokenizer only: what eval / convert / a next stage read; a finished run cannot be extended from it alone)
    final_checkpoint: str = setting("full", resume="free", results=False, choices=("full", "weights"))
    seed: int = 1234  # data order, sampling seeds, dropout
    # auto (a bar on a terminal, log lines otherwise) | bar | lines | none
    progress: str = setting("auto", resume="free", results=False, choices=PROGRESS_MODES)
    tensorboard: bool = setting(True, resume="free", results=False)  # also write TensorBoard event files to RUN/tb/
    # Weights & Biases: the same scalars, the config and the validation table (nemo_lead.runtime.tracking)
    wandb: WandbSettings = setting(default_factory=WandbSettings, resume="free", results=False)
    # keys a continued run may change (--allow-change KEY,...): only keys marked so (learning rate, clipping,
    # checkpoint / validation cadence); each change is recorded in RUN/changes.jsonl
    allow_change: list[str] = setting(default_factory=list, resume="free", results=False)
    # the memory plan checked before starting on GPUs (nemo_lead.plan.check); never a difference on resume
    plan: PlanSettings = setting(default_factory=PlanSettings, resume="free", results=False)

    def check_run_settings(self) -> None:
        if not getattr(getattr(self, "actor", None), "model", None):
            raise ValueError("--model is required (actor.model): a HF model folder, a nemo-lead checkpoint or a model "
                             "preset")
        if not self.out:
            raise ValueError("out must name the run folder (--out RUN)")
        if self.steps is not None and self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        for key in ("save_every", "keep_last", "save_every_minutes"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")
        check_progress_mode(self.progress)
        if self.final_checkpoint not in ("full", "weights"):
            raise ValueError(f"final_checkpoint must be full or weights, got {self.final_checkpoint!r}")


@runtime_checkable
class TrainingSettings(Protocol):
    """What a training run's life reads of its command's config (module docstring): `RunSettings`' keys, the
    actor's section, the prompt format, the tokenizer folder, and `stop_on_nonfinite` (a field of RLConfig;
    SFTConfig's is a constant: a NaN / inf loss always stops an SFT run)."""

    out: Optional[str]
    steps: Optional[int]
    save_every: int
    save_every_minutes: float
    keep_last: int
    final_checkpoint: str
    seed: int
    progress: str
    tensorboard: bool
    wandb: WandbSettings
    allow_change: list[str]
    actor: ActorConfig
    prompt: PromptConfig
    tokenizer: Optional[str]
    stop_on_nonfinite: bool
