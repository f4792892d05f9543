"""The megatron engine's own TP1 x PP1 layout over a larger actor (engine.tp=1 engine.pp=1), tiny Qwen2,
fp32, CPU/gloo, two ranks.

- Resharding: every tensor of the TP1 copy gathered from an actor at TP2 and at PP2 equals the HF tensor
  it is made of (fused QKV split back into q / k / v, fc1 into gate / up, vocabulary padding dropped), in
  buckets of one parameter and in one bucket alike; the bytes gathered are counted exactly.
- Rollouts: two TP1 replicas over a TP2 actor (and over a PP2 actor) (`generate_all`: each generates half the prompts, every sample
  on the stream it has in the whole call) sample exactly the tokens a TP1 model loaded from the same HF
  folder samples for all the prompts in one call, and the same log-probs to 1e-5.
- Four TP1 replicas over a TP2 x DP2 actor (4 ranks) sample the tokens of the engine at the actor's layout.
- The CUDA-graph-shaped decode steps (bucketed, not captured on the CPU) run on the copy over the TP2
  actor, with the same tokens. On the TP2 actor's own modules they need engine.cuda_graphs_tp (an error
  naming it otherwise) and then sample the eager steps' tokens; with a simulated capture both ranks replay,
  and when one rank's capture fails neither does (the group falls back to eager steps together).
- Refit: after the actor's weights change, `refit` gives the copy the new weights; with `release_copy`
  `sleep` frees the copy, `generate` refuses until `wake` rebuilds it.
"""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.generation import SamplingParams
from nemo_lead.models import write_tiny_model

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]]
PARAMS = SamplingParams(n=2, temperature=1.0, top_p=0.95, max_tokens=8, seed=3, stop_token_ids=[0])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # untied embeddings: the output layer travels on its own (from the last stage at PP2)
    return str(write_tiny_model(tmp_path_factory.mktemp("copy") / "qwen2", "qwen2", seed=7, init_std=0.1,
                                tie_word_embeddings=False))


def _build(hf_dir, tp, pp):
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import init_parallel

    info = init_parallel(tp, pp)
    model = build_gpt(hf_dir, info, "fp32", init=False)
    load_hf_weights(model, hf_dir)
    return info, model


def _as_hf(tensors, arch):
    """The TP1 copy under HF names (the inverse of the HF -> megatron TP1 layout)."""
    from nemo_lead.models.hf_weights import FC1, QKV, VOCAB, _split_qkv, mapping

    out = {}
    for item in mapping(arch):
        t = tensors[item.megatron[0]]
        if item.kind == QKV:
            parts = _split_qkv(t, arch)
        elif item.kind == FC1:
            parts = t.chunk(2)
        elif item.kind == VOCAB:
            parts = [t[: arch.vocab_size]]
        else:
            parts = [t]
        out.update(zip(item.hf, parts))
    return out


def _reshard_job(hf_dir):
    from nemo_lead.generation.megatron_engine.reshard import gather_tp1_weights, shard_table
    from nemo_lead.models import model_info
    from nemo_lead.parallel import destroy_parallel

    out = {}
    for tp, pp in ((2, 1), (1, 2)):
        _, model = _build(hf_dir, tp, pp)
        table = shard_table(model)
        one, s1 = gather_tp1_weights(model, bucket_bytes=1, table=table)  # one parameter per bucket
        big, s2 = gather_tp1_weights(model, bucket_bytes=1e9, table=table)
        out[(tp, pp)] = {"hf": _as_hf(one, model_info(model).arch), "same": all(torch.equal(one[k], big[k]) for k in one),
                         "names": sorted(one) == sorted(big), "stats": (s1, s2), "params": len(table),
                         "copy_bytes": sum(t.numel() * t.element_size() for t in one.values()),
                         "replicated_bytes": sum(one[name].numel() * 4 for name, kind, *_ in table if kind == "replicated")}
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_the_tp1_copy_of_a_tp2_and_a_pp2_actor_equals_the_hf_weights(tiny):
    from nemo_lead.models.hf_weights import HFReader

    reader = HFReader(tiny)
    want = {name: reader.read(name) for name in reader.file_of}
    for rank in run_distributed(_reshard_job, 2, tiny):
        for layout, got in rank.items():
            assert sorted(got["hf"]) == sorted(want), layout
            for name, t in want.items():
                assert torch.equal(got["hf"][name], t), (layout, name)
            assert got["same"] and got["names"], layout
            (one, big) = got["stats"]
            assert one["buckets"] == got["params"] and big["buckets"] == (1 if layout == (2, 1) else 2), layout
            # bytes gathered: every parameter's TP shards, so the copy (padding included) and the replicated
            # tensors once more per further TP rank
            extra = (layout[0] - 1) * got["replicated_bytes"]
            assert one["bytes"] == big["bytes"] == got["copy_bytes"] + extra, layout
            assert got["copy_bytes"] >= sum(t.numel() * 4 for t in want.values()) and got["replicated_bytes"] > 0


