"""`LeadConfig`: every knob of reward shaping, advantages, group filtering and the policy loss.

One dataclass so that an ablation is one config line (`lead.preset=grpo_length` or `lead.alpha=0.1`).
Defaults are the paper's values (arXiv 2504.09696); `LeadConfig.reference_code()` reproduces what the
authors' verl fork (aeroplanepaper/GRPO-LEAD at commit 9344bef) observably does, which differs in the
places listed in docs/design.md ("Paper vs the authors' code") and in `reference_code`'s docstring.

Presets (`LeadConfig.from_preset(name)`, `name` as in `PRESETS`):

| preset | what it is |
| --- | --- |
| `paper` = `lead` | the paper: length reward, -1 for wrong or no answer, logistic difficulty reweighting; nemo-lead's reading of the answer: the last `\\boxed{}` after `</think>`, or the last k boxes joined when the gold lists k answers (`nemo_lead.verify.extract`, docs/verification.md) |
| `grpo` | plain GRPO baseline of Table 1: reward 1 / 0, no length term, no reweighting |
| `grpo_length` | + length-dependent accuracy reward |
| `grpo_length_reweight` | + difficulty-aware advantage reweighting (wrong answers still 0) |
| `stage2` | paper stage-2 tail: length reward off, repetition penalty -1.5 on (nemo-lead's reading: any response that is not correct) |
| `reference_code` | the authors' code, quirks included (see its docstring) |
| `reference_code_stage2` | the same, stage-2 tail (length reward off) |
| `dr_grpo` | Dr. GRPO: advantage R - mean, loss / (G x max length) |
| `dapo` | DAPO: clip-higher 0.2/0.28, token-mean loss, dynamic sampling, overlong shaping and masking |
| `dgpo` | DGPO (MathForge): MAD-normalised advantage, softmax question weights at T = 2 |

The settings that choose an implementation by name (`advantage_estimator`, `reweighting`, `group_filter`,
`loss_agg`, `kl_estimator`, `length_shaping`) accept exactly the names registered where the implementations
are defined (`registry.Registry`, filled by `@REGISTRY.register(name)` in advantages.py, filters.py, loss.py
and rewards.py). This module imports those modules, so their registries are complete before the choices
below are read from them; they never import this one (they type the settings they read with a `Protocol` of
their own), so a new entry needs no edit here unless it brings a setting of its own (a field below, with
`since=` the day it came: finished pipeline stages stay done while it is at its default,
`nemo_lead.config.fields.added_keys`).
`length_reward` stays the switch of the length term (false: `none`, whatever `length_shaping` says), so
the presets and existing configs keep their meaning.

How a response becomes an outcome is the verifier's (`nemo_lead.verify.verifier`), by `outcome_rule`;
where the answer is read follows it (`nemo_lead.verify.verifier.default_region`) unless the job sets
`verify.answer_region`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from nemo_lead.algorithms import advantages, filters, loss, rewards
from nemo_lead.algorithms.rollout_correction import RolloutCorrectionConfig
from nemo_lead.config.fields import setting

# names accepted for the settings with a registry of implementations: read from it, never written twice (the
# modules imported above fill their registries when imported, before these lines run)
ADVANTAGE_ESTIMATORS = advantages.ESTIMATORS.names
REWEIGHTINGS = advantages.REWEIGHTINGS.names
GROUP_FILTERS = filters.GROUP_FILTERS.names
LOSS_AGGREGATIONS = loss.LOSS_AGGREGATIONS.names
KL_ESTIMATORS = loss.KL_ESTIMATORS.names
LENGTH_SHAPINGS = rewards.SHAPINGS.names
# two-way switches read where they act (advantages.success_rate, rewards / advantages' std, the verifier)
RHO_SOURCES = ("correct", "positive_reward")
STD_ESTIMATORS = ("population", "sample")
OUTCOME_RULES = ("paper", "reference_code")  # nemo_lead.verify.verifier.RULES


@dataclass
class LeadConfig:
    """All GRPO-LEAD hyper-parameters. Field names follow the paper's symbols where it has one."""

    preset: str = "paper"  # informational: the preset these values started from (see module docstring)

    # --- reward shaping (rewards.py) ---
    correct_reward: float = 1.0  # reward of a correct answer when the length term is off or gated
    wrong_reward: float = -1.0  # explicit penalty (paper); plain GRPO uses 0
    truncated_reward: float = -1.0  # no final answer / cut at max length; paper: as wrong; code: 0 (format failure)
    repetition_reward: float = -1.5  # stage-2 repetition penalty; code: -2
    check_repetition: bool = False  # ask the verifier to detect repetition (stage 2)
    # how the verifier classifies responses: paper (nemo-lead's reading of the paper) | reference_code (the
    # authors' code: prompt + response read before </think>, finished flags ignored, repetition only for
    # responses without a readable answer); see nemo_lead.verify.verifier
    outcome_rule: str = field(default="paper", metadata={"choices": OUTCOME_RULES})
    length_reward: bool = True  # the length term on (false: no length term, whatever length_shaping says)
    # which length term: exp_z (the paper's R = exp(-alpha z) for correct responses) or another of
    # rewards.SHAPINGS (see rewards.py); none = no length term, as length_reward=false
    length_shaping: str = setting("exp_z", choices=LENGTH_SHAPINGS, since="2026-12-04")
    alpha: float = 0.05
    length_eps: float = 1e-6  # eps in z = (|o| - mu) / (sigma + eps)
    length_std: str = field(default="population", metadata={"choices": STD_ESTIMATORS})  # sigma of correct lengths: population (paper) or sample (code, n-1)
    length_gate_tokens: float = 0.0  # code: length term only if mean of the group's `length_gate_k`
    length_gate_k: int = 3  # shortest responses (all outcomes) exceeds this many tokens; 0 = always on
    # DAPO overlong shaping: 0 up to max_response_len - overlong_buffer_len, then linear to -1 * factor
    overlong_buffer_len: int = 0  # L_c; 0 turns shaping off
    max_response_len: int = 0  # L_max (tokens); required when overlong shaping or constant_norm is used
    overlong_penalty_factor: float = 1.0
    overlong_filter: bool = False  # DAPO overlong filtering: truncated responses take no part in the loss
    # --- length_shaping=cosine (Yeo et al. 2025, rewards.py; L_max = max_response_len, r_e = truncated_reward) ---
    cosine_r0_correct: float = setting(2.0, since="2026-12-04")  # cosine: reward of a correct answer of length 0 (r_0^c)
    cosine_rL_correct: float = setting(1.0, since="2026-12-04")  # cosine: reward of a correct answer of length L_max (r_L^c)
    cosine_r0_wrong: float = setting(-10.0, since="2026-12-04")  # cosine: reward of a wrong answer of length 0 (r_0^w)
    cosine_rL_wrong: float = setting(0.0, since="2026-12-04")  # cosine: reward of a wrong answer of length L_max (r_L^w)

    # --- advantages (advantages.py) ---
    advantage_estimator: str = field(default="grpo", metadata={"choices": ADVANTAGE_ESTIMATORS})  # one of advantages.ESTIMATORS
    advantage_std: str = field(default="sample", metadata={"choices": STD_ESTIMATORS})  # std used by `grpo`: sample (n-1, verl/torch default) or population
    advantage_eps: float = 1e-6
    reweighting: str = field(default="lead", metadata={"choices": REWEIGHTINGS})  # one of advantages.REWEIGHTINGS: lead is the logistic w(rho)
    rho_source: str = field(default="correct", metadata={"choices": RHO_SOURCES})  # rho = share of CORRECT outcomes (paper) or of rewards > 0 (code)
    A: float = 0.4  # lower asymptote of w
    B: float = 1.5  # upper asymptote of w
    rho0: float = 0.75  # midpoint of w
    k: float = 10.0  # steepness of w
    dgpo_temperature: float = 2.0  # T of DGPO's softmax over -accuracy

    # --- group filter (filters.py) ---
    group_filter: str = field(default="none", metadata={"choices": GROUP_FILTERS})  # one of filters.GROUP_FILTERS (see filters.py)

    # --- policy loss (loss.py) ---
    loss_agg: str = field(default="seq_mean_token_mean", metadata={"choices": LOSS_AGGREGATIONS})  # one of loss.LOSS_AGGREGATIONS; paper: 1/G sum_i 1/|o_i| sum_t
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    dual_clip_c: Optional[float] = None  # dual-clip lower bound for A < 0 (e.g. 3.0); None = off
    entropy_coeff: float = 0.0
    kl_coeff: float = 0.0  # KL to a reference policy; the paper uses none
    kl_estimator: str = field(default="k3", metadata={"choices": KL_ESTIMATORS})
    # importance weights between the engine's and the actor's log-probs: tis | seq_tis | mis (none = off)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise ValueError naming the field when a value is out of its domain."""
        for f in dataclasses.fields(self):  # a setting of a fixed set: its field's `choices`
            allowed = f.metadata.get("choices")
            if allowed is not None and getattr(self, f.name) not in allowed:
                raise ValueError(f"lead.{f.name}={getattr(self, f.name)!r} is not one of {list(allowed)}")
        if self.preset not in PRESETS:
            raise ValueError(f"lead.preset={self.preset!r} is not one of {sorted(PRESETS)}")
        for name in ("alpha", "length_eps", "advantage_eps", "k", "dgpo_temperature", "length_gate_tokens",
                     "clip_eps_low", "clip_eps_high", "entropy_coeff", "kl_coeff", "overlong_penalty_factor"):
            if getattr(self, name) < 0:
                raise ValueError(f"lead.{name}={getattr(self, name)} must be >= 0")
        if self.dgpo_temperature == 0:
            raise ValueError("lead.dgpo_temperature must be > 0")
        if self.clip_eps_low >= 1:
            raise ValueError(f"lead.clip_eps_low={self.clip_eps_low} must be < 1 (ratio lower bound 1 - eps)")
        if self.dual_clip_c is not None and self.dual_clip_c <= 1:
            raise ValueError(f"lead.dual_clip_c={self.dual_clip_c} must be > 1 (or null to turn it off)")
        if self.overlong_buffer_len < 0 or self.max_response_len < 0 or self.length_gate_k < 0:
            raise ValueError("lead.overlong_buffer_len, lead.max_response_len and lead.length_gate_k must be >= 0")
        if self.overlong_buffer_len and self.overlong_buffer_len > self.max_response_len:
            raise ValueError(
                f"lead.overlong_buffer_len={self.overlong_buffer_len} needs lead.max_response_len >= it "
                f"(got {self.max_response_len})"
            )
        if self.length_reward and self.length_shaping == "cosine" and self.max_response_len <= 0:
            raise ValueError("lead.length_shaping=cosine needs lead.max_response_len > 0 (its L_max, in tokens)")
        self.rollout_correction.validate()

    def replace(self, **changes) -> LeadConfig:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ presets
    @classmethod
    def from_preset(cls, name: str, **overrides) -> LeadConfig:
        if name not in PRESETS:
            raise ValueError(f"unknown LEAD preset {name!r}; choose one of {sorted(PRESETS)}")
        return PRESETS[name]().replace(**overrides)

    @classmethod
    def paper(cls) -> LeadConfig:
        """The paper's full GRPO-LEAD (stage 1): length reward, explicit penalty, reweighting."""
        return cls(preset="paper")

    @classmethod
    def lead(cls) -> LeadConfig:
        """Table 1's last row (= `paper`)."""
        return cls(preset="lead")

    @classmethod
    def grpo(cls) -> LeadConfig:
        """Table 1 baseline: binary reward (1 correct, 0 otherwise), group-normalised advantage."""
        return cls(preset="grpo", wrong_reward=0.0, truncated_reward=0.0, length_reward=False, reweighting="none")

    @classmethod
    def grpo_length(cls) -> LeadConfig:
        """Table 1 row 2: GRPO + length-dependent accuracy reward."""
        return cls(preset="grpo_length", wrong_reward=0.0, truncated_reward=0.0, reweighting="none")

    @classmethod
    def grpo_length_reweight(cls) -> LeadConfig:
        """Table 1 row 3: + difficulty-aware advantage reweighting (no explicit penalty yet)."""
        return cls(preset="grpo_length_reweight", wrong_reward=0.0, truncated_reward=0.0)

    @classmethod
    def stage2(cls) -> LeadConfig:
        """Paper stage-2 tail (last 140 steps): length reward off, repetition penalty -1.5 on. The paper does
        not say which responses the penalty applies to; nemo-lead's reading (`outcome_rule="paper"`): every
        response that is not correct and repeats itself, wrong or without an answer."""
        return cls(preset="stage2", length_reward=False, check_repetition=True)

    @classmethod
    def reference_code(cls) -> LeadConfig:
        """What the authors' verl fork (aeroplanepaper/GRPO-LEAD at commit 9344bef) observably does, quirks
        included. Rewards and advantages: the length term only when the mean of the group's 3 shortest
        responses (any outcome) exceeds 4,000 tokens (a group of 2 or fewer: always, their third minimum
        stays infinite), sample std of the correct lengths, -1 wrong, 0 no readable answer, -2 repetition,
        rho = share of rewards > 0, groups dropped when all rewards <= 0 or all exactly 1, token-mean loss,
        entropy bonus 0.001. Classification (`outcome_rule="reference_code"`, `nemo_lead.verify.reference_code`):
        - the answer is read from prompt + response before the first `</think>` (`answer_region` of the job
          follows: before_think, unless set explicitly);
        - no `</think>`, or no `\\boxed{` there that closes -> no readable answer (0);
        - `</think>` with no box before it -> the prompt's own `\\boxed{}` is read: an empty answer, wrong
          (-1; with a prompt that holds no box: 0); an empty box -> wrong (-1);
        - repetition is checked (always, as their code does: `check_repetition` on) only for responses
          without a readable answer (-> -2), on their chunk grid over prompt + response; a wrong answer
          with repetition stays -1;
        - a response cut at the length limit is graded like any other (a box before `</think>` counts).
        Answer equality is math-verify's (theirs: mathd normalisation + sympy)."""
        return cls(
            preset="reference_code",
            truncated_reward=0.0,
            repetition_reward=-2.0,
            check_repetition=True,
            outcome_rule="reference_code",
            length_std="sample",
            length_gate_tokens=4000.0,
            length_gate_k=3,
            rho_source="positive_reward",
            group_filter="reference_code",
            loss_agg="token_mean",
            entropy_coeff=0.001,
        )

    @classmethod
    def reference_code_stage2(cls) -> LeadConfig:
        """`reference_code` with the stage-2 tail settings: the length reward off (repetition is checked in
        both, as their code always does)."""
        return cls.reference_code().replace(preset="reference_code_stage2", length_reward=False)

    @classmethod
    def dr_grpo(cls) -> LeadConfig:
        """Dr. GRPO (Liu et al. 2025): no std division, loss normalised by a constant G x L_max."""
        return cls(
            preset="dr_grpo", wrong_reward=0.0, truncated_reward=0.0, length_reward=False, reweighting="none",
            advantage_estimator="dr_grpo", loss_agg="constant_norm",
        )

    @classmethod
    def dapo(cls) -> LeadConfig:
        """DAPO (Yu et al. 2025) with binary +1/-1 rewards; set `max_response_len` for overlong shaping."""
        return cls(
            preset="dapo", length_reward=False, reweighting="none", clip_eps_high=0.28,
            loss_agg="token_mean", group_filter="dynamic_sampling", overlong_filter=True,
        )

    @classmethod
    def dgpo(cls) -> LeadConfig:
        """DGPO (MathForge): (R - mean) / MAD and softmax question weights over -accuracy / T."""
        return cls(
            preset="dgpo", wrong_reward=0.0, truncated_reward=0.0, length_reward=False,
            advantage_estimator="dgpo", reweighting="dgpo_softmax",
        )


PRESETS = {
    "paper": LeadConfig.paper,
    "lead": LeadConfig.lead,
    "grpo": LeadConfig.grpo,
    "grpo_length": LeadConfig.grpo_length,
    "grpo_length_reweight": LeadConfig.grpo_length_reweight,
    "stage2": LeadConfig.stage2,
    "reference_code": LeadConfig.reference_code,
    "reference_code_stage2": LeadConfig.reference_code_stage2,
    "dr_grpo": LeadConfig.dr_grpo,
    "dapo": LeadConfig.dapo,
    "dgpo": LeadConfig.dgpo,
}
