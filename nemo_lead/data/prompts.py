"""Prompts: the problem text wrapped the way the model was trained to see it, and its token ids.

The authors' prompt (GRPO-LEAD code; the paper does not state one) is one user turn,

    <problem>\\nLet's think step by step and put the final answer within \\boxed{}

with no system prompt, rendered by the model's own chat template with the generation prompt appended
(`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`), so a DeepSeek-R1-Distill model
sees `<｜begin▁of▁sentence｜><｜User｜>...<｜Assistant｜><think>\\n`. Tokenizers without a chat template
(base models, the tiny demo model) get the plain template instead.

The system turn (`PromptConfig.system`), the same in SFT traces, RL rollouts and evaluation:
- null (the default; "template_default" and "template default" mean the same and are stored as null): no
  system message is given to the chat template, which may then write one of its own. R1-Distill's template and the tiny models'
  write none (the authors' setting); SmolLM2's and Qwen2.5's insert a default one ("You are a helpful AI
  assistant named SmolLM, trained by Hugging Face", "You are Qwen, created by Alibaba Cloud. ..."):
  `template_system_turn` shows what a tokenizer's template adds.
- "none": no system turn at all. A template that inserts its own default when given none cannot render
  that, so formatting fails with the default it would insert and what to set instead.
- any other text: that system message.

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
import os
from collections.abc import Sequence
from typing import Any

from nemo_lead.data.problems import Problem
from nemo_lead.verify.extract import THINK_OPEN, ends_inside_think

LEAD_INSTRUCTION = "\nLet's think step by step and put the final answer within \\boxed{}"
PLAIN_TEMPLATE = "{system}User: {user}\nAssistant:"
CHAT_TEMPLATE_MODES = ("auto", "model", "plain")
TEMPLATE_DEFAULT = "template_default"  # PromptConfig.system (stored as None): the chat template's own choice
NO_SYSTEM = "none"  # PromptConfig.system: no system turn at all


@dataclasses.dataclass
class PromptConfig:
    """How a problem becomes a prompt (a nested config of the eval / RL / SFT jobs)."""

    suffix: str = LEAD_INSTRUCTION  # appended to the problem text in the user turn
    prefix: str = ""  # prepended to the problem text in the user turn
    # null (= template_default): no system message, the chat template may add its default; none: no system
    # turn (an error if the template adds one); else the system message's text (see the module docstring)
    system: str | None = None
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
        if self.system in (TEMPLATE_DEFAULT, "template default"):
            self.system = None  # stored as null, as configs and checkpoints written before the choice have it
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


def system_text(cfg: PromptConfig) -> str | None:
    """The system message we give (None for the template default and for "none": we give none)."""
    return None if cfg.system == NO_SYSTEM else cfg.system


def chat_messages(problem: Problem | str, cfg: PromptConfig) -> list[dict[str, str]]:
    """The conversation handed to a chat template: an optional system turn and one user turn."""
    system = system_text(cfg)
    messages = [{"role": "system", "content": system}] if system is not None else []
    return messages + [{"role": "user", "content": user_turn(problem, cfg)}]


SYSTEM_SENTINEL = "\u27e6system\u27e7"  # a system text no template default begins or ends like


def template_system_turn(tokenizer: Any, user: str = "x") -> str | None:
    """The system text a tokenizer's chat template writes for a conversation without a system message -- its
    default system turn -- or None when it writes none.

    Found by rendering [user] and [system SENTINEL, user]: what the first has where the second has the
    sentinel is the template's own text. A template that only writes a system turn when given one leaves
    nothing there (its [user] rendering is the other with the system block cut out)."""
    if not getattr(tokenizer, "chat_template", None):
        return None

    def render(messages: list[dict[str, str]]) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    bare = render([{"role": "user", "content": user}])
    marked = render([{"role": "system", "content": SYSTEM_SENTINEL}, {"role": "user", "content": user}])
    head = len(os.path.commonprefix([bare, marked]))
    tail = len(os.path.commonprefix([bare[head:][::-1], marked[head:][::-1]]))
    return bare[head:len(bare) - tail] or None


def check_system_turn(tokenizer: Any, cfg: PromptConfig, messages: list[dict[str, Any]]) -> None:
    """With `system: none`, refuse a chat template that would insert a system turn of its own."""
    if cfg.system != NO_SYSTEM or any(m["role"] == "system" for m in messages):
        return
    default = template_system_turn(tokenizer)
    if default is not None:
        raise ValueError(f"prompt.system=none, but this chat template inserts a system turn of its own when none "
                         f"is given ({default.strip()[:120]!r}): set prompt.system=template_default to keep it, "
                         "prompt.system='<text>' for your own, or prompt.chat_template=plain")


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
        messages = chat_messages(problem, cfg)
        check_system_turn(tokenizer, cfg, messages)
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = system_text(cfg)
    system = f"{text}\n\n" if text is not None else ""
    return cfg.plain_template.format(system=system, user=user_turn(problem, cfg))


def open_think(tokenizer: Any, cfg: PromptConfig | None = None) -> str:
    """The open think block the rendered prompt ends inside (R1-Distill's generation prompt ends with
    `<think>\\n`): its text from `<think>` on, or "" when the prompt opens none. Graders prepend it to a
    response (a response that never closes it has no answer); distilled traces start with it."""
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


def check_prompts_fit(problems: Sequence[Problem], prompt_ids: Sequence[Sequence[int]], max_tokens: int,
                      positions: int | None, what: str) -> None:
    """Each prompt with `max_tokens` new tokens fits the model's `positions` (None: not known, nothing
    checked); else a ValueError naming `what` (the data set) and the first problem that does not."""
    if positions is None:
        return
    for p, ids in zip(problems, prompt_ids):
        if len(ids) + max_tokens > positions:
            raise ValueError(f"{what} problem {p.id}: {len(ids)} prompt tokens + max_tokens {max_tokens} exceed the "
                             f"model's {positions} positions")
