"""Prompts: the problem text wrapped the way the model was trained to see it, and its token ids.

The authors' prompt (GRPO-LEAD code; the paper does not state one) is one user turn,

    <problem>\\nLet's think step by step and put the final answer within \\boxed{}

with no system prompt, rendered by the model's own chat template with the generation prompt appended
(`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`), so a DeepSeek-R1-Distill model
sees `<｜begin▁of▁sentence｜><｜User｜>...<｜Assistant｜><think>\\n`. Tokenizers without a chat template
(base models, the tiny demo model) get the plain template instead.

Token ids: a chat template writes its own BOS, so the rendered text is tokenised without special
tokens (no double BOS); the plain template is tokenised with the tokenizer's default special tokens.
The tokenizer is duck-typed (anything with `apply_chat_template`, `chat_template` and `__call__`, such as
transformers' `PreTrainedTokenizerFast`), so this module does not import transformers.

Which prompt a command uses (`resolve_prompt`, the one rule of `sft`, `rl`, `eval` and the pipeline's
stages): a nemo-lead checkpoint records the prompt settings it was trained with; when `--model` is such a
checkpoint and every `prompt.*` key is at its default, the checkpoint's prompt is used, so a model keeps
seeing the format it learned (the demo's "=?" suffix, a recipe's own). Setting any `prompt.*` key, or
`prompt.from_checkpoint=false`, uses the settings given instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .problems import Problem

LEAD_INSTRUCTION = "\nLet's think step by step and put the final answer within \\boxed{}"
PLAIN_TEMPLATE = "{system}User: {user}\nAssistant:"
CHAT_TEMPLATE_MODES = ("auto", "model", "plain")


@dataclasses.dataclass
class PromptConfig:
    """How a problem becomes a prompt (a nested config of the eval / RL / SFT jobs)."""

    suffix: str = LEAD_INSTRUCTION  # appended to the problem text in the user turn
    prefix: str = ""  # prepended to the problem text in the user turn
    system: str | None = None  # a system turn; None = no system turn (the authors' setting)
    # "auto": the tokenizer's chat template when it has one, else `plain_template`;
    # "model": require the tokenizer's template; "plain": always `plain_template`.
    chat_template: str = "auto"
    # Used without a chat template: {user} is the user turn; {system} is the system prompt followed by a
    # blank line, or nothing.
    plain_template: str = PLAIN_TEMPLATE
    # a nemo-lead checkpoint's own training prompt wins while the keys above are at their defaults
    # (`resolve_prompt`); false: always these settings
    from_checkpoint: bool = True

    def __post_init__(self) -> None:
        if self.chat_template not in CHAT_TEMPLATE_MODES:
            raise ValueError(f"chat_template must be one of {CHAT_TEMPLATE_MODES}, got {self.chat_template!r}")
        if "{user}" not in self.plain_template:
            raise ValueError(f"plain_template must contain '{{user}}', got {self.plain_template!r}")
        try:
            self.plain_template.format(system="", user="")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"plain_template may use only {{system}} and {{user}} (double other braces): {e!r}"
            ) from None


def prompt_settings(cfg: PromptConfig) -> dict[str, Any]:
    """What decides the rendered prompt (recorded in checkpoints and eval folders): every key but
    `from_checkpoint`, which only chooses between settings."""
    out = dataclasses.asdict(cfg)
    out.pop("from_checkpoint")
    return out


def resolve_prompt(cfg: PromptConfig, trained_with: dict[str, Any] | None) -> PromptConfig:
    """The prompt a command uses (see the module docstring): `trained_with` is a checkpoint's recorded
    settings (`ModelSource.prompt`), None for HF folders and presets."""
    if trained_with is None or not cfg.from_checkpoint:
        return cfg
    if prompt_settings(cfg) != prompt_settings(PromptConfig()):
        return cfg
    known = {f.name for f in dataclasses.fields(PromptConfig)}
    return PromptConfig(**{k: v for k, v in trained_with.items() if k in known and k != "from_checkpoint"})


def user_turn(problem: Problem | str, cfg: PromptConfig) -> str:
    text = problem.problem if isinstance(problem, Problem) else problem
    return f"{cfg.prefix}{text}{cfg.suffix}"


def chat_messages(problem: Problem | str, cfg: PromptConfig) -> list[dict[str, str]]:
    """The conversation handed to a chat template: an optional system turn and one user turn."""
    messages = [{"role": "system", "content": cfg.system}] if cfg.system is not None else []
    return messages + [{"role": "user", "content": user_turn(problem, cfg)}]


def uses_chat_template(tokenizer: Any, cfg: PromptConfig) -> bool:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if cfg.chat_template == "model" and not has_template:
        raise ValueError(
            "the tokenizer has no chat template but chat_template='model' asks for it; "
            "use chat_template='auto' or 'plain'"
        )
    return has_template and cfg.chat_template != "plain"


def format_prompt(tokenizer: Any, problem: Problem | str, cfg: PromptConfig | None = None) -> str:
    """The prompt text the model sees (ending where its response begins)."""
    cfg = cfg or PromptConfig()
    if uses_chat_template(tokenizer, cfg):
        return tokenizer.apply_chat_template(
            chat_messages(problem, cfg), tokenize=False, add_generation_prompt=True
        )
    system = f"{cfg.system}\n\n" if cfg.system is not None else ""
    return cfg.plain_template.format(system=system, user=user_turn(problem, cfg))


def open_think(tokenizer: Any, cfg: PromptConfig | None = None) -> str:
    """The open think block the rendered prompt ends inside (R1-Distill's generation prompt ends with
    `<think>\\n`): its text from `<think>` on, or "" when the prompt opens none. Graders prepend it to a
    response (a response that never closes it has no answer); distilled traces start with it."""
    from nemo_lead.verify.extract import THINK_OPEN, ends_inside_think

    prompt = format_prompt(tokenizer, "x", cfg)
    return prompt[prompt.rfind(THINK_OPEN):] if ends_inside_think(prompt) else ""


def prompt_token_ids(
    tokenizer: Any, problems: Sequence[Problem | str], cfg: PromptConfig | None = None
) -> list[list[int]]:
    """Prompt token ids for each problem, in order (see the module docstring for special tokens)."""
    cfg = cfg or PromptConfig()
    if not problems:
        return []
    texts = [format_prompt(tokenizer, p, cfg) for p in problems]
    add_special = not uses_chat_template(tokenizer, cfg)
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=add_special)["input_ids"]]
