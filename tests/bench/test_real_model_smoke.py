"""The real-model study's script end to end at its smoke size (`bench/real_model.py --smoke`), so that it cannot
rot: every stage it runs for the study (SFT, RL with grpo and with lead on the vLLM engine, eval of the three
models, the Figure 2 plot) for one short step, on a tiny model instead of SmolLM2, then its statistics and
report. The vllm leg runs it (vLLM's CPU build); skipped where vLLM is not installed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_leg import needs_vllm

pytestmark = [pytest.mark.slow, needs_vllm]

REPO = Path(__file__).resolve().parents[2]


def test_the_study_runs_every_stage_and_reports(tmp_path):
    out = tmp_path / "study"
    res = subprocess.run([sys.executable, str(REPO / "bench" / "real_model.py"), "--smoke", "--out", str(out),
                          "--threads", "1"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["models"]) == {"SFT", "grpo", "lead"}
    assert all(m["problems"] == 4 and m["k"] == 2 for m in summary["models"].values())
    assert set(summary["pass_diff"]) == {"grpo - SFT", "lead - SFT", "lead - grpo"}
    assert set(summary["stages"]) == {"model", "sft", "rl grpo", "rl lead", "eval SFT", "eval grpo", "eval lead", "plot"}
    for arm in ("grpo", "lead"):
        rows = summary["rl"][arm]["rows"]
        assert [r["step"] for r in rows] == [1] and "groups/mixed_frac" in rows[0]
        # the tiny random model reads no answer: the start check says so, in the report and the run's own output
        assert any("answer_extracted_frac" in m for m in summary["rl"][arm]["start_check"])
        assert "start check, step 1" in (out / "logs" / f"rl-{arm}.log").read_text()
    report = (out / "summary.md").read_text()
    assert "Targets" in report and "Start check of the first two RL steps" in report and "| step | accuracy |" in report
    assert (out / "figure2.png").stat().st_size > 0
    # a rerun skips every finished stage
    again = subprocess.run([sys.executable, str(REPO / "bench" / "real_model.py"), "--smoke", "--out", str(out),
                            "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.count("finished before, skipped") == 6
