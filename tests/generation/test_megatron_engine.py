"""The megatron rollout engine on a tiny Qwen2 (fp32, CPU/gloo).

One rank: greedy equals a naive loop over the full forward; the direct linears equal megatron's modules bit
for bit; stop tokens, max_tokens, n > 1, prompts of
different lengths, bad prompts; same seed same output; continuous batching and host-sync intervals do not
change greedy output; after a training step + refit the engine's log-probs match a full forward to 1e-5.
KV budget: sampled (T = 1, stop tokens, n = 3) runs in waves of 2 and 1 rows give the unlimited run's
tokens, the cache holds rows x (longest prompt + max_tokens) positions, a too small budget names its key.
Two ranks: TP=2 and PP=2 give the TP=1 output (the same weights loaded from one HF folder), with and
without a one-row KV budget.
"""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.generation import SamplingParams
from nemo_lead.models import write_tiny_model

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # init_std 0.1: peaked enough that greedy has no near-ties, logits of order 1-5
    return str(write_tiny_model(tmp_path_factory.mktemp("gen") / "qwen2", "qwen2", seed=7, init_std=0.1))


def _build(hf_dir, tp=1, pp=1):
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import init_parallel

    info = init_parallel(tp, pp)
    model = build_gpt(hf_dir, info, "fp32", init=False)
    load_hf_weights(model, hf_dir)
    return model


def _full_logprobs(model, prompt, tokens, temperature=1.0):
    """log softmax(logits / T) of `tokens` after `prompt`, from one full forward (last stage; None elsewhere)."""
    from nemo_lead.models import forward_logits

    ids = torch.tensor([prompt + tokens])
    logits = forward_logits(model, ids)
    if logits is None:
        return None
    lp = torch.log_softmax(logits[0].double() / temperature, dim=-1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)]


