"""No secret on disk: credentials (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`) given as values are refused
with how to pass them; named in `secrets` they reach the job from the submitting shell (sbatch --export)
and no file `nemo-lead submit` writes holds their value."""

import os
import stat
import subprocess
import textwrap

import pytest

from nemo_lead.cli import main
from nemo_lead.config.loading import load_config
from nemo_lead.launch.sbatch import sbatch_options
from nemo_lead.launch.submit import SubmitConfig, render_jobs

SECRET = "s3cr3t-value-0123456789"


@pytest.fixture
def recipe(tmp_path):
    f = tmp_path / "recipe.yaml"
    f.write_text(textwrap.dedent("""\
        stages:
          - name: pick
            kind: select
            problems: [aime24]
          - name: eval
            kind: eval
            slurm: {gpus_per_node: 2, time: "01:00:00"}
            models: {base: tiny-qwen2}
            data: aime24
        """))
    return f


@pytest.mark.parametrize("override, name", [
    (f"env.WANDB_API_KEY={SECRET}", "WANDB_API_KEY"),
    (f"env.HF_TOKEN={SECRET}", "HF_TOKEN"),
    (f"env.db_password={SECRET}", "db_password"),
    (f"setup=[export AWS_SECRET={SECRET}]", "AWS_SECRET"),
    (f"sbatch_args=[--export=ALL,MY_KEY={SECRET}]", "MY_KEY"),
])
def test_a_credentials_value_is_refused_saying_how_to_pass_it(tmp_path, recipe, capsys, override, name):
    out = tmp_path / "run"
    assert main(["submit", str(recipe), "--out", str(out), override, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{name} looks like a credential" in err and f"export {name}=..." in err and f"secrets=[{name}]" in err
    assert SECRET not in err and not out.exists()


def test_other_names_and_names_without_values_pass(tmp_path, recipe):
    cfg = load_config(SubmitConfig, [], [f"target={recipe}", f"out={tmp_path}/r", "env.NCCL_DEBUG=INFO",
                                         "env.KEYS_DIR=/k", "setup=[echo $HF_TOKEN]", "secrets=[HF_TOKEN]"])
    assert cfg.env == {"NCCL_DEBUG": "INFO", "KEYS_DIR": "/k"}
    with pytest.raises(ValueError, match="'HF_TOKEN=x' is not an environment variable's name"):
        load_config(SubmitConfig, [], [f"target={recipe}", f"out={tmp_path}/r", "secrets=[HF_TOKEN=x]"])


def test_secrets_reach_the_job_by_name_and_no_written_file_holds_the_value(tmp_path, recipe, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text("#!/bin/bash\necho \"$((1000 + $(ls \"$(dirname \"${@: -1}\")\" | wc -l)))\"\n")
    sbatch.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "run"
    args = ["submit", str(recipe), "--out", str(out), "secrets=[WANDB_API_KEY,HF_TOKEN]", "env.NCCL_DEBUG=INFO"]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    assert main(args) == 2  # one of them is not set: nothing is submitted
    assert "secrets: HF_TOKEN not set in this shell" in capsys.readouterr().err and not out.exists()
    monkeypatch.setenv("HF_TOKEN", SECRET + "-hf")
    assert main(args) == 0
    written = [p for p in out.rglob("*") if p.is_file()]
    assert sorted(p.name for p in written) == ["eval.sbatch", "submitted.jsonl"]  # pick runs in eval's job
    for path in written:
        assert SECRET not in path.read_text(), path
    script = (out / "slurm" / "eval.sbatch").read_text()
    assert sbatch_options(script)["export"] == "ALL,WANDB_API_KEY,HF_TOKEN"

    # the script's check, run by bash: a job whose shell lacks a secret stops at once, saying which
    check = script[script.index("for name in WANDB_API_KEY HF_TOKEN"):].split("\n\n")[0].split("\ncmd=(")[0]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN",)}
    done = subprocess.run(["bash", "-c", check + "\necho ok"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "HF_TOKEN is not set" in done.stderr
    done = subprocess.run(["bash", "-c", check + "\necho ok"], env={**env, "HF_TOKEN": "x"}, capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout == "ok\n"


def test_the_dry_run_names_the_unset_secrets_and_renders_them(tmp_path, recipe, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["submit", str(recipe), "--out", str(tmp_path / "r"), "secrets=[HF_TOKEN]", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "note: secrets: HF_TOKEN not set in this shell" in captured.err
    assert captured.out.count("#SBATCH --export=ALL,HF_TOKEN") == 1
    jobs, _ = render_jobs(load_config(SubmitConfig, [], [f"target={recipe}", f"out={tmp_path}/r"]))
    assert all("--export" not in script for _, _, script in jobs)  # none named: SLURM's default, nothing added
