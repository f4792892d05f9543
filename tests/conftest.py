"""Shared test setup. Its presence puts tests/ on sys.path, so any test can `from distributed import
run_distributed` (the multi-rank launcher in tests/distributed.py)."""