def _naive_greedy(model, prompt, steps):
    from nemo_lead.models import forward_logits

    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(forward_logits(model, torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


def _single_rank_job(hf_dir):
    from nemo_lead.generation import MegatronEngine
    from nemo_lead.parallel import destroy_parallel

    model = _build(hf_dir)
    engine = MegatronEngine(model)
    out = {}
    greedy = SamplingParams(temperature=0, max_tokens=10)
    rollouts = engine.generate(PROMPTS, greedy)
    out["greedy"] = [(r.prompt_index, r.sample_index, r.token_ids, r.logprobs, r.finish_reason) for r in rollouts]
    out["naive"] = [_naive_greedy(model, p, 10) for p in PROMPTS]
    out["greedy_policy_err"] = max(
        max(abs(a - b) for a, b in zip(r.policy_logprobs, _full_logprobs(model, PROMPTS[r.prompt_index], r.token_ids)))
        for r in rollouts)
    # continuous batching (2 sequences at a time) and syncing every 3 steps change nothing under greedy
    small = MegatronEngine(model, max_batch_size=2, max_prefill_tokens=8, sync_every=3)
    out["greedy_small_batches"] = [r.token_ids for r in small.generate(PROMPTS, greedy)]

    sampled = SamplingParams(n=3, temperature=0.9, top_p=0.9, top_k=40, max_tokens=12, seed=5)
    a = engine.generate(PROMPTS, sampled)
    b = engine.generate(PROMPTS, sampled)
    c = engine.generate(PROMPTS, SamplingParams(n=3, temperature=0.9, top_p=0.9, top_k=40, max_tokens=12, seed=6))
    out["seed"] = ([r.token_ids for r in a], [r.token_ids for r in b], [r.token_ids for r in c])
    out["n_order"] = [(r.prompt_index, r.sample_index) for r in a]
    out["sampled_policy_err"] = max(
        max(abs(x - y) for x, y in zip(r.policy_logprobs, _full_logprobs(model, PROMPTS[r.prompt_index], r.token_ids, 0.9)))
        for r in a)
    out["truncated_vs_policy"] = [(r.logprobs, r.policy_logprobs) for r in a]
    # per-prompt seeds (evaluation's): a sample's tokens follow (its prompt's seed, its index) alone, whatever
    # else the call holds: the prompts alone, reversed, or only samples 1-2 of each (first_sample)
    seeds = [11, 22, 33]
    keyed = {(r.prompt_index, r.sample_index): r.token_ids for r in engine.generate(PROMPTS, sampled, prompt_seeds=seeds)}
    alone = {(i, r.sample_index): r.token_ids for i in range(3)
             for r in engine.generate([PROMPTS[i]], sampled, prompt_seeds=[seeds[i]])}
    flipped = {(2 - r.prompt_index, r.sample_index): r.token_ids
               for r in small.generate(PROMPTS[::-1], sampled, prompt_seeds=seeds[::-1])}
    tail = {(r.prompt_index, r.sample_index): r.token_ids
            for r in engine.generate(PROMPTS, SamplingParams(n=2, temperature=0.9, top_p=0.9, top_k=40, max_tokens=12,
                                                             seed=99), prompt_seeds=seeds, first_sample=1)}
    out["prompt_seeds"] = (keyed, alone, flipped, tail)
    for name, kwargs in (("first_sample_alone", {"first_sample": 1}), ("seed_count", {"prompt_seeds": [1]})):
        try:
            engine.generate(PROMPTS, sampled, **kwargs)
        except ValueError as e:
            out[name] = str(e)

    # stop tokens: stop on the token greedy emits third for prompt 0
    stop_tok = out["greedy"][0][2][2]
    stopped = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop_tok]))
    out["stopped"] = [(r.token_ids, r.finish_reason, r.num_tokens) for r in stopped]
    out["max_tokens_1"] = [(r.token_ids, r.finish_reason) for r in engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=1))]

    errors = {}
    for name, prompts in (("empty_list", []), ("empty_prompt", [[1, 2], []]), ("oov", [[1, 10_000]])):
        try:
            engine.generate(prompts, greedy)
        except ValueError as e:
            errors[name] = str(e)
    try:
        engine.generate([[1] * 1000], SamplingParams(max_tokens=100))
    except ValueError as e:
        errors["too_long"] = str(e)
    out["errors"] = errors

    # a training step changes the weights; refit; the engine's log-probs follow the new weights
    before = engine.generate(PROMPTS[:1], SamplingParams(temperature=1.0, max_tokens=8, seed=1))[0]
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.tensor([PROMPTS[2]])
    logits = model(ids, torch.arange(ids.shape[1])[None], None)
    torch.log_softmax(logits[..., :102], -1)[0, :-1].gather(-1, ids[0, 1:, None]).mean().neg().backward()
    opt.step()
    engine.refit([model])
    out["training_flag_kept"] = model.training
    after = engine.generate(PROMPTS[:1], SamplingParams(temperature=1.0, max_tokens=8, seed=1))[0]
    out["refit_same_tokens_old_vs_new_lp"] = max(
        abs(x - y) for x, y in zip(_full_logprobs(model, PROMPTS[0], before.token_ids), before.policy_logprobs))
    out["refit_err"] = max(abs(x - y) for x, y in zip(_full_logprobs(model, PROMPTS[0], after.token_ids), after.policy_logprobs))

    # one TP rank, local spec: the direct linears give megatron's modules' numbers bit for bit (sampling with
    # stop tokens, so rows finish at different steps and the cache compacts)
    sampled_stops = SamplingParams(n=4, temperature=1.0, max_tokens=16, stop_token_ids=[stop_tok, 30], seed=9)
    direct = [(r.token_ids, r.logprobs, r.policy_logprobs) for r in engine.generate(PROMPTS, sampled_stops)]
    out["direct_on"] = engine.runner.direct
    engine.runner.direct = False
    modules = [(r.token_ids, r.logprobs, r.policy_logprobs) for r in engine.generate(PROMPTS, sampled_stops)]
    engine.runner.direct = True
    out["direct_vs_modules"] = (direct, modules)

    # fixed-shape decode steps (padded batch buckets, attention over the whole cache: what CUDA graphs
    # replay) against the plain steps, with admissions, compaction on stop tokens and cache growth
    stop = SamplingParams(n=3, temperature=0.9, max_tokens=40, stop_token_ids=[stop_tok, 30], seed=3)
    plain = MegatronEngine(model, max_batch_size=5, sync_every=3, cuda_graphs=False).generate(PROMPTS, stop)
    shaped = MegatronEngine(model, max_batch_size=5, sync_every=3, cuda_graphs=True)
    fixed = shaped.generate(PROMPTS, stop)
    out["bucketed"] = ([(r.token_ids, r.finish_reason) for r in plain], [(r.token_ids, r.finish_reason) for r in fixed],
                       max(max(abs(x - y) for x, y in zip(p.policy_logprobs, f.policy_logprobs)) for p, f in zip(plain, fixed)),
                       shaped.graph_stats)
    destroy_parallel()
    return out


