"""`nemo-lead generate`: JSONL out for prompts from the command line and a file; errors name the file/line."""

import json

import pytest

from nemo_lead.cli import main
from nemo_lead.generation.command import GenerateConfig, read_prompts
from nemo_lead.models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("cmd") / "qwen2", "qwen2", seed=4))


def test_generate_writes_one_line_per_sample(tiny, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "1+2="}\n\n{"problem": "What is 7?"}\n')
    out = tmp_path / "out.jsonl"
    code = main(["generate", "--model", tiny, "--prompts-file", str(prompts), "--n", "3", "--max-tokens", "5",
                 "--out", str(out), 'prompts=["ab"]', "logprobs=true", "--seed", "9"])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["prompt_index"], r["sample_index"]) for r in rows] == [(p, s) for p in range(3) for s in range(3)]
    assert [r["prompt"] for r in rows[::3]] == ["ab", "1+2=", "What is 7?"]
    for r in rows:
        assert r["num_tokens"] == len(r["token_ids"]) == len(r["logprobs"]) == len(r["policy_logprobs"])
        assert r["finish_reason"] == ("stop" if r["token_ids"][-1] == 0 else "length")  # eos (id 0) stops
        assert r["num_tokens"] <= 5 and isinstance(r["text"], str)
    again = tmp_path / "again.jsonl"
    main(["generate", "--model", tiny, "--prompts-file", str(prompts), "--n", "3", "--max-tokens", "5",
          "--out", str(again), 'prompts=["ab"]', "logprobs=true", "--seed", "9"])
    assert again.read_text() == out.read_text()  # same seed, same samples


def test_generate_errors_name_the_problem(tiny, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: needs a string field 'prompt' or 'problem'"):
        read_prompts(GenerateConfig(model=tiny, prompts_file=str(bad)))
    assert main(["generate", "--model", tiny, "--prompts-file", str(bad)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    ckpt = tmp_path / "step_000010"
    ckpt.mkdir()
    (ckpt / "meta.json").write_text("{}")
    assert main(["generate", "--model", str(ckpt), 'prompts=["x"]']) == 2
    assert "meta.json: checkpoint format None" in capsys.readouterr().err
    assert main(["generate", "--model", str(tmp_path), 'prompts=["x"]']) == 2
    assert "neither a HF model folder" in capsys.readouterr().err
    assert main(["generate", "--model", tiny]) == 2  # no prompts at all
    assert "prompts_file" in capsys.readouterr().err


def test_generate_from_a_checkpoint_equals_its_hf_folder(tiny, tmp_path, capsys):
    ckpt = tmp_path / "run" / "checkpoints" / "step_000003"
    assert main(["convert", "--from-hf", tiny, "--out", str(ckpt)]) == 0
    args = ['prompts=["12+3=", "x"]', "--n", "2", "--max-tokens", "6", "--seed", "5", "logprobs=true"]
    assert main(["generate", "--model", tiny, "--out", str(tmp_path / "hf.jsonl"), *args]) == 0
    assert main(["generate", "--model", str(ckpt), "--out", str(tmp_path / "ckpt.jsonl"), *args]) == 0, \
        capsys.readouterr().err
    assert (tmp_path / "ckpt.jsonl").read_text() == (tmp_path / "hf.jsonl").read_text()


def _with_end_tokens(folder, dest, eos):
    """A copy of a HF folder whose generation_config.json lists `eos` as its end tokens."""
    import shutil

    dest = shutil.copytree(folder, dest)
    gen = dest / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "eos_token_id": eos}))
    return dest


def test_end_tokens_unite_the_tokenizer_eos_with_generation_config(tiny, tmp_path):
    from nemo_lead.models import end_token_ids, generation_config_dir, load_tokenizer

    tok = load_tokenizer(tiny)
    assert tok.eos_token_id == 0 and end_token_ids(tok, [tiny]) == [0]
    two = _with_end_tokens(tiny, tmp_path / "two", [7, 0])  # a list, as Llama-3 / Qwen2.5 instruct models have
    assert end_token_ids(tok, [two, None, two]) == [0, 7]  # the tokenizer's first, each once
    one = _with_end_tokens(tiny, tmp_path / "one", 9)  # a single id
    assert end_token_ids(tok, [one]) == [0, 9] and generation_config_dir(one) == one
    bad = _with_end_tokens(tiny, tmp_path / "bad", ["</s>"])
    with pytest.raises(ValueError, match=r"bad/generation_config.json: eos_token_id must be a token id"):
        end_token_ids(tok, [bad])
    assert generation_config_dir("tiny-qwen2") is None  # a preset: no folder


def test_generation_stops_at_generation_config_end_tokens_in_folders_and_checkpoints(tiny, tmp_path, capsys):
    """Greedy: the tiny model's first token t continues the response; listed as a second end token in
    generation_config.json, t ends it -- for the HF folder, and for a checkpoint converted from it (the file
    travels in tokenizer/) and the HF folder exported back. progress=none: nothing on stderr."""
    args = ['prompts=["12+3="]', "--temperature", "0", "--max-tokens", "6", "progress=none"]
    assert main(["generate", "--model", tiny, "--out", str(tmp_path / "plain.jsonl"), *args]) == 0
    plain = json.loads((tmp_path / "plain.jsonl").read_text())
    first = plain["token_ids"][0]
    assert plain["num_tokens"] > 1 and first != 0
    two = _with_end_tokens(tiny, tmp_path / "two", [0, first])
    ckpt, export = tmp_path / "run" / "checkpoints" / "step_000001", tmp_path / "exported"
    assert main(["convert", "--from-hf", str(two), "--out", str(ckpt)]) == 0
    assert main(["convert", "--from-ckpt", str(ckpt), "--to-hf", str(export)]) == 0
    for folder in (ckpt / "tokenizer", export):
        assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [0, first]
    capsys.readouterr()
    for name, model in (("hf", two), ("ckpt", ckpt), ("export", export)):
        assert main(["generate", "--model", str(model), "--out", str(tmp_path / f"{name}.jsonl"), *args]) == 0
        row = json.loads((tmp_path / f"{name}.jsonl").read_text())
        assert (row["token_ids"], row["finish_reason"]) == ([first], "stop"), name
    assert "[generate]" not in capsys.readouterr().err
    from nemo_lead.eval.config import EvalConfig
    from nemo_lead.eval.runner import prepare

    problems = tmp_path / "p.jsonl"
    problems.write_text('{"problem": "1+1", "answer": "2"}\n')
    for model in (two, ckpt):  # eval stops at both too (rl: tests/training/test_rl_loop.py)
        assert prepare(EvalConfig(model=str(model), data=str(problems))).params.stop_token_ids == [0, first]
    assert prepare(EvalConfig(model=str(two), data=str(problems), stop_at_eos=False)).params.stop_token_ids == []
