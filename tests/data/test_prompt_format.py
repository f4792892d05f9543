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
    check_prompts_fit,
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


# SmolLM2-Instruct's template, shortened: without a system message it writes a default one
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
DEFAULT_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "<|system|>" + DEFAULT_SYSTEM + "\n{% endif %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_template_default_system_turn_is_found_and_kept_by_default():
    tok = char_tokenizer(DEFAULT_SYSTEM_TEMPLATE)
    from nemo_lead.data import template_system_turn

    assert template_system_turn(tok) == DEFAULT_SYSTEM
    assert template_system_turn(char_tokenizer(CHAT_TEMPLATE)) is None  # R1-style: nothing of its own
    assert template_system_turn(char_tokenizer(None)) is None
    default = format_prompt(tok, "1+1?", PromptConfig(suffix=""))
    assert default == f"<|system|>{DEFAULT_SYSTEM}\n<|user|>1+1?\n<|assistant|>"
    for spelling in ("template_default", "template default", None):  # one setting, stored as null
        cfg = PromptConfig(suffix="", system=spelling)
        assert cfg.system is None and format_prompt(tok, "1+1?", cfg) == default


def test_system_none_refuses_a_template_that_inserts_one_and_text_replaces_it():
    tok = char_tokenizer(DEFAULT_SYSTEM_TEMPLATE)
    with pytest.raises(ValueError, match=r"prompt.system=none, but this chat template inserts a system turn .*SmolLM"):
        format_prompt(tok, "1+1?", PromptConfig(system="none"))
    assert format_prompt(tok, "1+1?", PromptConfig(suffix="", system="Be brief.")) == (
        "<|system|>Be brief.\n<|user|>1+1?\n<|assistant|>")
    # where the template adds nothing, or without a template, "none" is the plain conversation
    r1 = char_tokenizer(CHAT_TEMPLATE)
    assert format_prompt(r1, PROBLEM, PromptConfig(system="none")) == format_prompt(r1, PROBLEM)
    plain = char_tokenizer(None)
    assert format_prompt(plain, "1+1?", PromptConfig(suffix="", system="none")) == "User: 1+1?\nAssistant:"


def test_sft_traces_get_the_same_system_turn_as_rl_and_eval_prompts(tmp_path):
    """Both kinds of trace rows are rendered with the prompt RL and eval start from, system turn included."""
    import json

    from nemo_lead.data import load_traces

    tok = char_tokenizer(DEFAULT_SYSTEM_TEMPLATE)
    rows = [{"problem": "1+1?", "response": "2"},
            {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for system in (None, "Be brief."):
        cfg = PromptConfig(suffix="", system=system)
        expected = prompt_token_ids(tok, ["1+1?"], cfg)[0]
        assert [t.prompt_ids for t in load_traces(path, tok, cfg)] == [expected, expected]
    with pytest.raises(ValueError, match="prompt.system=none"):
        load_traces(path, tok, PromptConfig(suffix="", system="none"))


def test_prompts_that_cannot_fit_the_model_are_named():
    """A prompt of 10 tokens with max_tokens 6 fills 16 positions exactly; one token more is refused, naming the
    data set and the first problem that does not fit; unknown positions check nothing."""
    problems = [Problem(id="a", problem="x", answer="1"), Problem(id="b", problem="y", answer="2")]
    ids = [[0] * 9, [0] * 10]
    check_prompts_fit(problems, ids, 6, 16, "validation.data")
    check_prompts_fit(problems, ids, 10**6, None, "validation.data")
    with pytest.raises(ValueError, match=r"^validation.data problem b: 10 prompt tokens \+ max_tokens 7 exceed the "
                                         r"model's 16 positions$"):
        check_prompts_fit(problems, ids, 7, 16, "validation.data")