def test_engine_single_rank(tiny):
    (out,) = run_distributed(_single_rank_job, 1, tiny)
    plain, fixed, err, stats = out["bucketed"]
    assert fixed == plain and err < 1e-5 and stats == {"captures": 0, "replays": 0}  # no capture on CPU
    assert {reason for _, reason in plain} == {"stop", "length"}  # rows left early and late
    greedy = out["greedy"]
    assert [g[2] for g in greedy] == out["naive"]  # greedy == naive full-forward loop, prompts of 3 lengths
    assert [g[:2] for g in greedy] == [(0, 0), (1, 0), (2, 0)]
    assert all(g[4] == "length" and len(g[2]) == 10 and g[3] == [0.0] * 10 for g in greedy)
    assert out["greedy_policy_err"] < 1e-5
    assert out["greedy_small_batches"] == [g[2] for g in greedy]

    a, b, c = out["seed"]
    assert a == b and a != c  # same seed same output; another seed differs
    assert out["n_order"] == [(p, s) for p in range(3) for s in range(3)]
    assert len({tuple(t) for t in a[:3]}) > 1  # n samples of one prompt are not copies
    assert out["sampled_policy_err"] < 1e-5
    keyed, alone, flipped, tail = out["prompt_seeds"]
    assert keyed == alone == flipped and sorted(keyed) == [(p, s) for p in range(3) for s in range(3)]
    assert tail == {k: v for k, v in keyed.items() if k[1] >= 1}  # samples 1-2 drawn alone: the same tokens
    assert [keyed[(p, s)] for p in range(3) for s in range(3)] != a  # not the call's own streams
    assert "needs prompt_seeds" in out["first_sample_alone"] and "1 seeds for 3 prompts" in out["seed_count"]
    for lps, policy in out["truncated_vs_policy"]:  # truncation renormalises: logprob >= policy logprob
        assert all(lp >= pl - 1e-6 and lp <= 1e-6 for lp, pl in zip(lps, policy))

    stop_tok = greedy[0][2][2]
    stopped = out["stopped"]
    assert stopped[0] == (greedy[0][2][:3], "stop", 3)  # stop token included, then the sample ends
    for (tokens, reason, num), g in zip(stopped[1:], greedy[1:]):
        want = g[2][: g[2].index(stop_tok) + 1] if stop_tok in g[2] else g[2]
        assert (tokens, reason, num) == (want, "stop" if stop_tok in g[2] else "length", len(want))
    assert out["max_tokens_1"] == [([g[2][0]], "length") for g in greedy]

    errors = out["errors"]
    assert "at least one prompt" in errors["empty_list"]
    assert "prompt 1 is empty" in errors["empty_prompt"]
    assert "10000" in errors["oov"] and "vocabulary" in errors["oov"]
    assert "prompt 0" in errors["too_long"] and "1024" in errors["too_long"]

    assert out["direct_on"] is True
    direct, modules = out["direct_vs_modules"]
    assert direct == modules and len({len(t) for t, _, _ in direct}) > 1

    assert out["training_flag_kept"] is True
    assert out["refit_same_tokens_old_vs_new_lp"] > 1e-3  # the step really changed the model
    assert out["refit_err"] < 1e-5


