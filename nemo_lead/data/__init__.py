"""data layer (see DESIGN.md): problem sets (shipped and user files), curriculum filters, prompts."""

from .demo_task import (
    DEMO_EXTRA_TOKENS,
    DEMO_MODEL,
    DEMO_PROMPT,
    DEMO_SIZING,
    trace_stats,
    write_demo_data,
)
from .filters import (
    STAGE1_MIN_DIFFICULTY,
    STAGE1_REFERENCE_MIN_DIFFICULTY,
    STAGE2_MAX_PASS_RATE,
    answer_allows_eval,
    filter_by_difficulty,
    filter_by_pass_rate,
    filter_evaluable_answers,
)
from .problems import BUILTIN_DATASETS, Problem, builtin_path, load_problems
from .prompts import (
    LEAD_INSTRUCTION,
    PromptConfig,
    chat_messages,
    format_prompt,
    prompt_token_ids,
    template_system_turn,
)
from .readers import DataError
from .traces import Trace, check_vocab_covers, fit_traces, load_traces

__all__ = [
    "DEMO_EXTRA_TOKENS",
    "DEMO_MODEL",
    "DEMO_PROMPT",
    "DEMO_SIZING",
    "BUILTIN_DATASETS",
    "LEAD_INSTRUCTION",
    "STAGE1_MIN_DIFFICULTY",
    "STAGE1_REFERENCE_MIN_DIFFICULTY",
    "STAGE2_MAX_PASS_RATE",
    "Trace",
    "DataError",
    "Problem",
    "PromptConfig",
    "answer_allows_eval",
    "builtin_path",
    "check_vocab_covers",
    "chat_messages",
    "filter_by_difficulty",
    "filter_by_pass_rate",
    "filter_evaluable_answers",
    "fit_traces",
    "format_prompt",
    "load_problems",
    "load_traces",
    "prompt_token_ids",
    "template_system_turn",
    "trace_stats",
    "write_demo_data",
]
