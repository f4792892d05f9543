"""Settings every training run shares (`nemo-lead sft` and `nemo-lead rl`): where the run folder is, how often
to checkpoint and how many checkpoints to keep, the seed, logging."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nemo_lead.progress import check_progress_mode


@dataclass
class RunSettings:
    """Mixed into SFTConfig / RLConfig (same keys at the top level of both)."""

    out: Optional[str] = None  # the run folder (config.yaml, metrics.jsonl, tb/, checkpoints/); required
    steps: Optional[int] = None  # optimizer steps in all (a rerun may raise it to extend the run)
    save_every: int = 0  # checkpoint every N steps (0: only at the end); also on SIGTERM / SIGUSR1 / SIGINT
    keep_last: int = 2  # complete checkpoints kept (the newest); 0 keeps all
    # the final checkpoint: full (model, optimizer, RNG: resumable, ~3x the fp32 weights) | weights (model and
    # tokenizer only: what eval / convert / a next stage read; a finished run cannot be extended from it alone)
    final_checkpoint: str = "full"
    seed: int = 1234  # data order, sampling seeds, dropout
    progress: str = "auto"  # auto (a bar on a terminal, log lines otherwise) | bar | lines | none
    tensorboard: bool = True  # also write TensorBoard event files to RUN/tb/

    def check_run_settings(self) -> None:
        if not self.out:
            raise ValueError("out must name the run folder (--out RUN)")
        if self.steps is not None and self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        for key in ("save_every", "keep_last"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")
        check_progress_mode(self.progress)
        if self.final_checkpoint not in ("full", "weights"):
            raise ValueError(f"final_checkpoint must be full or weights, got {self.final_checkpoint!r}")
