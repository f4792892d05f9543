"""Progress without a terminal: log lines at a cadence (first and last always, then every `line_every` units or
`line_seconds`), carrying the bar's fields; timed by a fake clock."""

from __future__ import annotations

import pytest

from nemo_lead.runtime.progress import LoopProgress


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def printed_steps(err: str, name: str = "sft") -> list[int]:
    return [int(line.split()[2].split("/")[0]) for line in err.splitlines() if line.startswith(f"[{name}] step ")]


def test_lines_every_n_steps_first_and_last_always(capsys):
    clock = FakeClock()
    progress = LoopProgress("sft", total=1200, mode="lines", clock=clock)
    assert progress.line_every == 60  # a twentieth of the run
    for step in range(1, 1201):
        clock.now += 0.1  # fast steps: the count decides
        progress.step(step, {"loss": f"{step:.2f}"})
    steps = printed_steps(capsys.readouterr().err)
    assert steps == [1, *range(61, 1200, 60), 1200]
    assert len(steps) == 21


def test_lines_every_30_seconds_when_steps_are_slow_and_fields_match_the_bar(capsys):
    clock = FakeClock()
    progress = LoopProgress("rl", total=100, mode="lines", clock=clock, line_every=50)
    for step in range(1, 11):
        clock.now += 7.0  # a line after 5 steps (35 s >= 30 s), not after 50
        progress.step(step, {"reward": "+0.12", "acc": "0.50"})
    progress.step(100, {"reward": "+0.90", "acc": "0.99"})  # the last step: always
    err = capsys.readouterr().err
    assert printed_steps(err, "rl") == [1, 6, 100]
    first = err.splitlines()[0]
    # the same fields as the bar, the seconds per step, the time left: 7 s a step, 99 steps left
    assert first == "[rl] step 1/100 | reward +0.12 | acc 0.50 | 7.0 s/step | left ~11.6 min"


def test_restart_counts_from_the_resumed_step(capsys):
    clock = FakeClock()
    progress = LoopProgress("sft", total=40, start=0, mode="lines", clock=clock, line_every=10)
    progress.restart_at(20)
    for step in range(21, 41):
        clock.now += 1.0
        progress.step(step, {})
    assert printed_steps(capsys.readouterr().err) == [21, 31, 40]


@pytest.mark.parametrize("mode", ["none", "lines"])
def test_warnings_are_shown_whatever_the_cadence(mode, capsys):
    progress = LoopProgress("rl", total=100, mode=mode, clock=FakeClock())
    progress.step(1, {})
    progress.step(2, {})
    progress.warn("step 2: no learning signal")
    err = capsys.readouterr().err
    assert "[rl] warning: step 2: no learning signal" in err
    assert "step 2/100" not in err
