"""The `nemo-lead` command: overrides reach the job, typos fail naming the key, --help works."""

import subprocess
import sys

import pytest
import yaml

from nemo_lead.cli import COMMANDS, main


def test_print_config_applies_flags_and_overrides(capsys):
    assert main(["demo", "--print-config", "--preset", "grpo_length", "lead.alpha=0.1", "steps=3"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["lead"]["preset"] == "grpo_length" and cfg["lead"]["alpha"] == 0.1 and cfg["steps"] == 3
    assert cfg["lead"]["wrong_reward"] == 0.0  # came from the preset


def test_typo_fails_with_key_and_suggestion(capsys):
    assert main(["demo", "lead.alpah=0.1"]) == 2
    assert "unknown key 'lead.alpah' (did you mean 'lead.alpha'?)" in capsys.readouterr().err


def test_config_file_errors_name_the_file(tmp_path, capsys):
    f = tmp_path / "my.yaml"
    f.write_text("steps: 2\nlead:\n  k: fast\n")
    assert main(["demo", "--config", str(f)]) == 2
    assert f"{f}:3: key 'lead.k'" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name):
    out = subprocess.run([sys.executable, "-m", "nemo_lead.cli", name, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--config" in out.stdout and "key=value" in out.stdout


def test_demo_runs_and_learns(capsys):
    assert main(["demo", "steps=30", "num_prompts=2"]) == 0
    out = capsys.readouterr().out
    last = [line for line in out.splitlines() if "probability of the right answer" in line][0]
    # the toy policy starts uniform over 6 answers (1/6) and must have moved towards the right one
    assert float(last.rsplit(":", 1)[1]) > 0.3


def test_overrides_may_follow_flags(capsys):
    assert main(["demo", "steps=2", "--print-config", "--seed", "7", "lead.alpha=0.2", "num_prompts=3"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert (cfg["steps"], cfg["seed"], cfg["lead"]["alpha"], cfg["num_prompts"]) == (2, 7, 0.2, 3)
    with pytest.raises(SystemExit):
        main(["demo", "--print-config", "--no-such-flag"])
