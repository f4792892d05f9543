"""The megatron engine at a TP between 1 and the actor's (engine.tp=2 over an actor at TP4: two engine
replicas of two ranks each), tiny Qwen2 with 4 KV groups, fp32, CPU/gloo, four ranks, one job:

- Rollouts: the two TP2 replicas (`generate_all`: each generates half the prompts, every sample on the
  stream it has in the whole call) sample exactly the tokens a TP1 model from the same HF folder samples
  for all the prompts in one call, and the tokens of engine.tp=1 over the same actor; log-probs to 1e-5.
  So do two engine TP2 x PP1 replicas over an actor at TP2 x PP2.
- Resharding: every tensor of the engine's copy on each rank equals that rank's shard of a TP2 model
  loaded from the HF folder (the slice of the HF tensor it should hold), the vocabulary tables whole.
- Refit: after the actor's weights change, the copy holds the new shards.
- CUDA-graph-shaped decode steps (bucketed, not captured on the CPU) on the TP2 copies: refused without
  engine.cuda_graphs_tp, the same tokens with it; on the TP2 x PP2 actor's modules refused (one stage only).
"""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.generation import SamplingParams
from nemo_lead.models import write_tiny_model

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22], [30, 31, 32]]
PARAMS = SamplingParams(n=2, temperature=1.0, top_p=0.95, max_tokens=8, seed=3, stop_token_ids=[0])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # 4 KV groups: an actor at TP4 holds one per rank, an engine at TP2 two
    return str(write_tiny_model(tmp_path_factory.mktemp("tp_between") / "qwen2", "qwen2", seed=7, init_std=0.1,
                                num_key_value_heads=4))


def _build(hf_dir, tp, pp=1):
    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.parallel import init_parallel

    info = init_parallel(tp, pp)
    model = build_gpt(hf_dir, info, "fp32", init=False)
    load_hf_weights(model, hf_dir)
    return info, model


def _error(run) -> str | None:
    try:
        run()
    except ValueError as e:
        return str(e)
    return None


def _job(hf_dir):
    from nemo_lead.generation import MegatronEngine
    from nemo_lead.generation.megatron_engine.reshard import _named_shards
    from nemo_lead.parallel import destroy_parallel
    from nemo_lead.training.rl.rollouts import RolloutContext, generate_all

    def rollouts(info, engine):
        ctx = RolloutContext(info=info, engine=engine, tokenizer=None, prompt_cfg=None, verifier=None, think_open=False)
        return [[(r.token_ids, r.policy_logprobs) for r in rs] for rs in generate_all(ctx, PROMPTS, PARAMS)]

    out = {}
    _, model = _build(hf_dir, 1)  # the TP1 reference: every prompt in one call
    out["tp1"] = [[] for _ in PROMPTS]
    for r in MegatronEngine(model, max_batch_size=4).generate(PROMPTS, PARAMS):
        out["tp1"][r.prompt_index].append((r.token_ids, r.policy_logprobs))
    destroy_parallel(keep_process_group=True)
    _, model = _build(hf_dir, 2)  # TP2 x DP2: each rank's shards as an engine TP2 rank should hold them
    out["tp2_shards"] = {k: v.clone() for k, v in _named_shards(model).items()}
    destroy_parallel(keep_process_group=True)
    info, model = _build(hf_dir, 4)
    engine = MegatronEngine(model, max_batch_size=4, own_copy=True, engine_tp=2, refit_bucket_mb=1e-3)
    out["replicas"] = engine.replicas
    out["copy"] = {k: v.clone() for k, v in engine.model.tensors.items()}
    out["tp2"] = rollouts(info, engine)
    # the fixed-shape (CUDA-graph-shaped) decode steps on the replicas' TP2 copies: refused without the
    # switch, the eager steps' tokens with it
    engine.cuda_graphs = True
    out["graphs_refused"] = _error(lambda: rollouts(info, engine))
    engine.cuda_graphs_tp = True
    out["tp2_bucketed"] = rollouts(info, engine)
    engine.cuda_graphs = engine.cuda_graphs_tp = False
    out["tp1_copy"] = rollouts(info, MegatronEngine(model, max_batch_size=4, own_copy=True))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    engine.refit(model)
    out["after"] = {k: v.clone() for k, v in engine.model.tensors.items()}
    destroy_parallel(keep_process_group=True)
    info, model = _build(hf_dir, 2, 2)  # engine.tp = actor.tp over an actor at PP2: engine TP2 x PP1 replicas
    out["pp2"] = rollouts(info, MegatronEngine(model, max_batch_size=4, own_copy=True, engine_tp=2))
    # on the TP2 x PP2 actor's own modules graphs stay refused, with the switch too
    out["graphs_pp2"] = _error(lambda: MegatronEngine(model, cuda_graphs=True, cuda_graphs_tp=True).generate(PROMPTS, PARAMS))
    destroy_parallel()
    return out


def test_engine_tp2_replicas_over_tp4_and_tp2_pp2_actors_sample_the_tp1_tokens_and_hold_tp2_shards(tiny):
    from nemo_lead.models.hf_weights import HFReader

    ranks = run_distributed(_job, 4, tiny)
    ref = ranks[0]["tp1"]
    tokens = [[r[0] for r in rs] for rs in ref]
    assert [len(rs) for rs in ref] == [PARAMS.n] * len(PROMPTS)
    reader = HFReader(tiny)
    vocab = {"embedding.word_embeddings.weight": "model.embed_tokens.weight", "output_layer.weight": "lm_head.weight"}
    for i, rank in enumerate(ranks):
        assert rank["replicas"] == (2, i // 2)
        assert "engine.cuda_graphs_tp=true" in rank["graphs_refused"] and "engine TP 2" in rank["graphs_refused"]
        assert "one pipeline stage" in rank["graphs_pp2"] and "engine.pp" in rank["graphs_pp2"]
        for layout in ("tp2", "tp2_bucketed", "tp1_copy", "pp2"):
            assert [[r[0] for r in rs] for rs in rank[layout]] == tokens, (i, layout)
            err = max(abs(x - y) for g, w in zip(rank[layout], ref) for a, b in zip(g, w) for x, y in zip(a[1], b[1]))
            assert err < 1e-5, (i, layout, err)
        copy, shards = rank["copy"], rank["tp2_shards"]
        assert sorted(copy) == sorted(shards)
        for name, t in copy.items():
            if name in vocab:  # whole on every rank (padding rows kept)
                hf = reader.read(vocab[name])
                assert torch.equal(t[: hf.shape[0]], hf) and t.shape[0] >= hf.shape[0], name
            else:  # this rank's engine TP2 shard (engine rank i % 2)
                assert torch.equal(t, shards[name]), (i, name)
            assert torch.equal(rank["after"][name], 1.5 * t), (i, name)