def _rollouts_job(hf_dir):
    from nemo_lead.generation import MegatronEngine
    from nemo_lead.parallel import destroy_parallel
    from nemo_lead.training.rl.rollouts import RolloutContext, generate_all

    def rollouts(info, engine):
        ctx = RolloutContext(info=info, engine=engine, tokenizer=None, prompt_cfg=None, verifier=None, think_open=False)
        return [[(r.token_ids, r.policy_logprobs, r.finish_reason) for r in rs] for rs in generate_all(ctx, PROMPTS, PARAMS)]

    out = {}
    _, model = _build(hf_dir, 1, 1)  # the TP1 reference: every prompt in one call
    out["tp1"] = [[] for _ in PROMPTS]
    for r in MegatronEngine(model, max_batch_size=4).generate(PROMPTS, PARAMS):
        out["tp1"][r.prompt_index].append((r.token_ids, r.policy_logprobs, r.finish_reason))
    destroy_parallel(keep_process_group=True)
    info, model = _build(hf_dir, 2, 1)
    engine = MegatronEngine(model, max_batch_size=4, own_copy=True)
    out["replicas"] = engine.replicas
    out["copy"] = rollouts(info, engine)
    out["refit"] = engine.refit_stats
    # the copy runs at TP = PP = 1, so the CUDA-graph-shaped decode steps apply over any actor layout (on the
    # CPU: the same bucketed steps, without capture); here every prompt on each rank, in one call
    from nemo_lead.generation.megatron_engine.cuda_graphs import DecodeSteps

    steps, step = [], DecodeSteps._step
    DecodeSteps._step = lambda self, *a: steps.append(1) or step(self, *a)  # count the bucketed steps
    try:
        graphs = MegatronEngine(model, max_batch_size=4, own_copy=True, cuda_graphs=True)
        out["graphs"] = [[] for _ in PROMPTS]
        for r in graphs.generate(PROMPTS, PARAMS):
            out["graphs"][r.prompt_index].append((r.token_ids, r.policy_logprobs, r.finish_reason))
    finally:
        DecodeSteps._step = step
    out["bucketed_steps"] = len(steps)
    del graphs
    out.update(_graphs_at_tp2(model))
    # an update: every weight x 1.5 (each rank scales its own shards); refit must give the copy the new weights
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    engine.refit(model)
    out["after"] = {k: v.clone() for k, v in engine.model.tensors.items()}
    # release_copy: sleep frees the copy, generate refuses, wake rebuilds it (same weights, same rollouts)
    released = MegatronEngine(model, max_batch_size=4, own_copy=True, release_copy=True, refit_bucket_mb=1e-3)
    try:
        released.generate(PROMPTS, PARAMS)
    except RuntimeError as e:
        out["refused"] = str(e)
    released.wake()
    out["woken"] = rollouts(info, released)
    released.sleep()
    out["slept"] = released.model is None
    out["scaled"] = rollouts(info, engine)
    destroy_parallel(keep_process_group=True)
    info, model = _build(hf_dir, 1, 2)  # PP2 -> two engine replicas at PP1: the same tokens
    out["pp2"] = rollouts(info, MegatronEngine(model, max_batch_size=4, own_copy=True))
    destroy_parallel()
    return out


class _Replayed:
    """A stand-in for a captured graph on the CPU: static inputs and output, `replay` recomputes into them."""

    def __init__(self, run, out):
        self.run, self.out = run, out

    def replay(self):
        self.out.copy_(self.run())


def _graphs_at_tp2(model):
    """On the actor's modules at TP2: the fixed-shape steps are refused without engine.cuda_graphs_tp; with it
    they sample the eager steps' tokens; a capture (simulated: `_Replayed`) is replayed when both ranks
    capture, and neither replays when one rank's capture fails (both fall back to eager steps together)."""
    import warnings

    import torch.distributed as dist

    from nemo_lead.generation import MegatronEngine
    from nemo_lead.generation.megatron_engine.cuda_graphs import DecodeSteps

    def run(**kw):
        engine = MegatronEngine(model, max_batch_size=4, **kw)
        rollouts = engine.generate(PROMPTS, PARAMS)
        return [(r.token_ids, r.policy_logprobs) for r in rollouts], engine.graph_stats

    out = {"tp2_eager": run()[0]}
    try:
        MegatronEngine(model, cuda_graphs=True).generate(PROMPTS, PARAMS)
    except ValueError as e:
        out["graphs_at_tp2"] = str(e)
    out["tp2_bucketed"] = run(cuda_graphs=True, cuda_graphs_tp=True)[0]

    def capture(self, cache, rows, tok, pos, tokens, lengths):
        tok[: tokens.shape[0]], pos[: tokens.shape[0]] = tokens, lengths
        warm = self._step(cache, rows, tok, pos)  # the warm-up runs on every rank (its all-reduces too)
        if fail_on == dist.get_rank():
            raise RuntimeError("capture refused on this rank")
        return _Replayed(lambda: self._step(cache, rows, tok, pos), warm), tok, pos, warm

    init, real = DecodeSteps.__init__, DecodeSteps._capture
    DecodeSteps.__init__ = lambda self, *a, **k: init(self, *a, **{**k, "capture": True})
    DecodeSteps._capture = capture
    try:
        for fail_on in (None, 1):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out[f"captured_{fail_on}"] = (*run(cuda_graphs=True, cuda_graphs_tp=True), [str(w.message) for w in caught if "graph" in str(w.message)])
    finally:
        DecodeSteps.__init__, DecodeSteps._capture = init, real
    return out


