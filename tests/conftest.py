"""Shared test setup. Its presence puts tests/ on sys.path, so any test can `from distributed import
run_distributed` (the multi-rank launcher in tests/distributed.py).

The suite proves the numerics on the CPU (gloo, fp32, references computed on the CPU). On a GPU machine it
hides the GPUs, so it tests the same thing there instead of mixing devices. The GPU tests (tests/gpu) are
asked for explicitly: `NEMO_LEAD_GPU_TESTS=1 python -m pytest tests/gpu` (bench/gpu_session.sh does).
"""

import os

if os.environ.get("NEMO_LEAD_GPU_TESTS") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
# One thread per process unless the caller chose (scripts/test sets the same): the CLI runs the tests start
# use one (loops_common.cli_env), and the in-process runs they are compared with must reduce in the same
# order, or a resumed run's float metrics differ from the straight run's in the last digits.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The slowest test files first (from `--durations` on the two-worker CI run, 2026-12-01): with a whole file
# per xdist worker (`--dist loadfile`, scripts/test), the long files start at once and the short ones fill
# the gaps, instead of one long file starting last and running alone. Order only: every test still runs.
SLOW_FILES_FIRST = (
    "training/test_loops.py",
    "training/test_stop_signals.py",
    "training/test_rl_loop.py",
    "training/test_rl_tp2.py",
    "training/test_lag.py",
    "training/test_engine_layout_runs.py",  # ~5 min on 2 loaded cores (2026-12-02): 5 RL runs, 2 converts
    "launch/test_slurm_jobs.py",
    "pipeline/test_micro.py",
    "training/test_faults.py",
    "pipeline/test_demo_smoke.py",
    "pipeline/test_runner.py",
    "training/test_convert.py",
    "plan/test_engine_memory.py",
    "eval/test_eval_distributed.py",
    "plan/test_plan_command.py",
    "plan/test_estimates.py",
)


def pytest_collection_modifyitems(config, items):  # noqa: ARG001 - pytest's hook signature
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}

    def key(item):
        path = item.path.as_posix()
        return min((r for name, r in rank.items() if path.endswith("/tests/" + name)), default=len(rank))

    items.sort(key=key)  # stable: the order within a file, and among the other files, is kept
