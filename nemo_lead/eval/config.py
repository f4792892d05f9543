"""`EvalConfig`: what `nemo-lead eval` reads (its defaults are the paper's protocol).

The paper's protocol (arXiv 2504.09696, "Evaluation"): AIME24 and AIME25, temperature 0.6, top-p 0.95, 32 samples
per problem, Cons@32 / Pass@1 / Len_avg, at a response budget of 14,336 tokens for the 14B models (the
defaults here) or 8,192 for the 7B ablations (`--max-tokens 8192`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from nemo_lead.config.fields import setting
from nemo_lead.data import PromptConfig
from nemo_lead.eval.calls import round_ranges
from nemo_lead.generation import EngineConfig, SamplingParams, check_engine_layout
from nemo_lead.models.source import PRECISION_CHOICES
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.runtime.progress import PROGRESS_MODES, check_progress_mode
from nemo_lead.runtime.tracking import WandbSettings
from nemo_lead.verify import VerifyConfig, default_region

ANSWER_REGION = default_region("paper")  # after_think, the paper's protocol: R1-style models think first, then answer
PAPER_BUDGETS = [8192, 14336]  # the paper's response budgets: 7B and 14B


def _paper_sampling() -> SamplingParams:
    return SamplingParams(n=32, temperature=0.6, top_p=0.95, max_tokens=14336, seed=1234)


@dataclass
class EvalConfig:
    model: Optional[str] = None  # HF model folder (config.json) or nemo-lead checkpoint folder (meta.json)
    data: str = "aime24,aime25"  # comma-separated: built-in names (aime24, aime25, math500) and/or files
    out: Optional[str] = setting(None, results=False)  # output folder; None: eval_runs/<model>-t<T>-n<n>-<max_tokens>tok
    compare: list[str] = setting(default_factory=list, results=False)  # eval folders (or summary.json files) to tabulate
    limit: Optional[int] = None  # first N problems of each dataset (smoke runs)
    split: Optional[str] = None  # split of a HF datasets folder given in `data`
    fields: dict[str, str] = field(default_factory=dict)  # column names of user files: problem/answer/id
    tokenizer: Optional[str] = None  # tokenizer folder; None: the HF folder / the checkpoint's tokenizer/
    tp: int = 1
    pp: int = 1
    precision: str = "auto"  # auto (fp32 on CPU; on a GPU bf16, fp16 for fp16 weights) | fp32 | bf16 | fp16 | fp8
    stop_at_eos: bool = True  # the end tokens (tokenizer EOS + generation_config.json eos_token_id) end a response
    # sequences per engine call, the unit of resume (a stopped or killed job redoes at most one call per
    # replica); None: CALL_WAVES (nemo_lead.plan.engine_stage) x the sequences the engine decodes at once (its KV budget / batch limit at
    # the longest prompt + max_tokens). Samples do not depend on it (per-sample seeds: eval/calls.py)
    call_sequences: Optional[int] = setting(None, results=False)
    problems_per_call: Optional[int] = setting(None, results=False)  # the older spelling: calls of problems_per_call x n
    # sample in rounds: the sizes of the first rounds, the last takes the rest of n; a round samples only the
    # problems with no correct sample yet ([1]: sample 0, then 1 .. n-1 where it failed; the distill stage's
    # keep: first). []: all n at once. With rounds the summary scores sample 0 of every problem
    rounds: list[int] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=_paper_sampling)
    prompt: PromptConfig = field(default_factory=PromptConfig)  # a checkpoint's training prompt wins at defaults
    # auto: vLLM where it is installed on a GPU and the plan finds it the faster that fits, else the megatron
    # engine (printed at the start)
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(kind="auto"))
    verify: VerifyConfig = field(default_factory=VerifyConfig)  # answer_region None: after_think (ANSWER_REGION)
    budgets: list[int] = setting(default_factory=list, results=False)  # accuracy-vs-budget points; []: 16 steps to max_tokens
    report_budgets: list[int] = setting(default_factory=lambda: list(PAPER_BUDGETS), results=False)  # table columns
    plot: bool = setting(True, results=False)  # write accuracy_vs_budget.png
    # auto (a bar on a terminal, log lines otherwise) | bar | lines | none (nemo_lead.runtime.progress)
    progress: str = setting("auto", results=False, choices=PROGRESS_MODES)
    # Weights & Biases: the config and the summary table (nemo_lead.runtime.tracking); its id in OUT/wandb.json
    wandb: WandbSettings = setting(default_factory=WandbSettings, results=False)
    # what `nemo-lead plan` assumes of this stage in a recipe (distill, eval): the mean response length
    # (plan.mean_response_tokens), the problems when the data cannot be counted (plan.data_rows) and, with
    # rounds, the share of problems the first round solves (plan.first_round_solve_rate)
    plan: PlanSettings = setting(default_factory=PlanSettings, results=False)

    def __post_init__(self) -> None:
        if not self.model and not self.compare:
            raise ValueError("model must name a HF folder or a nemo-lead checkpoint (--model DIR), "
                             "or give runs to compare (--compare RUN_A RUN_B ...)")
        if not self.compare and not dataset_specs(self.data):
            raise ValueError("data must name at least one dataset (--data aime24,aime25)")
        for key in ("tp", "pp", "problems_per_call", "call_sequences"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        round_ranges(self.sampling.n, list(self.rounds))
        check_engine_layout(self.engine, tp=self.tp, pp=self.pp, prefix="", own_layout=False)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.precision not in PRECISION_CHOICES:
            raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {self.precision!r}")
        if self.sampling.seed is None:
            raise ValueError("sampling.seed must be an integer: each problem gets a seed derived from it, "
                             "which is what makes a resumed run equal an uninterrupted one")
        check_progress_mode(self.progress)
        bad = [b for b in [*self.budgets, *self.report_budgets] if b < 1]
        if bad:
            raise ValueError(f"budgets and report_budgets must be token counts >= 1, got {bad}")


def dataset_specs(data: str) -> list[str]:
    """The comma-separated entries of `data`, stripped, empty ones dropped."""
    return [s.strip() for s in data.split(",") if s.strip()]


def budget_points(cfg: EvalConfig) -> list[int]:
    """Budgets of the accuracy-vs-budget curve: `cfg.budgets`, or 16 even steps up to max_tokens plus the
    report budgets below it. Budgets above max_tokens say nothing (no response is longer), so are dropped."""
    top = cfg.sampling.max_tokens
    points = cfg.budgets or [-(-top * i // 16) for i in range(1, 17)] + list(cfg.report_budgets)
    return sorted({b for b in points if b <= top}) or [top]


def model_name(model: str) -> str:
    """A short name for a model folder: its name, or <run>-step_N for a checkpoint in <run>/checkpoints/."""
    path = Path(model).resolve()
    if path.name.startswith("step_") and path.parent.name == "checkpoints":
        return f"{path.parent.parent.name}-{path.name}"
    return path.name


def default_out(cfg: EvalConfig) -> str:
    s = cfg.sampling
    return str(Path("eval_runs") / f"{model_name(cfg.model)}-t{s.temperature:g}-n{s.n}-{s.max_tokens}tok")
