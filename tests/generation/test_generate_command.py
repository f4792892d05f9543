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
