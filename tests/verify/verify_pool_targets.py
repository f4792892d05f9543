"""Worker targets for the pool tests, imported by worker processes (PYTHONPATH points here in the tests)."""

import os
import signal
import sys
import time


def act(task):
    """task = (what, arg): "echo" returns arg, "sleep" sleeps arg s, "stuck" sleeps arg s with SIGALRM
    blocked (like code stuck in C), "exit" exits with code arg, "raise" raises ValueError(arg),
    "modules" says whether torch / math_verify are imported in this worker."""
    what, arg = task
    if what == "sleep":
        time.sleep(arg)
    elif what == "stuck":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(arg)
    elif what == "exit":
        os._exit(arg)
    elif what == "raise":
        raise ValueError(arg)
    elif what == "modules":
        return "torch" in sys.modules, "math_verify" in sys.modules
    return arg


def grade_or_misbehave(task):
    """The real grading job, except that the answers "STUCK" and "CRASH" hang in C or kill the worker."""
    from nemo_lead.verify.match import grade_task

    if task[0] == "STUCK":
        return act(("stuck", 60))
    if task[0] == "CRASH":
        return act(("exit", 7))
    return grade_task(task)
