"""`grade_groups`: what the verifier is given under each outcome rule (prompt, stop token, `<think>` prefix)."""

from types import SimpleNamespace

import pytest

from nemo_lead.algorithms import LeadConfig, Outcome
from nemo_lead.generation import Rollout
from nemo_lead.training.rl.rollouts import Group, RolloutContext, grade_groups
from nemo_lead.verify import MathVerifier, default_region

PIECES = ["<|user|>3+4? Answer in \\boxed{}.<|assistant|><think>\n", "ok ", "</think>", " \\boxed{7}", "<eos>",
          "\\boxed{7}", " wait"]
EOS = 4


class _Tokenizer:
    """Each id decodes to its piece of PIECES."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(PIECES[i] for i in ids)


RESPONSES = [  # (token ids, finish reason)
    ([1, 2, 3, EOS], "stop"),  # box only after </think>
    ([5, 2, EOS], "stop"),  # box only before </think>
    ([6] * 10 + [EOS], "stop"),  # 10 x " wait", then the stop token glued to the last one
]


def _grade(preset):
    cfg = LeadConfig.from_preset(preset)
    group = Group(problem=SimpleNamespace(answer="7"), prompt_ids=[0],
                  rollouts=[Rollout(0, i, ids, [0.0] * len(ids), [0.0] * len(ids), why)
                            for i, (ids, why) in enumerate(RESPONSES)])
    with MathVerifier(workers=1, answer_region=default_region(cfg.outcome_rule), rule=cfg.outcome_rule) as v:
        ctx = RolloutContext(info=SimpleNamespace(rank=0, world_size=1), engine=None, tokenizer=_Tokenizer(),
                             prompt_cfg=None, verifier=v, think_open=True, check_repetition=cfg.check_repetition)
        grade_groups(ctx, [group], SimpleNamespace(stop_token_ids=[EOS]))
    return group


@pytest.mark.parametrize("preset, outcomes", [
    # the response alone, `<think>` in front, the stop token cut: 10 repeats of "wait"
    ("stage2", [Outcome.CORRECT, Outcome.TRUNCATED, Outcome.REPETITION]),
    # prompt + response with the stop token, as the authors decode them: the prompt's empty box is read after
    # "ok", and "wait<eos>" leaves 9 repeats
    ("reference_code", [Outcome.WRONG, Outcome.CORRECT, Outcome.TRUNCATED]),
])
def test_what_the_verifier_sees(preset, outcomes):
    group = _grade(preset)
    assert group.outcomes == [int(o) for o in outcomes]
    assert group.texts == ["ok </think> \\boxed{7}", "\\boxed{7}</think>", " wait" * 10]  # logged without the stop token
