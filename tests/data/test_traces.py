"""SFT traces: formats, rendering like RL / eval prompts, errors naming the file and line, lengths, the
vocabulary check, and the R1 chat-template trap with the real DeepSeek-R1-Distill-Qwen tokenizer
(tests/data/fixtures/r1_tokenizer, rebuilt offline; see its build.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_prompt_format import CHAT_TEMPLATE, char_tokenizer

from nemo_lead.data import (
    DataError,
    PromptConfig,
    Trace,
    check_vocab_covers,
    fit_traces,
    load_traces,
    prompt_token_ids,
)
from nemo_lead.training.sft.packing import pack_traces

R1_DIR = Path(__file__).parent / "fixtures" / "r1_tokenizer"
RESPONSE = "<think>\nAdd: 2+3=5.\n</think>\n\nThe answer is \\boxed{5}"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer(CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def r1(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("r1_tokenizer_build", R1_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load(tmp_path_factory.mktemp("r1"))


# ----------------------------------------------------------------------------- formats and rendering
def test_problem_response_rows_render_like_rl_prompts(tmp_path, tok):
    cfg = PromptConfig(system="Be brief.")
    path = _jsonl(tmp_path / "t.jsonl", [{"id": "a", "problem": "1+1?", "response": "<think>\nok</think> 2"},
                                         {"question": "2+2?", "completion": "4<eos>"}])
    a, b = load_traces(path, tok, cfg)
    assert a.prompt_ids == prompt_token_ids(tok, ["1+1?"], cfg)[0]  # the RL / eval prompt, ids and all
    # the prompt opens the think block: the response's own <think>\n is not repeated
    assert a.response_ids == _ids(tok, "ok</think> 2") + [tok.eos_token_id]
    assert tok.decode(a.prompt_ids + a.response_ids).count("<think>") == 1
    assert b.id == "t/1" and b.response_ids == _ids(tok, "4") + [tok.eos_token_id]  # EOS not doubled
    assert len(a) == len(a.prompt_ids) + len(a.response_ids)


def test_messages_rows_use_their_turns_verbatim(tmp_path, tok):
    rows = [
        {"messages": [{"role": "system", "content": "Own."}, {"role": "user", "content": "1+1?"},
                      {"role": "assistant", "content": "2"}]},
        {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
                      {"role": "user", "content": "and 2+2?"}, {"role": "assistant", "content": "4"}]},
    ]
    path = _jsonl(tmp_path / "m.jsonl", rows)
    own, multi = load_traces(path, tok, PromptConfig(system="Default."))
    assert tok.decode(own.prompt_ids) == "<bos><|system|>Own.<|user|>1+1?<|assistant|><think>\n"  # no suffix
    assert tok.decode(multi.prompt_ids) == ("<bos><|system|>Default.<|user|>1+1?<|assistant|>2<|user|>and 2+2?"
                                            "<|assistant|><think>\n")
    assert multi.response_ids == _ids(tok, "4") + [tok.eos_token_id]
    # without a chat template: the plain template with the last user turn
    plain = load_traces(path, char_tokenizer(None), PromptConfig())[1]
    assert char_tokenizer(None).decode(plain.prompt_ids) == "<bos>User: and 2+2?\nAssistant:"
    assert plain.response_ids[: len(_ids(tok, "4"))] == _ids(tok, "4")


def test_parquet_and_hub_folder(tmp_path, tok):
    table = pa.table({"problem": ["1+1?", "2+2?"], "response": ["2", "4"]})
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "hub" / "data" / "train-00000-of-00001.parquet")
    a = load_traces(tmp_path / "t.parquet", tok, limit=1)
    b = load_traces(tmp_path / "hub", tok, split="train")
    assert len(a) == 1 and len(b) == 2 and a[0] == Trace("t/0", b[0].prompt_ids, b[0].response_ids)


def test_errors_name_the_file_and_line(tmp_path, tok):
    path = _jsonl(tmp_path / "bad.jsonl", [{"problem": "1+1?", "response": "2"}, {"problem": "2+2?"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: missing field 'response' or 'completion'"):
        load_traces(path, tok)
    path = _jsonl(tmp_path / "bad.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: field 'messages' has no assistant turn"):
        load_traces(path, tok)
    path = _jsonl(tmp_path / "bad.jsonl", [{"text": "x"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: missing field 'messages' or 'conversations', or 'problem'"):
        load_traces(path, tok)
    path = _jsonl(tmp_path / "bad.jsonl", [{"messages": [{"role": "assistant", "content": "2"}]}])
    with pytest.raises(DataError, match=r"bad\.jsonl:1: .* no user turn"):
        load_traces(path, tok)
    pq.write_table(pa.table({"problem": ["a", "b"], "response": ["x", " "]}), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet \(row 1\): field 'response' is not a non-empty text"):
        load_traces(tmp_path / "bad.parquet", tok)


# ----------------------------------------------------------------------------- lengths and vocabulary
def test_fit_traces_drops_or_truncates_and_counts():
    traces = [Trace("fits", [1, 2], [3, 9]), Trace("long", [1, 2], [3, 4, 5, 9]), Trace("prompt", [1] * 5, [9])]
    kept, counts = fit_traces(traces, 5, "drop")
    assert [t.id for t in kept] == ["fits"] and counts == {"kept": 1, "dropped": 2, "truncated": 0}
    kept, counts = fit_traces(traces, 5, "truncate")
    assert counts == {"kept": 1, "dropped": 1, "truncated": 1}  # a prompt that fills the length is dropped
    assert kept[1] == Trace("long", [1, 2], [3, 4, 5])  # prompt kept, response cut (its EOS is gone)
    with pytest.raises(ValueError, match="overlong='cut'"):
        fit_traces(traces, 5, "cut")


def test_check_vocab_covers(tok):
    check_vocab_covers(tok, len(tok))
    with pytest.raises(ValueError, match=f"vocabulary has 50 tokens but the tokenizer has {len(tok)}"):
        check_vocab_covers(tok, 50)


# ----------------------------------------------------------------------------- the R1 trap
def test_r1_traces_keep_their_reasoning(tmp_path, r1):
    problem = "What is 2+3?"
    path = _jsonl(tmp_path / "r1.jsonl", [{"problem": problem, "response": RESPONSE}])
    (trace,) = load_traces(path, r1, PromptConfig())
    cfg = PromptConfig()
    user = problem + cfg.suffix
    assert trace.prompt_ids == prompt_token_ids(r1, [problem], cfg)[0]
    assert r1.decode(trace.prompt_ids) == f"<｜begin▁of▁sentence｜><｜User｜>{user}<｜Assistant｜><think>\n"
    assert trace.prompt_ids.count(r1.bos_token_id) == 1  # the template's BOS only
    # the response keeps the reasoning, ends with EOS, and the think tag is not doubled
    assert r1.decode(trace.response_ids) == RESPONSE.removeprefix("<think>\n") + "<｜end▁of▁sentence｜>"
    assert trace.response_ids[-1] == r1.eos_token_id == 151643
    think, end_think = r1.convert_tokens_to_ids(["<think>", "</think>"])
    assert (think, end_think) == (151648, 151649)
    assert (trace.prompt_ids + trace.response_ids).count(think) == 1
    # the loss mask covers the reasoning: the packed row's trained tokens are the whole response
    batch = pack_traces([trace], 4096)
    trained = [tok for tok, m in zip(batch.tokens[0][1:].tolist(), batch.loss_mask[0].tolist()) if m]
    assert trained == trace.response_ids and end_think in trained
    assert "Add: 2+3=5." in r1.decode(trained)
    # the trap: rendering the trace as an assistant message through R1's template drops the reasoning
    naive = r1.apply_chat_template([{"role": "user", "content": user}, {"role": "assistant", "content": RESPONSE}],
                                   tokenize=False)
    assert "Add: 2+3=5." not in naive and "</think>" not in naive
    assert naive.endswith("<｜Assistant｜>\n\nThe answer is \\boxed{5}<｜end▁of▁sentence｜>")
    # a chat row of the same conversation gives the same trace
    path = _jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": user},
                                                          {"role": "assistant", "content": RESPONSE}]}])
    assert load_traces(path, r1, cfg)[0] == Trace("chat/0", trace.prompt_ids, trace.response_ids)


def test_r1_vocabulary_check(r1):
    assert len(r1) == 151665
    check_vocab_covers(r1, 151936)  # DeepSeek-R1-Distill-Qwen-1.5B's embedding rows
    with pytest.raises(ValueError, match="the model's vocabulary has 151643 tokens but the tokenizer has 151665"):
        check_vocab_covers(r1, 151643)  # Qwen's base vocabulary only: R1's special tokens have no rows
