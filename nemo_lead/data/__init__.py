"""data layer (docs/design.md): problem sets (shipped and user files), curriculum filters, prompts."""

from nemo_lead.data.demo_task import (
    DEMO_EXTRA_TOKENS,
    DEMO_MODEL,
    DEMO_PROMPT,
    trace_stats,
    write_demo_data,
)
from nemo_lead.data.filters import (
    STAGE1_DIFFICULTY,
    STAGE1_REFERENCE_DIFFICULTY,
    STAGE2_PASS_RATE,
    answer_allows_eval,
    filter_by_bound,
    filter_evaluable_answers,
    parse_bound,
    problem_key,
)
from nemo_lead.data.problems import BUILTIN_DATASETS, Problem, builtin_path, load_problems
from nemo_lead.data.prompts import (
    LEAD_INSTRUCTION,
    PromptConfig,
    chat_messages,
    check_prompts_fit,
    format_prompt,
    open_think,
    prompt_settings,
    prompt_token_ids,
    resolve_prompt,
    template_system_turn,
)
from nemo_lead.data.readers import DataError
from nemo_lead.data.traces import Trace, check_vocab_covers, fit_traces, load_traces

__all__ = [
    "DEMO_EXTRA_TOKENS",
    "DEMO_MODEL",
    "DEMO_PROMPT",
    "BUILTIN_DATASETS",
    "LEAD_INSTRUCTION",
    "STAGE1_DIFFICULTY",
    "STAGE1_REFERENCE_DIFFICULTY",
    "STAGE2_PASS_RATE",
    "Trace",
    "DataError",
    "Problem",
    "PromptConfig",
    "open_think",
    "prompt_settings",
    "resolve_prompt",
    "answer_allows_eval",
    "builtin_path",
    "check_vocab_covers",
    "chat_messages",
    "filter_by_bound",
    "filter_evaluable_answers",
    "parse_bound",
    "problem_key",
    "fit_traces",
    "format_prompt",
    "load_problems",
    "load_traces",
    "check_prompts_fit",
    "prompt_token_ids",
    "template_system_turn",
    "trace_stats",
    "write_demo_data",
]
