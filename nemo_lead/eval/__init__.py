"""eval layer (see DESIGN.md): the paper's metrics (Pass@k, Cons@k, mean length, accuracy vs budget)."""

from .metrics import accuracy_vs_budget, cons_at_k, mean_length, pass_at_k

__all__ = ["accuracy_vs_budget", "cons_at_k", "mean_length", "pass_at_k"]
