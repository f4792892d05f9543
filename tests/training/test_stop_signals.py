"""How an `nemo-lead sft` run stops, and that the same command again ends equal to an uninterrupted run
(docs/faults.md).

- kill -9 at an arbitrary moment: the rerun's metrics.jsonl (timing keys aside) equals the uninterrupted run's.
- SIGTERM to one process, and SIGHUP (a closed terminal) to the local launcher of a 2-rank `--tp 2` run: the
  step finishes, a checkpoint is written, exit 0, and the rerun completes it (at TP2 equal to the TP1
  reference to float tolerance: test_rl_tp2.py shows the layouts agree).

One 12-step reference run serves every comparison. A killed `torchrun` agent: test_torchrun_orphans.py; the job's end
(a SLURM time limit): tests/launch/test_slurm_deadline.py.
"""

from __future__ import annotations

import signal

import pytest
from loops_common import close_to, interrupt, read_lines, run_cli, sft_args, strip_timing

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sft_ref(data):
    """A 12-step SFT run, uninterrupted: what the interrupted runs must end up equal to."""
    root, model = data
    res = run_cli(sft_args(root, model, root / "sft_ref"))
    assert res.returncode == 0, res.stderr
    return root / "sft_ref"


def test_sft_resume_after_kill_equals_uninterrupted_run(data, sft_ref, tmp_path):
    root, model = data
    ref, out = sft_ref, tmp_path / "killed"
    interrupt(sft_args(root, model, out), out, after_lines=6)
    assert len(read_lines(out)) < 12
    res = run_cli(sft_args(root, model, out))
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stderr
    assert strip_timing(read_lines(out)) == strip_timing(read_lines(ref))


@pytest.mark.parametrize(("sig", "layout"), [(signal.SIGTERM, []), (signal.SIGHUP, ["--tp", "2"])],
                         ids=["TERM-one-process", "HUP-local-launcher-tp2"])
def test_a_stop_signal_checkpoints_the_step_and_exits_0(data, sft_ref, tmp_path, sig, layout):
    root, model = data
    ref, out = sft_ref, tmp_path / "stopped"
    args = sft_args(root, model, out, extra=layout)
    assert interrupt(args, out, after_lines=1, sig=sig) == 0
    stopped_at = len(read_lines(out))
    assert stopped_at < 12 and (out / "checkpoints" / f"step_{stopped_at:06d}").is_dir()
    assert not (out / "done.json").exists()
    res = run_cli(args)
    assert res.returncode == 0, res.stderr
    rows, want = strip_timing(read_lines(out)), strip_timing(read_lines(ref))
    if not layout:
        assert rows == want
    else:  # TP2 sums in another order than TP1: equal steps, data and counts, losses to float tolerance
        assert [r["step"] for r in rows] == list(range(1, 13))
        assert all(close_to(a, b, 1e-4) for a, b in zip(rows, want)), (rows, want)
