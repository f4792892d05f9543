"""Shared settings of the eval command tests (a module of its own: a rank process started by
tests/distributed.py imports the test module by name, and `conftest` there would be tests/conftest.py)."""

from __future__ import annotations

PROBLEMS = [("a", "1+1", "2"), ("b", "2+3", "5"), ("c", "7-4", "3"), ("d", "2*4", "8"), ("e", "9-9", "0")]
N, MAX_TOKENS, PER_CALL = 3, 12, 2  # 5 problems x 3 samples, in chunks (a, b), (c, d), (e)


def eval_args(model, data, out, *extra: str) -> list[str]:
    """`nemo-lead eval` arguments of the reference run (fp32 tiny model, small budget)."""
    return ["eval", "--model", str(model), "--data", str(data), "--out", str(out), "--n", str(N),
            "--max-tokens", str(MAX_TOKENS), f"problems_per_call={PER_CALL}", "verify.workers=1",
            "budgets=[4,8,12]", "report_budgets=[8]", *extra]
