"""`nemo-lead demo` with a few steps per stage: the whole recipe (prepare, SFT, RL stage 1, stage-2 selection,
RL stage 2, evaluation) through the real stack, its summary and figures, and one row of the table
reproduced by the `nemo-lead eval` command summary.json gives for it."""

from __future__ import annotations

import json
import os
import shlex

import cli_process
import pytest

pytestmark = pytest.mark.slow
SMOKE = ["stages.sft.steps=8", "stages.rl1.steps=2", "stages.rl2.steps=1", "stages.rl1.prompts_per_step=4",
         "stages.rl2.prompts_per_step=4", "stages.rl1.max_rounds=1", "stages.rl2.max_rounds=1",
         "stages.rl1.validation.limit=4", "stages.rl2.validation.limit=4", "stages.rl1.validation.every=1",
         "stages.rl2.validation.every=1", "stages.eval.limit=6", "stages.eval.sampling.n=2"]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_demo_recipe_end_to_end(tmp_path):
    out = tmp_path / "demo"
    done = cli_process.run(["demo", "--out", str(out), *SMOKE], env=_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["rows"]
    assert [r["name"] for r in rows] == ["SFT", "stage 1", "stage 2"]
    state = json.loads((out / "pipeline_state.json").read_text())["stages"]
    assert [r["checkpoint"] for r in rows] == [state[s]["outputs"]["checkpoint"] for s in ("sft", "rl1", "rl2")]
    assert rows[2]["checkpoint"].endswith("rl2/checkpoints/step_000001")
    for r in rows:
        assert {"name", "checkpoint", "data", "n", "temperature", "top_p", "max_tokens", "seed", "cons@k", "pass@1",
                "mean_length"} <= r.keys()
        assert r["data"] == state["prepare"]["outputs"]["heldout"] and r["problems"] == 6 and r["n"] == 2
        assert 0 <= r["pass@1"] <= 1 and r["mean_length"] > 0
    # the table is printed and written; both figures exist
    assert "| stage 2 " in done.stdout and (out / "summary.md").read_text().count("|") > 12
    assert (out / "validation.png").stat().st_size > 1000 and (out / "accuracy_vs_budget.png").stat().st_size > 1000
    # stage 2 trained on stage 1's low-accuracy problems plus the extra set
    selection = json.loads((out / "stages" / "stage2_data" / "selection.json").read_text())
    assert selection["extra"] == 500 and selection["seen_in_run"] == 8 and selection["total"] > 500
    # the row's own command reproduces it
    args = shlex.split(rows[1]["command"])
    assert args[:2] == ["nemo-lead", "eval"]
    again = cli_process.run([*args[1:], "--out", str(tmp_path / "again")], env=_env(), timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    got = json.loads((tmp_path / "again" / "summary.json").read_text())["datasets"]["heldout"]
    assert (got["cons@k"], got["pass@1"], got["mean_length"]) == (rows[1]["cons@k"], rows[1]["pass@1"],
                                                                   rows[1]["mean_length"])
    # and so does the bare command built from the row's fields (the checkpoint brings its training prompt)
    r = rows[2]
    bare = ["eval", "--model", r["checkpoint"], "--data", r["data"], "--n", str(r["n"]), "--temperature",
            str(r["temperature"]), "--top-p", str(r["top_p"]), "--max-tokens", str(r["max_tokens"]), "--seed",
            str(r["seed"]), "--out", str(tmp_path / "bare"), "limit=6"]
    again = cli_process.run(bare, env=_env(), timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    got = json.loads((tmp_path / "bare" / "summary.json").read_text())["datasets"]["heldout"]
    assert (got["cons@k"], got["pass@1"], got["mean_length"]) == (r["cons@k"], r["pass@1"], r["mean_length"])
