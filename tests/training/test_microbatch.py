"""Splitting a batch of sequences: DP shares balanced by tokens, token-budget micro-batches, the column
layout of padded tensors (hand-worked example), validation errors naming the sequence. In process, no
megatron."""

import pytest
import torch

from nemo_lead.training.actor.microbatch import (
    SequenceBatch,
    balance_over_dp,
    collate,
    dummy_like,
    padded_tokens,
    plan_microbatches,
)


def test_dp_shares_balance_tokens_deterministically():
    lengths = [14000, 500, 600, 7000, 6900, 100]
    shares = balance_over_dp(lengths, 2)
    # longest first, each to the lighter rank: 14000 -> r0 (14000); 7000, 6900, 600 -> r1 (14500);
    # 500 -> r0 (14500); 100 -> tie, the lower rank r0
    assert shares == [[0, 1, 5], [2, 3, 4]]
    assert [sum(lengths[i] for i in s) for s in shares] == [14600, 14500]
    assert balance_over_dp(lengths, 2) == shares  # no randomness
    assert balance_over_dp([5, 5, 5], 2) == [[0, 2], [1]]  # ties go to the lower rank
    assert balance_over_dp([3], 4) == [[0], [], [], []]  # fewer sequences than ranks
    covered = sorted(i for s in balance_over_dp(list(range(1, 40)), 3) for i in s)
    assert covered == list(range(39))
    with pytest.raises(ValueError, match="dp must be >= 1"):
        balance_over_dp(lengths, 0)


def test_microbatches_respect_the_token_budget_and_group_similar_lengths():
    lengths = [14000, 500, 480, 7000, 520, 30]
    groups = plan_microbatches(lengths, 16000, overhead_tokens=256)
    # sorted: 14000 7000 520 500 480 30. 2 x 14000 > 16000: alone. 7000 alone (7000 + 256) beats 7000 + 520
    # padded to 2 x 7000; the short ones: [520 500 480] + [30] = 1560 + 30 + 2 x 256 = 2102, one group of
    # four 4 x 520 + 256 = 2336, [520] [500 480] [30] = 520 + 1000 + 30 + 3 x 256 = 2318
    assert groups == [[0], [3], [4, 1, 2], [5]]
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 16000
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert padded_tokens(lengths, groups) == 14000 + 7000 + 3 * 520 + 30
    # a costly micro-batch: the fewest that fit the budget (three), and of those the least padding
    assert plan_microbatches(lengths, 16000, overhead_tokens=10**6) == [[0], [3], [4, 1, 2, 5]]
    # free micro-batches: no padding at all
    assert padded_tokens(lengths, plan_microbatches(lengths, 16000, overhead_tokens=0)) == sum(lengths)
    # a budget below the longest sequence still makes progress: one sequence per micro-batch
    assert plan_microbatches([50, 40], 10) == [[0], [1]]
    # a budget that fits everything, and equal lengths: one micro-batch
    assert plan_microbatches([7, 7, 7], 10**6) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="token_budget"):
        plan_microbatches(lengths, 0)
    with pytest.raises(ValueError, match="overhead_tokens"):
        plan_microbatches(lengths, 100, overhead_tokens=-1)


def _set_partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first], *part]
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1:]]


@pytest.mark.parametrize("seed", range(12))
def test_microbatch_plan_is_the_cheapest_of_all_partitions(seed):
    """Brute force over every way to group up to 7 sequences (not only runs of the sorted list)."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 8, (1,), generator=g))
    lengths = torch.randint(1, 60, (n,), generator=g).tolist()
    budget, overhead = int(torch.randint(30, 200, (1,), generator=g)), int(torch.randint(0, 80, (1,), generator=g))

    def cost(groups):
        return padded_tokens(lengths, groups) + overhead * len(groups)

    def fits(group):
        return len(group) == 1 or len(group) * max(lengths[i] for i in group) <= budget

    best = min(cost(p) for p in _set_partitions(list(range(n))) if all(fits(x) for x in p))
    plan = plan_microbatches(lengths, budget, overhead)
    assert all(fits(x) for x in plan) and sorted(i for x in plan for i in x) == list(range(n))
    assert cost(plan) == best


def test_collate_puts_response_tokens_in_the_prediction_columns():
    batch = SequenceBatch(
        tokens=[[5, 6, 7, 8, 9], [1, 2, 3]],
        prompt_lens=[2, 1],
        loss_mask=[[1, 0, 1], [1, 1]],
        advantages=[0.5, -1.0],
        old_logprobs=[[-0.1, -0.2, -0.3], [-1.0, -2.0]],
    )
    assert batch.response_lens == [3, 2] and batch.lengths == [5, 3]
    mb = collate(batch, [1, 0])
    assert mb.input_ids.tolist() == [[1, 2, 3, 0, 0], [5, 6, 7, 8, 9]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4]] * 2
    assert mb.targets.tolist() == [[2, 3, 0, 0, 0], [6, 7, 8, 9, 0]]
    # sequence 0: prompt [5, 6], responses 7, 8, 9 are predicted at columns 1, 2, 3
    assert mb.loss_mask.tolist() == [[1, 1, 0, 0, 0], [0, 1, 0, 1, 0]]
    assert torch.allclose(mb.old_logprobs, torch.tensor([[-1.0, -2.0, 0, 0, 0], [0, -0.1, -0.2, -0.3, 0]]))
    assert mb.advantages.tolist() == [-1.0, 0.5] and mb.ref_logprobs is None
    values = torch.arange(10.0).reshape(2, 5)
    assert [v.tolist() for v in mb.response_values(values)] == [[0.0, 1.0], [6.0, 7.0, 8.0]]
    assert collate(SequenceBatch([[4, 5, 6]], [1]), [0]).loss_mask.tolist() == [[1.0, 1.0, 0.0]]  # default mask


def test_batch_helpers():
    batch = SequenceBatch.from_prompts_and_responses([[1, 2], [3]], [[4], [5, 6]], advantages=[1.0, 2.0])
    assert [t.tolist() for t in batch.tokens] == [[1, 2, 4], [3, 5, 6]] and batch.prompt_lens == [2, 1]
    sub = batch.select([1])
    assert len(sub) == 1 and sub.tokens[0].tolist() == [3, 5, 6] and sub.advantages.tolist() == [2.0]
    dummy = dummy_like(batch)
    assert dummy.advantages is not None and dummy.old_logprobs is None
    assert collate(dummy, [0]).loss_mask.sum() == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"tokens": [], "prompt_lens": []}, "at least one sequence"),
    ({"tokens": [[1, 2]], "prompt_lens": [1, 1]}, "prompt_lens has 2 entries for 1 sequences"),
    ({"tokens": [[1, 2], [1, 2, 3]], "prompt_lens": [1, 3]}, r"sequence 1: prompt_lens\[1\]=3 must be in \[1, 2\]"),
    ({"tokens": [[1, 2, 3]], "prompt_lens": [0]}, "must be in"),
    ({"tokens": [[1, 2, 3]], "prompt_lens": [1], "old_logprobs": [[0.0]]},
     r"old_logprobs\[0\] has 1 values; sequence 0 has 2 response tokens"),
    ({"tokens": [[1, 2, 3]], "prompt_lens": [1], "advantages": [1.0, 2.0]}, "advantages has 2 values for 1"),
    ({"tokens": [[[1, 2]]], "prompt_lens": [1]}, r"tokens\[0\] must be 1-D"),
])
def test_bad_batches_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SequenceBatch(**kwargs)
