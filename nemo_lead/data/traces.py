"""SFT traces: a prompt and the assistant's whole response (reasoning and final answer), as token ids.

`load_traces(spec, tokenizer, prompt_cfg)` reads a JSONL / JSON / Parquet / Arrow file or a `datasets`
folder (`readers.py`, so errors name the file and line or row). A row is one of

    {problem, response}   the problem text goes through `PromptConfig` (prefix, suffix, system turn, chat
                          template) exactly as RL and evaluation prompts do (`prompts.format_prompt`); the
                          response is the whole assistant turn, e.g. "<think>...</think> ... \\boxed{5}"
    {messages}            a chat list: the last assistant turn is the response, the turns before it are the
                          prompt, used verbatim (no prefix / suffix: a chat row is taken as already
                          written). The row's own system turn is kept; without one, `PromptConfig.system`
                          is added, so that both kinds of rows meet the model in the same conversation shape.

Field names: each role tries a list of names in order; `fields=` names a column explicitly:

    problem   problem, question, prompt
    response  response, completion, generation
    messages  messages, conversations
    id        id, unique_id                     (else "<name>/<row index>"; repeats are allowed: several
                                                 traces of one problem are common)

How a trace is rendered, and why not with the chat template's assistant turn:
- prompt_ids: the chat template with the generation prompt, tokenised exactly as `prompts.prompt_token_ids`
  does for RL and evaluation (the same ids the rollout engine starts from);
- response_ids: the response text tokenised on its own *without* special tokens, then the tokenizer's EOS
  (unless the text already ends with it). The model is trained on exactly what it would have to generate
  after the prompt, EOS included.
Rendering the trace as an assistant message instead is a trap: DeepSeek-R1-Distill's template cuts
everything up to `</think>` out of assistant turns (`content.split('</think>')[-1]`), so SFT through it
would train on the final answer alone (tests/data/test_traces.py proves this with the real R1 tokenizer).
R1's generation prompt also opens the think block (`<｜Assistant｜><think>\\n`); a response that starts with
`<think>` itself (as R1 traces do) would then carry the tag twice, so when the rendered prompt ends inside an
open think block, one leading `<think>` (and the newline after it, when the prompt already ends with one) is
removed from the response.

`fit_traces` makes them fit a sequence length (drop or truncate, counted); `check_vocab_covers` checks a
model's vocabulary against the tokenizer. The tokenizer is duck-typed, as in `prompts.py`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from nemo_lead.data.problems import BUILTIN_DATASETS, field_roles, first_field, resolve_data_path, tried_names
from nemo_lead.data.prompts import (
    PromptConfig,
    check_system_turn,
    format_prompt,
    system_text,
    uses_chat_template,
)
from nemo_lead.data.readers import DataError, read_records
from nemo_lead.verify.extract import THINK_OPEN, ends_inside_think

TRACE_FIELDS: dict[str, tuple[str, ...]] = {
    "problem": ("problem", "question", "prompt"),
    "response": ("response", "completion", "generation"),
    "messages": ("messages", "conversations"),
    "id": ("id", "unique_id"),
}
OVERLONG_CHOICES = ("drop", "truncate")


@dataclasses.dataclass(frozen=True)
class Trace:
    """One SFT example: prompt ids (no loss) and response ids (trained on; end with EOS unless truncated)."""

    id: str
    prompt_ids: list[int]
    response_ids: list[int]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


# ----------------------------------------------------------------------------- loading
def load_traces(
    spec: str | os.PathLike,
    tokenizer: Any,
    prompt_cfg: PromptConfig | None = None,
    *,
    split: str | None = None,
    fields: Mapping[str, str] | None = None,
    limit: int | None = None,
) -> list[Trace]:
    """Traces of `spec` in file order, rendered for `tokenizer` (see the module docstring); `limit` keeps
    the first N rows (after checking every row)."""
    cfg = prompt_cfg or PromptConfig()
    roles = field_roles(fields, TRACE_FIELDS)
    path = resolve_data_path(spec)
    name = str(spec) if str(spec) in BUILTIN_DATASETS else path.stem if path.is_file() else path.name
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no EOS token (eos_token_id is None): traces must end with one")
    rows = [_render(record, where, f"{name}/{i}", roles, tokenizer, cfg)
            for i, (where, record) in enumerate(read_records(path, split))]
    if not rows:
        raise DataError(f"{path}: no traces")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        rows = rows[:limit]
    add_special = not uses_chat_template(tokenizer, cfg)
    prompts = tokenizer([r[1] for r in rows], add_special_tokens=add_special)["input_ids"]
    responses = tokenizer([r[2] for r in rows], add_special_tokens=False)["input_ids"]
    traces = []
    for (tid, _, _, where), p, r in zip(rows, prompts, responses):
        r = list(r)
        if not r or r[-1] != eos:
            r.append(eos)
        if not p:
            raise DataError(f"{where}: the prompt renders to no tokens")
        traces.append(Trace(id=tid, prompt_ids=list(p), response_ids=r))
    return traces


def _render(record: dict, where: str, default_id: str, roles: dict, tokenizer: Any,
            cfg: PromptConfig) -> tuple[str, str, str, str]:
    """(id, prompt text, response text, where) of one row."""
    id_key, tid = first_field(record, roles["id"])
    if id_key is None:
        tid = default_id
    elif isinstance(tid, bool) or not isinstance(tid, (str, int)):
        raise DataError(f"{where}: field {id_key!r} must be a string or an integer, got {type(tid).__name__}")
    m_key, messages = first_field(record, roles["messages"])
    if m_key is not None:
        prompt, response = _render_messages(messages, where, m_key, tokenizer, cfg)
    else:
        p_key, problem = first_field(record, roles["problem"])
        r_key, response = first_field(record, roles["response"])
        if p_key is None and r_key is None:
            raise DataError(f"{where}: missing field {tried_names(roles['messages'])}, or "
                            f"{tried_names(roles['problem'])} with {tried_names(roles['response'])}")
        if p_key is None:
            raise DataError(f"{where}: missing field {tried_names(roles['problem'])} (the trace's problem)")
        if r_key is None:
            raise DataError(f"{where}: missing field {tried_names(roles['response'])} (the trace's response)")
        for key, value in ((p_key, problem), (r_key, response)):
            if not isinstance(value, str) or not value.strip():
                raise DataError(f"{where}: field {key!r} is not a non-empty text")
        prompt = format_prompt(tokenizer, problem, cfg)
    return str(tid), prompt, strip_repeated_think(prompt, response), where


def _render_messages(messages: Any, where: str, key: str, tokenizer: Any, cfg: PromptConfig) -> tuple[str, str]:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise DataError(f"{where}: field {key!r} must be a list of {{role, content}} messages")
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None:
        raise DataError(f"{where}: field {key!r} has no assistant turn (the trace's response)")
    response = messages[last].get("content")
    if not isinstance(response, str) or not response.strip():
        raise DataError(f"{where}: field {key!r}: the last assistant turn has no text")
    turns = [{"role": m["role"], "content": m.get("content")} for m in messages[:last]]
    users = [m["content"] for m in turns if m["role"] == "user"]
    if not users or not isinstance(users[-1], str) or not users[-1].strip():
        raise DataError(f"{where}: field {key!r} has no user turn with text before its last assistant turn")
    systems = [m["content"] for m in turns if m["role"] == "system"]
    if not systems and system_text(cfg) is not None:
        turns.insert(0, {"role": "system", "content": system_text(cfg)})
    if uses_chat_template(tokenizer, cfg):
        check_system_turn(tokenizer, cfg, turns)
        prompt = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    else:  # the plain template has one user turn: the last one, verbatim
        system = systems[-1] if systems else cfg.system
        plain = dataclasses.replace(cfg, prefix="", suffix="", system=system)
        prompt = format_prompt(tokenizer, users[-1], plain)
    return prompt, response


def strip_repeated_think(prompt: str, response: str) -> str:
    """`response` without its leading `<think>` when `prompt` already ends inside an open think block (R1's
    generation prompt `<｜Assistant｜><think>\\n`), so the tag is not doubled; otherwise unchanged."""
    if not ends_inside_think(prompt):
        return response
    body = response.lstrip()
    if not body.startswith(THINK_OPEN):
        return response
    body = body[len(THINK_OPEN):]
    if prompt.endswith("\n") and body.startswith("\n"):
        body = body[1:]
    return body


# ----------------------------------------------------------------------------- lengths and vocabulary
def fit_traces(traces: list[Trace], max_seq_len: int, overlong: str = "drop") -> tuple[list[Trace], dict[str, int]]:
    """Traces that fit `max_seq_len` tokens, and counts: `kept` (unchanged), `truncated` (response cut to
    fit; it then has no EOS), `dropped`. overlong="drop" drops longer traces, "truncate" keeps the prompt and
    cuts the response. A prompt of `max_seq_len` tokens or more leaves no room and is always dropped.
    len(result) == kept + truncated."""
    if overlong not in OVERLONG_CHOICES:
        raise ValueError(f"overlong={overlong!r} is not one of {list(OVERLONG_CHOICES)}")
    if max_seq_len < 2:
        raise ValueError(f"max_seq_len={max_seq_len} must be >= 2")
    out: list[Trace] = []
    counts = {"kept": 0, "dropped": 0, "truncated": 0}
    for t in traces:
        if len(t) <= max_seq_len:
            out.append(t)
            counts["kept"] += 1
        elif overlong == "drop" or len(t.prompt_ids) >= max_seq_len:
            counts["dropped"] += 1
        else:
            out.append(dataclasses.replace(t, response_ids=t.response_ids[: max_seq_len - len(t.prompt_ids)]))
            counts["truncated"] += 1
    return out, counts


def check_vocab_covers(tokenizer: Any, vocab_size: int) -> None:
    """ValueError unless a model with `vocab_size` embedding rows has a row for every token id of
    `tokenizer` (its base vocabulary plus added special tokens such as R1's `<think>`)."""
    n = len(tokenizer) if hasattr(tokenizer, "__len__") else int(tokenizer.vocab_size)
    if n > vocab_size:
        raise ValueError(f"the model's vocabulary has {vocab_size} tokens but the tokenizer has {n} "
                         f"(ids up to {n - 1}): use the tokenizer the model was trained with, or a model "
                         f"with vocab_size >= {n}")

