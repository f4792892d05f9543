"""`PlanSettings`: the `plan` section of `nemo-lead sft / rl / run / submit` and the settings of `nemo-lead plan`.

Every field is optional: None takes the default named in its comment, so that one section can be laid over
another (`nemo-lead run ... plan.check=warn` over each stage's own `plan`: `merged`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

PLAN_CHECKS = ("error", "warn", "off")
DEFAULTS = {"reserve_gib": 3.0, "prompt_tokens": 1024}


@dataclass
class PlanSettings:
    # before a job starts on GPUs: error (a layout that cannot fit stops it, naming what to change) | warn
    # (says so and starts) | off. None: error on GPUs; jobs on CPUs are not checked (no GPU memory to plan)
    check: Optional[str] = None
    gpu: Optional[str] = None  # h100 | h200 | h20 | a100 | a100-40 | b200; None: the device the job finds
    gpu_memory_gib: Optional[float] = None  # GiB per GPU; None: the GPU's
    reserve_gib: Optional[float] = None  # GiB per GPU not for tensors (CUDA context, NCCL, allocator); None: 3
    prompt_tokens: Optional[int] = None  # RL: the longest prompt, in tokens (the data is not read); None: 1024
    # the step time's mean response length in tokens (memory always takes max_tokens): RL and the engine
    # stages (distill, eval); the plan spreads the lengths around it (nemo_lead/plan/timing.py) and shows the
    # step with every response at max_tokens beside it. None: every response at max_tokens
    mean_response_tokens: Optional[int] = None
    mean_response_source: Optional[str] = None  # where the mean comes from, printed beside it (e.g. a paper's table)
    # the rows of a recipe stage's data where they cannot be counted before the stage runs (an earlier stage
    # writes them): distill / eval, problems in all; sft, traces. None: counted from the files when readable
    data_rows: Optional[int] = None
    # a distill stage in rounds (keep: first): the share of problems its first round solves, so the share the
    # later rounds sample again (nemo_lead/plan/engine_stage.py); None: every problem, the one-round cost
    first_round_solve_rate: Optional[float] = None
    first_round_solve_source: Optional[str] = None  # where that share comes from, printed beside it

    def __post_init__(self) -> None:
        if self.check in ("False", "false"):  # YAML reads a bare `off` (plan.check=off) as false
            self.check = "off"
        if self.check is not None and self.check not in PLAN_CHECKS:
            raise ValueError(f"plan.check must be one of {', '.join(PLAN_CHECKS)}, got {self.check!r}")
        for key in ("gpu_memory_gib", "prompt_tokens", "mean_response_tokens", "data_rows"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ValueError(f"plan.{key} must be > 0, got {value}")
        if self.first_round_solve_rate is not None and not 0 <= self.first_round_solve_rate <= 1:
            raise ValueError(f"plan.first_round_solve_rate must be in [0, 1], got {self.first_round_solve_rate}")
        if self.reserve_gib is not None and self.reserve_gib < 0:
            raise ValueError(f"plan.reserve_gib must be >= 0, got {self.reserve_gib}")
        if self.gpu is not None:
            from nemo_lead.plan.timing import gpu_named

            gpu_named(self.gpu)

    def planned_gpu(self):
        """The `nemo_lead.plan.timing.GPU` the plan takes: `gpu`, else the H100's figures (for the times; the
        memory is `gpu_memory_gib`'s where that is set)."""
        from nemo_lead.plan.timing import gpu_named

        return gpu_named(self.gpu or "h100")

    def merged(self, over: PlanSettings | None) -> PlanSettings:
        """These settings with the fields `over` sets (not None) replaced."""
        if over is None:
            return self
        return dataclasses.replace(self, **{f.name: getattr(over, f.name) for f in dataclasses.fields(self)
                                            if getattr(over, f.name) is not None})

    def value(self, key: str):
        """A field, or its default when None."""
        v = getattr(self, key)
        return DEFAULTS.get(key) if v is None else v
