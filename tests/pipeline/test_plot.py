"""`nemo-lead plot`: validation curves of RL run folders, side by side or chained as consecutive stages."""

from __future__ import annotations

import json
from pathlib import Path

from nemo_lead.cli import main
from nemo_lead.training.run.plot import curves, default_labels


def _run(folder: Path, steps: list[int], acc0: float) -> str:
    folder.mkdir(parents=True)
    rows = [{"step": s, "pass@1": acc0 + 0.01 * s, "cons@k": 0.0, "mean_length": 100 - s, "truncated_frac": 0.0,
             "n": 2, "problems": 4} for s in steps]
    (folder / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)) + '{"step": 9')
    return str(folder)


def test_chained_stages_continue_the_step_axis(tmp_path):
    a = _run(tmp_path / "a" / "stages" / "rl", [0, 10, 20], 0.5)
    b = _run(tmp_path / "b" / "stages" / "rl", [0, 5, 10], 0.7)
    side = curves([a, b])
    assert [p[0] for p in side[0]] == [0, 10, 20] and [p[0] for p in side[1]] == [0, 5, 10]  # sorted, torn line skipped
    chained = curves([a, b], chain=True)
    # stage 2's step 0 is stage 1's final model again: dropped; its steps follow stage 1's last
    assert [p[0] for p in chained[1]] == [25, 30] and chained[1][0][1:] == (0.75, 95.0)
    assert default_labels([a, b]) == ["a/rl", "b/rl"]


def test_plot_command_writes_a_png_and_explains_a_missing_log(tmp_path, capsys):
    a = _run(tmp_path / "grpo", [0, 10], 0.5)
    b = _run(tmp_path / "lead", [0, 10], 0.6)
    out = tmp_path / "fig.png"
    assert main(["plot", "--runs", a, b, "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", "--runs", str(tmp_path / "none")]) == 2
    assert "val.jsonl: no validation log" in capsys.readouterr().err
