"""GRPO-LEAD as pure tensor math (torch only: no torch.distributed, no Megatron, no I/O).

One module per idea, readable beside the paper (arXiv 2504.09696):
`rewards` (Sec. 3.1 length-dependent accuracy reward, 3.2 explicit penalty), `advantages` (group
normalisation and Sec. 3.3 difficulty-aware reweighting), `filters` (which groups train), `loss` (the
clipped surrogate and its aggregation), `config` (`LeadConfig` and its presets), `registry` (the named lists
of implementations the settings choose from, filled where each implementation is defined).
"""

from nemo_lead.algorithms.advantages import compute_advantages, difficulty_weight
from nemo_lead.algorithms.config import PRESETS, LeadConfig
from nemo_lead.algorithms.filters import group_keep_mask, overlong_keep_mask
from nemo_lead.algorithms.loss import loss_denominator, policy_loss
from nemo_lead.algorithms.outcome import Outcome, outcome_label
from nemo_lead.algorithms.rewards import shape_rewards

__all__ = [
    "PRESETS",
    "LeadConfig",
    "Outcome",
    "compute_advantages",
    "difficulty_weight",
    "group_keep_mask",
    "loss_denominator",
    "outcome_label",
    "overlong_keep_mask",
    "policy_loss",
    "shape_rewards",
]
