"""The worker pool: order, errors, hard deadlines, crashes, start failures, and no orphan processes."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemo_lead.verify.pool import WorkerPool

HERE = str(Path(__file__).resolve().parent)


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", HERE)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_results_in_input_order_with_errors(on_path):
    with_pool = WorkerPool("verify_pool_targets:act", 2)
    try:
        tasks = [("sleep", 0.3), ("echo", 1), ("raise", "bad"), ("echo", 3), ("sleep", 0.1), ("echo", 5)]
        out = with_pool.run(tasks, deadline_s=5.0)
        assert [r.kind for r in out] == ["done", "done", "error", "done", "done", "done"]
        assert [r.value for r in out] == [0.3, 1, "ValueError: bad", 3, 0.1, 5]
        assert out[0].seconds >= 0.3
        assert with_pool.run([], deadline_s=1.0) == []
    finally:
        with_pool.close()


def test_stuck_worker_is_killed_at_the_deadline_and_replaced(on_path):
    pool = WorkerPool("verify_pool_targets:act", 2)
    try:
        pool.wait_ready()
        before = set(pool.pids)
        t = time.monotonic()
        out = pool.run([("stuck", 30), ("echo", "a"), ("echo", "b"), ("stuck", 30), ("echo", "c")], deadline_s=0.5)
        elapsed = time.monotonic() - t
        assert [r.kind for r in out] == ["killed", "done", "done", "killed", "done"]
        assert [r.value for r in out[1:3]] == ["a", "b"] and out[4].value == "c"
        # killed at the deadline, not after the 30 s the tasks would take (loose bounds: a loaded CI machine
        # may wake the pool late)
        assert all(0.5 <= r.seconds < 5.0 for r in out if r.kind == "killed")
        assert elapsed < 15.0
        killed = before - set(pool.pids)
        assert killed and not any(_alive(p) for p in killed)
        assert [r.value for r in pool.run([("echo", 1), ("echo", 2)], 5.0)] == [1, 2]  # the pool goes on
    finally:
        pool.close()


def test_crashed_worker_is_reported_and_replaced(on_path):
    pool = WorkerPool("verify_pool_targets:act", 1)
    try:
        out = pool.run([("echo", 0), ("exit", 3), ("echo", 2)], deadline_s=5.0)
        assert [(r.kind, r.value) for r in out] == [("done", 0), ("crashed", 3), ("done", 2)]
    finally:
        pool.close()


def test_worker_that_cannot_start_raises(on_path):
    pool = WorkerPool("no_such_module_here:fn", 1)
    try:
        with pytest.raises(RuntimeError, match="failed to start"):
            pool.run([1], deadline_s=1.0)
    finally:
        pool.close()
    with pytest.raises(ValueError, match="workers"):
        WorkerPool("verify_pool_targets:act", 0)


def test_close_and_garbage_collection_leave_no_process(on_path):
    import gc

    pool = WorkerPool("verify_pool_targets:act", 2)
    pool.wait_ready()
    pids = pool.pids
    pool.close()
    pool.close()  # idempotent
    assert not any(_alive(p) for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        pool.run([("echo", 1)], 1.0)

    pool = WorkerPool("verify_pool_targets:act", 2)
    pool.wait_ready()
    pids = pool.pids
    del pool
    gc.collect()
    assert not any(_alive(p) for p in pids)


def test_workers_die_with_their_parent(on_path, tmp_path):
    """A parent killed with SIGKILL runs no cleanup: its workers must still go (EOF / PR_SET_PDEATHSIG),
    including one stuck with signals blocked."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, signal, sys, threading\n"
        "from nemo_lead.verify.pool import WorkerPool\n"
        "pool = WorkerPool('verify_pool_targets:act', 2)\n"
        "pool.wait_ready()\n"
        "print(*pool.pids, flush=True)\n"
        "threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
        "pool.run([('stuck', 60), ('sleep', 60)], deadline_s=100)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(HERE).parents[1]), HERE]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr
    end = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def test_workers_do_not_import_torch(on_path):
    pool = WorkerPool("verify_pool_targets:act", 1, init="nemo_lead.verify.match:warm_up")
    try:
        (r,) = pool.run([("modules", None)], 5.0)
        assert r.value == (False, True)
    finally:
        pool.close()
