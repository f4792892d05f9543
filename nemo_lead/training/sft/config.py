"""`SFTConfig`: what `nemo-lead sft` reads (its defaults are the fields below).

A step is `global_batch` traces (rows of the trace set, in a seeded per-epoch shuffle), packed into rows of
at most `data.max_seq_len` tokens; the loss is the mean over every assistant token of the step's traces,
however they are packed (see `nemo_lead.data.traces`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from nemo_lead.config.fields import setting
from nemo_lead.data import PromptConfig
from nemo_lead.training.actor.config import ActorConfig, ActorOptimConfig
from nemo_lead.training.run.config import RunSettings

OVERLONG_CHOICES = ("drop", "truncate")


def _sft_optim() -> ActorOptimConfig:
    return ActorOptimConfig(lr=1e-5, min_lr=1e-6, lr_warmup_steps=10, lr_decay_style="cosine", lr_decay_steps=None,
                            weight_decay=0.01, clip_grad=1.0)


def _sft_actor() -> ActorConfig:
    return ActorConfig(optim=_sft_optim())


@dataclass
class SFTDataConfig:
    path: Optional[str] = None  # trace set: JSONL / JSON / Parquet file or HF datasets folder
    val_path: Optional[str] = None  # held-out traces; None: `val_fraction` of `path`
    val_fraction: float = 0.0  # share of `path` held out for validation when val_path is None
    split: Optional[str] = None  # split of a HF datasets folder
    fields: dict[str, str] = field(default_factory=dict)  # column names: problem / response / messages / id
    max_seq_len: int = 4096  # tokens per packed row (and the longest trace kept)
    pack: bool = True  # several traces per row (attention and positions restart per trace)
    overlong: str = setting("drop", choices=OVERLONG_CHOICES)  # traces longer than max_seq_len: drop | truncate (counted and reported)
    limit: Optional[int] = None  # first N traces (smoke runs)


@dataclass
class SFTConfig(RunSettings):
    actor: ActorConfig = field(default_factory=_sft_actor)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    tokenizer: Optional[str] = None  # tokenizer folder; None: the model's (HF folder / checkpoint tokenizer/)
    epochs: int = 1  # used when steps is None: steps = epochs x (traces // global_batch)
    global_batch: int = 32  # traces per optimizer step
    # validation loss every N steps (0: only at the end when there is a held-out set)
    val_every: int = setting(0, resume="flag")
    # a NaN / inf loss or gradient norm always stops an SFT run (last good checkpoint kept); not a setting
    stop_on_nonfinite: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.check_run_settings()
        if self.data.path is None:
            raise ValueError("data.path must name a trace set (--data TRACES)")
        if self.global_batch < 1 or self.epochs < 1 or self.val_every < 0:
            raise ValueError("global_batch and epochs must be >= 1, val_every >= 0")
        if self.data.max_seq_len < 2:
            raise ValueError(f"data.max_seq_len must be >= 2, got {self.data.max_seq_len}")
        if self.data.overlong not in OVERLONG_CHOICES:
            raise ValueError(f"data.overlong must be one of {list(OVERLONG_CHOICES)}, got {self.data.overlong!r}")
        if not 0 <= self.data.val_fraction < 1:
            raise ValueError(f"data.val_fraction must be in [0, 1), got {self.data.val_fraction}")
        if self.data.pack and self.actor.layer_spec == "te":
            raise ValueError("actor.layer_spec=te with data.pack=true: packed traces need the local layer spec "
                             "(Transformer Engine's path for them is not implemented here); set "
                             "actor.layer_spec=auto or local, or data.pack=false")

    def packing_layer_spec(self) -> tuple[str, str | None]:
        """The layer spec the actor is built with, and a note when `auto` was decided by packing:
        `actor.layer_spec=auto` where traces are packed means the local spec, whether or not Transformer
        Engine imports (its path for packed sequences is not implemented here)."""
        if not (self.data.pack and self.actor.layer_spec == "auto"):
            return self.actor.layer_spec, None
        return "local", ("actor.layer_spec=auto with data.pack=true: the local layer spec (packed traces need it; "
                         "data.pack=false lets auto pick Transformer Engine)")
