"""The shared sampling function: hand-computed truncations, chi-square goodness of fit for every knob on a
fixed 6-token vocabulary (with a seeded generator and with per-row stream keys), greedy, both
log-probabilities, seeding, parameter validation; the per-sample streams against a pure-Python SplitMix64,
and a keyed row's draw independent of the rows beside it."""

import math

import pytest
import torch

from nemo_lead.generation import SamplingParams, make_generator, sample_tokens, truncated_logits

PROBS = [0.35, 0.25, 0.2, 0.1, 0.06, 0.04]
LOGITS = torch.tensor(PROBS).log()
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}  # 0.999 quantiles of chi-square(df)


def reference(probs, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """The sampling distribution written out with plain floats and loops (the module docstring's steps)."""
    w = [p ** (1 / temperature) for p in probs]
    p = [x / sum(w) for x in w]
    keep = set(range(len(p)))
    if top_k:
        kth = sorted(p, reverse=True)[top_k - 1]
        keep = {i for i in keep if p[i] >= kth}
    q = {i: p[i] / sum(p[j] for j in keep) for i in keep}
    if top_p < 1:
        before, kept = 0.0, set()
        for i in sorted(q, key=lambda i: -q[i]):
            if before < top_p:
                kept.add(i)
            before += q[i]
        keep = kept
    q = {i: p[i] / sum(p[j] for j in keep) for i in keep}
    if min_p:
        top = max(q.values())
        keep = {i for i in keep if q[i] >= min_p * top}
    total = sum(p[i] for i in keep)
    return [p[i] / total if i in keep else 0.0 for i in range(len(p))]


def test_reference_matches_hand_computed_cases():
    assert reference(PROBS, top_k=3) == pytest.approx([0.35 / 0.8, 0.25 / 0.8, 0.2 / 0.8, 0, 0, 0])
    assert reference(PROBS, top_p=0.5) == pytest.approx([0.35 / 0.6, 0.25 / 0.6, 0, 0, 0, 0])  # 0.35 < 0.5: 2nd kept
    assert reference(PROBS, top_p=0.7) == pytest.approx([0.35 / 0.8, 0.25 / 0.8, 0.2 / 0.8, 0, 0, 0])
    assert reference(PROBS, min_p=0.6) == pytest.approx([0.35 / 0.6, 0.25 / 0.6, 0, 0, 0, 0])  # floor 0.21
    # top-p sees the top-k-renormalised distribution: [.4375, .3125, .25] -> mass before 3rd is .75 >= .7
    assert reference(PROBS, top_k=3, top_p=0.7) == pytest.approx([0.35 / 0.6, 0.25 / 0.6, 0, 0, 0, 0])


CASES = [
    dict(temperature=1.0),
    dict(temperature=0.5),
    dict(temperature=2.0),
    dict(temperature=1.0, top_k=3),
    dict(temperature=1.0, top_p=0.5),
    dict(temperature=1.0, top_p=0.7),
    dict(temperature=1.0, min_p=0.6),
    dict(temperature=0.7, top_k=5, top_p=0.9, min_p=0.15),
]


def _keys(seed, n):
    from nemo_lead.generation.streams import draw_keys, sample_seed

    keys = torch.tensor([sample_seed(seed, i) for i in range(n)])
    return draw_keys(keys, torch.zeros_like(keys))


@pytest.mark.parametrize("source", ["generator", "keys"])
@pytest.mark.parametrize("knobs", CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_sampled_frequencies_match_the_distribution(knobs, source):
    params = SamplingParams(**knobs)
    want = reference(PROBS, **knobs)
    n = 20_000
    if source == "generator":
        draw = sample_tokens(LOGITS.expand(n, -1), params, make_generator(1234, "cpu"))
    else:  # 20,000 samples' first tokens, each from its own stream
        draw = sample_tokens(LOGITS.expand(n, -1), params, keys=_keys(1234, n))
    counts = torch.bincount(draw.tokens, minlength=len(PROBS)).tolist()
    kept = [i for i, p in enumerate(want) if p > 0]
    assert all(counts[i] == 0 for i in range(len(PROBS)) if want[i] == 0)  # removed tokens never drawn
    chi2 = sum((counts[i] - n * want[i]) ** 2 / (n * want[i]) for i in kept)
    assert chi2 < CHI2_999[len(kept) - 1], (counts, want, chi2)
    # logprobs: the chosen token under the renormalised distribution; policy: log softmax(logits / T)
    policy = torch.log_softmax(LOGITS / knobs["temperature"], -1)
    expect_lp = torch.tensor([math.log(want[t]) for t in draw.tokens.tolist()])
    assert torch.allclose(draw.logprobs, expect_lp.float(), atol=1e-5)
    assert torch.allclose(draw.policy_logprobs, policy[draw.tokens], atol=1e-6)


def test_truncated_logits_removes_exactly_the_excluded_tokens():
    z = truncated_logits(LOGITS[None], SamplingParams(temperature=1.0, top_k=4, top_p=0.8))
    want = reference(PROBS, top_k=4, top_p=0.8)
    assert torch.isinf(z[0]).tolist() == [p == 0 for p in want]
    assert torch.allclose(torch.softmax(z, -1)[0], torch.tensor(want), atol=1e-6)
    with pytest.raises(ValueError, match="temperature > 0"):
        truncated_logits(LOGITS[None], SamplingParams(temperature=0))


def test_greedy_takes_argmax_with_zero_sampling_logprob():
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    draw = sample_tokens(logits, SamplingParams(temperature=0), None)
    assert draw.tokens.tolist() == [1, 0]
    assert draw.logprobs.tolist() == [0.0, 0.0]
    assert torch.allclose(draw.policy_logprobs, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])


def test_same_seed_same_draws_and_bf16_logits():
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0)).bfloat16()
    params = SamplingParams(temperature=0.8, top_p=0.9)
    a = sample_tokens(logits, params, make_generator(7, "cpu"))
    b = sample_tokens(logits, params, make_generator(7, "cpu"))
    c = sample_tokens(logits, params, make_generator(8, "cpu"))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    assert a.logprobs.dtype == torch.float32
    assert bool((a.logprobs >= a.policy_logprobs - 1e-6).all())  # truncation only raises probabilities
    with pytest.raises(ValueError, match="batch, vocab"):
        sample_tokens(logits[0], params, None)