def _budget_job(hf_dir):
    """Sampled at T = 1 with stop tokens, 4 prompts x 3 samples: unlimited, in waves under KV budgets (2 rows,
    1 row: a prompt's samples in parts), small batches, syncing every 3 steps, a tight prefill budget."""
    from nemo_lead.generation import MegatronEngine
    from nemo_lead.parallel import destroy_parallel

    model = _build(hf_dir)
    prompts = [*PROMPTS, [3, 4, 5, 6]]
    params = SamplingParams(n=3, temperature=1.0, max_tokens=14, stop_token_ids=list(range(30, 40)), seed=11)
    engine = MegatronEngine(model)
    per_position = engine.runner.kv_bytes_per_position()
    row_gib = (max(map(len, prompts)) + params.max_tokens) * per_position / 2**30  # one sequence's reservation
    out = {"per_position": per_position, "row_gib": row_gib}

    def run(**options):
        e = MegatronEngine(model, **options)
        return [(r.prompt_index, r.sample_index, r.token_ids, r.logprobs, r.policy_logprobs, r.finish_reason)
                for r in e.generate(prompts, params)], e.last_stats

    out["unlimited"] = run()
    out["two_rows"] = run(kv_cache_gib=2.5 * row_gib, max_prefill_tokens=8)
    out["one_row"] = run(kv_cache_gib=1.2 * row_gib, sync_every=3)
    out["batch_4"] = run(max_batch_size=4)
    try:
        MegatronEngine(model, kv_cache_gib=0.9 * row_gib).generate(prompts, params)
    except ValueError as err:
        out["too_small"] = str(err)
    destroy_parallel()
    return out


