"""The `nemo-lead` command: overrides reach the job, typos fail naming the key, --help works."""

import subprocess
import sys

import pytest
import yaml

from nemo_lead.cli import COMMANDS, main

RL = ["rl", "--data", "aime24", "--out", "runs/x"]


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
    assert [line.split()[:3] for line in lines[1:]] == [["stage1_data", "select", "to"], ["rl", "rl", "to"],
                                                        ["eval", "eval", "to"]]
    assert not (tmp_path / "r").exists()