@pytest.mark.parametrize("bad, key", [
    (dict(n=0), "n"), (dict(temperature=-0.1), "temperature"), (dict(top_p=0.0), "top_p"),
    (dict(top_k=-1), "top_k"), (dict(min_p=1.0), "min_p"), (dict(max_tokens=0), "max_tokens"),
    (dict(stop_token_ids=[-3]), "stop_token_ids"),
])
def test_sampling_params_name_the_bad_key(bad, key):
    with pytest.raises(ValueError, match=f"^{key} "):
        SamplingParams(**bad)


def test_streams_are_splitmix64_on_int64_tensors():
    """The tensor arithmetic (wrapping multiplies, logical shifts of signed int64) against Python integers."""
    from nemo_lead.generation.streams import _GOLDEN, _MASK64, _mix, draw_keys, exponential_noise, splitmix64

    def signed(x):
        return x - (1 << 64) if x >> 63 else x

    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2**63, 2**63 - 1, (1000,), dtype=torch.int64, generator=g)
    x[:3] = torch.tensor([0, -1, -2**63])
    assert _mix(x).tolist() == [signed(splitmix64(v & _MASK64)) for v in x.tolist()]
    keys, drawn = torch.tensor([5, 2**62 + 3]), torch.tensor([0, 7])
    want_keys = [signed(splitmix64(k + (t + 1) * _GOLDEN)) for k, t in zip(keys.tolist(), drawn.tolist())]
    assert draw_keys(keys, drawn).tolist() == want_keys
    noise = exponential_noise(torch.tensor(want_keys), 6)
    for row, key in enumerate(want_keys):
        for i in range(6):
            u = ((splitmix64(key + (i + 1) * _GOLDEN) >> 40) + 1) / 2**24
            assert noise[row, i].item() == pytest.approx(max(-math.log(u), 1e-38), rel=1e-6)


def test_a_keyed_row_draws_the_same_token_whatever_rows_share_its_batch():
    logits = torch.randn(40, 300, generator=torch.Generator().manual_seed(1))
    keys = _keys(9, 40)
    params = SamplingParams(temperature=1.0, top_p=0.95)
    whole = sample_tokens(logits, params, keys=keys)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(2))
    shuffled = sample_tokens(logits[perm], params, keys=keys[perm])
    assert torch.equal(shuffled.tokens, whole.tokens[perm]) and torch.equal(shuffled.logprobs, whole.logprobs[perm])
    alone = [int(sample_tokens(logits[i:i + 1], params, keys=keys[i:i + 1]).tokens) for i in (0, 17, 39)]
    assert alone == whole.tokens[[0, 17, 39]].tolist()
    assert len(set(whole.tokens.tolist())) > 20  # the rows' streams differ
    with pytest.raises(ValueError, match="one per row"):
        sample_tokens(logits, params, keys=keys[:3])
