"""The `nemo-lead` command: overrides reach the job, typos fail naming the key, --help works."""

import subprocess
import sys

import pytest
import yaml

from nemo_lead.cli import COMMANDS, main

RL = ["rl", "--model", "tiny-qwen2", "--data", "aime24", "--out", "runs/x"]


def test_print_config_applies_flags_and_overrides(capsys):
    assert main([*RL, "--print-config", "--preset", "grpo_length", "lead.alpha=0.1", "steps=3"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["lead"]["preset"] == "grpo_length" and cfg["lead"]["alpha"] == 0.1 and cfg["steps"] == 3
    assert cfg["lead"]["wrong_reward"] == 0.0  # came from the preset


def test_typo_fails_with_key_and_suggestion(capsys):
    assert main([*RL, "lead.alpah=0.1"]) == 2
    assert "unknown key 'lead.alpah' (did you mean 'lead.alpha'?)" in capsys.readouterr().err


def test_config_file_errors_name_the_file(tmp_path, capsys):
    f = tmp_path / "my.yaml"
    f.write_text("steps: 2\nlead:\n  k: fast\n")
    assert main([*RL, "--config", str(f)]) == 2
    assert f"{f}:3: key 'lead.k'" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name):
    out = subprocess.run([sys.executable, "-m", "nemo_lead.cli", name, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--config" in out.stdout and "key=value" in out.stdout


def test_overrides_may_follow_flags(capsys):
    assert main([*RL, "steps=2", "--print-config", "--seed", "7", "lead.alpha=0.2", "prompts_per_step=3"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert (cfg["steps"], cfg["seed"], cfg["lead"]["alpha"], cfg["prompts_per_step"]) == (2, 7, 0.2, 3)
    with pytest.raises(SystemExit):
        main([*RL, "--print-config", "--no-such-flag"])


def test_run_takes_the_recipe_as_its_one_bare_word(capsys):
    assert main(["run", "--out", "runs/elsewhere", "lead-14b", "paths.base_model=/m/14b", "--print-config"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert (cfg["recipe"], cfg["out"], cfg["paths"]) == ("lead-14b", "runs/elsewhere", {"base_model": "/m/14b"})


def test_run_dry_run_switch_lists_the_stages(capsys, tmp_path):
    assert main(["run", "ablation-7b-lead", "--out", str(tmp_path / "r"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines[1:]] == [["stage1_data", "select", "to"], ["rl", "rl", "waits"],
                                                        ["eval", "eval", "waits"]]
    assert not (tmp_path / "r").exists()


def test_keys_other_frameworks_use_name_the_key_meant_here(capsys):
    for typed, meant in (("lr", "actor.optim.lr"), ("learning_rate", "actor.optim.lr"), ("batch_size", "prompts_per_step"),
                         ("num_generations", "rollout.n"), ("kl_coef", "lead.kl_coeff")):
        assert main([*RL, f"{typed}=1"]) == 2
        assert f"unknown key '{typed}' (did you mean '{meant}'?)" in capsys.readouterr().err
    assert main(["sft", "--model", "tiny-qwen2", "--data", "t.jsonl", "--out", "x", "batch_size=4"]) == 2
    assert "did you mean 'global_batch'?" in capsys.readouterr().err
    # no key dump: at most three suggestions, or a pointer to --print-config
    assert main([*RL, "tempreature=1"]) == 2
    err = capsys.readouterr().err
    assert "did you mean one of 'rollout.temperature', 'validation.temperature'" in err and err.count("'") <= 10
    assert main([*RL, "zzz=1"]) == 2
    assert "unknown key 'zzz'; --print-config lists every key" in capsys.readouterr().err


def test_a_missing_model_is_named_and_print_config_still_shows_the_settings(capsys):
    assert main(["rl", "--data", "aime24", "--out", "runs/x"]) == 2
    assert "--model is required" in capsys.readouterr().err
    for argv in (["submit", "--print-config"], ["plot", "--print-config"], ["rl", "--print-config"]):
        assert main(argv) == 0
        out = capsys.readouterr()
        assert yaml.safe_load(out.out) and "not runnable as given" in out.err


def test_version_and_the_first_line_before_the_heavy_imports():
    done = subprocess.run([sys.executable, "-m", "nemo_lead.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("nemo-lead ")
    code = ("import sys; from nemo_lead.cli import main; "
            "main(['rl', '--data', 'aime24', '--out', 'runs/x']); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stderr.splitlines()[0] == "[nemo-lead] rl into runs/x: loading torch and megatron-core ..."
