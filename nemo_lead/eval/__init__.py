"""eval layer (docs/design.md): the paper's metrics (Pass@k, Cons@k, mean length, accuracy vs budget) and
`nemo-lead eval`.

Modules: `metrics` (the metrics, exported here), `config` (EvalConfig), `policy` (the evaluated model: HF
folder or checkpoint; `load_policy`), `calls` (datasets -> per-sample seeds, engine calls, rounds), `store`
(samples.jsonl and the resume rules), `runner` (the SPMD job), `report` (summary tables, --compare, the
figure), `command` (the CLI runner). Only the metrics are imported here, so importing the package does not import torch.
"""

from nemo_lead.eval.metrics import accuracy_vs_budget, cons_at_k, mean_length, pass_at_k

__all__ = ["accuracy_vs_budget", "cons_at_k", "mean_length", "pass_at_k"]
