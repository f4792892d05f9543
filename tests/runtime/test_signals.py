"""Stop handlers: SLURM signals every process of a step; SIGUSR1 must reach the rank, not kill its helpers."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from nemo_lead.runtime.signals import StopRequest, install_stop_handlers

RANK = textwrap.dedent("""\
    import multiprocessing as mp, os, signal, subprocess, sys, time
    from nemo_lead.runtime.signals import install_stop_handlers

    if __name__ == "__main__":
        if sys.argv[1] == "handlers":
            stop = install_stop_handlers()
        else:  # a plain Python handler: the rank survives, its children do not
            stop = None
            signal.signal(signal.SIGUSR1, lambda *a: None)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        worker = mp.get_context("spawn").Process(target=time.sleep, args=(60,))
        worker.start()
        time.sleep(1.0)  # the spawned interpreter is up
        print("ready", flush=True)
        sys.stdin.readline()  # the test has signalled the whole process group
        time.sleep(0.5)
        print("got", stop.signal_name if stop else None, "child", child.poll(), "worker", worker.exitcode, flush=True)
        child.kill(); worker.kill()
        if stop:
            stop.uninstall()
            print("mask after uninstall", signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_BLOCK, []), flush=True)
    """)


def _signal_the_group(tmp_path, mode: str) -> str:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    proc = subprocess.Popen([sys.executable, str(script), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.killpg(proc.pid, signal.SIGUSR1)  # what SLURM does to a job step
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
        return out
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def test_usr1_reaches_the_rank_and_spares_its_children(tmp_path):
    out = _signal_the_group(tmp_path, "handlers")
    assert "got SIGUSR1 child None worker None" in out  # recorded; subprocess and spawned worker alive
    assert "mask after uninstall False" in out


def test_without_the_handlers_children_die_on_usr1(tmp_path):
    """The control: what the handlers prevent."""
    out = _signal_the_group(tmp_path, "plain")
    assert f"got None child {-signal.SIGUSR1} worker {-signal.SIGUSR1}" in out


def test_second_sigint_interrupts_and_single_process_agrees():
    # SIGINT as a foreground Python has it (a shell's background job, `cmd &`, inherits it ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stop = install_stop_handlers()
        try:
            assert not stop.agreed()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert stop.agreed() and stop.signal_name == "SIGINT"
            assert stop.after_checkpoint() is False  # only SIGUSR1 requeues
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
        finally:
            stop.uninstall()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_after_checkpoint_requeues_only_rank_zero_of_a_slurm_job(monkeypatch, tmp_path):
    calls = tmp_path / "calls"
    fake = tmp_path / "scontrol"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("RANK", "1")
    assert StopRequest(signal_name="SIGUSR1").after_checkpoint() is False
    monkeypatch.setenv("RANK", "0")
    assert StopRequest(signal_name="SIGTERM").after_checkpoint() is False
    assert StopRequest(signal_name="SIGUSR1").after_checkpoint() is True
    assert calls.read_text() == "requeue 77\n"