def test_kv_budget_runs_in_waves_with_the_unlimited_runs_tokens(tiny):
    (out,) = run_distributed(_budget_job, 1, tiny)
    want, unlimited = out["unlimited"]
    assert {r[5] for r in want} == {"stop", "length"} and len({tuple(r[2]) for r in want}) == 12
    assert unlimited == {"kv_budget_bytes": None, "kv_rows": 12, "kv_waves": 1, "kv_peak_bytes": unlimited["kv_peak_bytes"],
                         "peak_rows": 12, "prefills": 1}
    positions = 11 + 14  # longest prompt + max_tokens
    for name, rows in (("two_rows", 2), ("one_row", 1), ("batch_4", 4)):
        got, stats = out[name]
        assert [r[:3] + r[5:] for r in got] == [r[:3] + r[5:] for r in want], name  # tokens, stop reasons
        err = max(abs(a - b) for g, w in zip(got, want) for i in (3, 4) for a, b in zip(g[i], w[i]))
        assert err < 1e-5, (name, err)
        assert stats["kv_rows"] == rows and stats["peak_rows"] == rows and stats["kv_waves"] == -(-12 // rows)
        assert stats["prefills"] >= 12 // rows
        if name != "batch_4":  # under a budget: allocated once, rows x every reachable position
            assert stats["kv_peak_bytes"] == rows * positions * out["per_position"] <= stats["kv_budget_bytes"]
    assert out["one_row"][1]["prefills"] == 12  # n = 3 > 1 row: each sample admitted on its own
    assert "engine.kv_cache_gib" in out["too_small"] and "smaller than one sequence" in out["too_small"]
    assert f"{positions} positions" in out["too_small"]


def _layouts_job(hf_dir):
    from nemo_lead.generation import MegatronEngine
    from nemo_lead.parallel import destroy_parallel

    params = [SamplingParams(temperature=0, max_tokens=8),
              SamplingParams(n=2, temperature=1.0, top_p=0.95, max_tokens=8, seed=3, stop_token_ids=[0])]
    out = {}
    for tp, pp in ((1, 1), (2, 1), (1, 2)):
        model = _build(hf_dir, tp, pp)
        engine = MegatronEngine(model, max_batch_size=4)
        out[(tp, pp)] = [[(r.token_ids, r.policy_logprobs, r.finish_reason) for r in engine.generate(PROMPTS, p)]
                         for p in params]
        # a KV budget of one sequence per rank (the stages agree on the row limit): the same tokens
        budget = MegatronEngine(model, kv_cache_gib=(11 + 8) * engine.runner.kv_bytes_per_position() * 1.5 / 2**30)
        out[(tp, pp, "budget")] = ([r.token_ids for r in budget.generate(PROMPTS, params[1])], budget.last_stats["kv_rows"])
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_tp2_and_pp2_match_tp1(tiny):
    ranks = run_distributed(_layouts_job, 2, tiny)
    ref = ranks[0][(1, 1)]
    assert ranks[1][(1, 1)] == ref  # two DP replicas, same prompts and seed
    for rank in ranks:
        for tp, pp in ((1, 1), (2, 1), (1, 2)):
            assert rank[(tp, pp, "budget")] == ([w[0] for w in ref[1]], 1), (tp, pp)
    for layout in ((2, 1), (1, 2)):
        for rank in ranks:  # every rank of the model-parallel group holds the same rollouts
            got = rank[layout]
            for want_runs, got_runs in zip(ref, got):
                assert [g[0] for g in got_runs] == [w[0] for w in want_runs], layout
                assert [g[2] for g in got_runs] == [w[2] for w in want_runs], layout
                err = max(abs(x - y) for g, w in zip(got_runs, want_runs) for x, y in zip(g[1], w[1]))
                assert err < 1e-5, (layout, err)


def test_kv_budget_arithmetic_and_bad_budgets_name_the_key():
    from nemo_lead.generation import EngineConfig
    from nemo_lead.generation.megatron_engine.kv_budget import budget_rows, kv_bytes_per_position

    # R1-Distill-Qwen-14B at TP8, bf16: 48 layers x 1 KV head x 128 x 2 (K, V) x 2 bytes
    per_position = kv_bytes_per_position(48, 1, 128, 2)
    assert per_position == 24_576
    assert budget_rows(40.0, 14_336 + 512, per_position) == int(40 * 2**30 // (14_848 * 24_576)) == 117
    assert budget_rows(0.34, 14_848, per_position) == 1  # one sequence: 364,904,448 bytes = 0.3398 GiB
    with pytest.raises(ValueError, match=r"engine.kv_cache_gib=0.3 is smaller than one sequence's KV cache: .* "
                                         r"= 0.3398 GiB on this rank"):
        budget_rows(0.3, 14_848, per_position)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="engine.kv_cache_gib must be > 0"):
            EngineConfig(kv_cache_gib=bad)
    assert EngineConfig().kv_cache_gib is None


def test_every_local_layer_type_is_either_on_the_direct_path_or_handled_by_modules():
    """A new layer type in nemo_lead.models must be classified here, or the engine's direct (module-free)
    decode path could compute a layer it does not know (`stage.direct_path_types`)."""
    import inspect

    import nemo_lead.models.attention as attention
    import nemo_lead.models.local_layers as local_layers
    from nemo_lead.generation.megatron_engine.stage import direct_path_types

    direct = {t for types in direct_path_types().values() for t in types}
    # called as modules on both paths (norms), or never called by the engine (core attention)
    by_module = {local_layers.RMSNorm, attention.SDPAttention}
    for module in (local_layers, attention):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, torch.nn.Module):
                assert cls in direct or cls in by_module, f"{cls.__qualname__}: not classified for the direct path"
