"""Prompt formatting: the authors' user turn through a chat template, the plain fallback, token ids."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, processors
from transformers import PreTrainedTokenizerFast

from nemo_lead.data import (
    LEAD_INSTRUCTION,
    Problem,
    PromptConfig,
    chat_messages,
    format_prompt,
    prompt_token_ids,
)

SPECIALS = ["<unk>", "<bos>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>", "<think>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}"
)


def char_tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    """A character-level tokenizer (every printable ASCII character and newline is one token)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + [chr(c) for c in range(32, 127)] + ["\n"])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.add_special_tokens(SPECIALS)
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = chat_template
    return tok


PROBLEM = Problem(id="p", problem="What is 2+3?", answer="5")


def test_authors_prompt_through_the_chat_template():
    tok = char_tokenizer(CHAT_TEMPLATE)
    assert chat_messages(PROBLEM, PromptConfig()) == [{"role": "user", "content": "What is 2+3?" + LEAD_INSTRUCTION}]
    text = format_prompt(tok, PROBLEM)
    assert text == (
        "<bos><|user|>What is 2+3?\nLet's think step by step and put the final answer within \\boxed{}"
        "<|assistant|><think>\n"
    )


def test_system_prompt_prefix_and_suffix_are_configurable():
    tok = char_tokenizer(CHAT_TEMPLATE)
    cfg = PromptConfig(system="Be brief.", prefix="Q: ", suffix=" A?")
    assert format_prompt(tok, PROBLEM, cfg) == "<bos><|system|>Be brief.<|user|>Q: What is 2+3? A?<|assistant|><think>\n"


def test_plain_template_without_a_chat_template():
    tok = char_tokenizer(None)
    assert format_prompt(tok, "1+1?", PromptConfig(suffix="")) == "User: 1+1?\nAssistant:"
    cfg = PromptConfig(suffix="", system="S", plain_template="{system}Problem: {user}\nSolution:")
    assert format_prompt(tok, "1+1?", cfg) == "S\n\nProblem: 1+1?\nSolution:"
    # chat_template="plain" ignores a template the tokenizer has
    assert format_prompt(char_tokenizer(CHAT_TEMPLATE), "1+1?", PromptConfig(suffix="", chat_template="plain")) == (
        "User: 1+1?\nAssistant:"
    )
    with pytest.raises(ValueError, match="no chat template"):
        format_prompt(tok, "1+1?", PromptConfig(chat_template="model"))


def test_prompt_token_ids_have_exactly_one_bos_in_both_modes():
    problems = [PROBLEM, Problem(id="q", problem="Is 7 prime?", answer="yes")]
    for template in (CHAT_TEMPLATE, None):
        tok = char_tokenizer(template)
        ids = prompt_token_ids(tok, problems)
        assert len(ids) == 2
        for p, row in zip(problems, ids):
            assert row.count(tok.bos_token_id) == 1 and row[0] == tok.bos_token_id
            assert tok.unk_token_id not in row
            text = format_prompt(tok, p)
            assert tok.decode(row) == (text if template else "<bos>" + text)
    assert prompt_token_ids(char_tokenizer(None), []) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [({"chat_template": "yes"}, "chat_template must be one of"),
     ({"plain_template": "no user"}, "must contain '{user}'"),
     ({"plain_template": "{user} {answer}"}, "only {system} and {user}")],
)
def test_prompt_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PromptConfig(**kwargs)