def _check_graphs_at_tp2(rank):
    eager, tokens = rank["tp2_eager"], [t for t, _ in rank["tp2_eager"]]
    assert "engine.cuda_graphs_tp=true" in rank["graphs_at_tp2"] and "engine TP 2" in rank["graphs_at_tp2"]
    assert [t for t, _ in rank["tp2_bucketed"]] == tokens
    for got in (rank["tp2_bucketed"], rank["captured_None"][0], rank["captured_1"][0]):
        assert [t for t, _ in got] == tokens
        assert max(abs(x - y) for (_, a), (_, b) in zip(got, eager) for x, y in zip(a, b)) < 1e-5
    (_, stats, warned), (_, failed, fallback) = rank["captured_None"], rank["captured_1"]
    assert stats["captures"] >= 1 and stats["replays"] >= PARAMS.max_tokens - 2 and not warned, stats
    # rank 1's capture failed: the group agreed, so rank 0 dropped its graph too and nobody replayed
    assert failed == {"captures": 0, "replays": 0}, failed
    assert len(fallback) == 1 and "decoding without graphs" in fallback[0], fallback


def test_two_tp1_replicas_over_a_tp2_actor_sample_the_tp1_tokens_and_refit_follows_updates(tiny):
    from nemo_lead.models.hf_weights import HFReader

    ranks = run_distributed(_rollouts_job, 2, tiny)
    ref = ranks[0]["tp1"]
    assert [len(rs) for rs in ref] == [PARAMS.n] * len(PROMPTS)
    for i, rank in enumerate(ranks):
        assert rank["replicas"] == (2, i)
        assert rank["tp1"] == ref
        got = rank["copy"]
        assert [[r[0] for r in rs] for rs in got] == [[r[0] for r in rs] for rs in ref]
        assert [[r[2] for r in rs] for rs in got] == [[r[2] for r in rs] for rs in ref]
        assert [[r[0] for r in rs] for rs in rank["pp2"]] == [[r[0] for r in rs] for rs in ref]
        err = max(abs(x - y) for g, w in zip(got, ref) for a, b in zip(g, w) for x, y in zip(a[1], b[1]))
        assert err < 1e-5, err
        assert [[r[0] for r in rs] for rs in rank["graphs"]] == [[r[0] for r in rs] for rs in ref]
        assert rank["bucketed_steps"] >= PARAMS.max_tokens - 1
        _check_graphs_at_tp2(rank)
        assert rank["refit"]["copy_bytes"] > 0 and rank["refit"]["bytes"] >= rank["refit"]["copy_bytes"]
        assert "call wake() first" in rank["refused"]
        assert rank["slept"] and rank["woken"] == rank["scaled"]
        assert rank["scaled"] != got  # the new weights sample other tokens
    reader = HFReader(tiny)
    for rank in ranks:  # every tensor of the refitted copy is the updated one: 1.5 x the HF tensor
        after = _as_hf(rank["after"], _arch(tiny))
        assert sorted(after) == sorted(reader.file_of)
        for name in reader.file_of:
            assert torch.equal(after[name], 1.5 * reader.read(name)), name


def _arch(hf_dir):
    import json
    from pathlib import Path

    from nemo_lead.models.hf_config import arch_from_hf

    return arch_from_hf(json.loads(Path(hf_dir, "config.json").read_text()))


def _dp2_job(hf_dir):
    from nemo_lead.generation import MegatronEngine
    from nemo_lead.parallel import destroy_parallel
    from nemo_lead.training.rl.rollouts import RolloutContext, generate_all

    info, model = _build(hf_dir, 2, 1)  # 4 ranks: TP2 x DP2
    out = {}
    for name, engine in (("actor", MegatronEngine(model, max_batch_size=4)),
                         ("copy", MegatronEngine(model, max_batch_size=4, own_copy=True))):
        ctx = RolloutContext(info=info, engine=engine, tokenizer=None, prompt_cfg=None, verifier=None, think_open=False)
        out[name] = [[r.token_ids for r in rs] for rs in generate_all(ctx, PROMPTS * 2, PARAMS)]
    destroy_parallel()
    return out


def test_tp1_replicas_over_a_tp2_x_dp2_actor_sample_the_actor_layouts_tokens(tiny):
    """Each DP share split over its actor replica's two ranks, gathered over TP, then over DP."""
    ranks = run_distributed(_dp2_job, 4, tiny)
    want = ranks[0]["actor"]
    assert len(want) == 2 * len(PROMPTS) and want[0] != want[len(PROMPTS)]  # the DP replicas' own seeds
    assert all(r["actor"] == want and r["copy"] == want for r in ranks)
