"""Packing SFT traces: rows, loss masks, per-trace position ids and masks, and the actor on packed rows
giving exactly what it gives the traces one by one (log-probs, loss, gradients, updated weights)."""

import dataclasses

import pytest
import torch
from distributed import run_distributed

from nemo_lead.data import Trace
from nemo_lead.models import write_tiny_model
from nemo_lead.training.actor.microbatch import collate
from nemo_lead.training.sft.packing import pack_traces, packing_plan

MAX_LEN = 40


def _traces(n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p, r = int(torch.randint(2, 7, (1,), generator=g)), int(torch.randint(2, 18, (1,), generator=g))
        ids = torch.randint(1, 102, (p + r,), generator=g).tolist()  # no 0: see tests/training/test_actor.py
        out.append(Trace(id=f"t{i}", prompt_ids=ids[:p], response_ids=ids[p:]))
    return out


def _placement(traces, max_len):
    """Per trace: (row, offset of its first token in the row), from the packing plan."""
    where = {}
    for r, row in enumerate(packing_plan(traces, max_len)):
        offset = 0
        for i in row:
            where[i] = (r, offset)
            offset += len(traces[i])
    return [where[i] for i in range(len(traces))]


# ----------------------------------------------------------------------------- rows and masks
def test_rows_hold_whole_traces_first_fit_decreasing():
    traces = _traces()
    rows = packing_plan(traces, MAX_LEN)
    assert sorted(i for row in rows for i in row) == list(range(len(traces)))
    assert all(sum(len(traces[i]) for i in row) <= MAX_LEN for row in rows)
    assert len(rows) < len(traces)  # something was packed
    longest = max(range(len(traces)), key=lambda i: (len(traces[i]), -i))
    assert rows[0][0] == longest
    assert packing_plan(traces, MAX_LEN) == rows  # deterministic
    # first fit: a trace goes to the first row with room
    lens = [Trace("a", [1] * 5, [2] * 5), Trace("b", [1] * 3, [2] * 3), Trace("c", [1] * 2, [2] * 2)]
    assert packing_plan(lens, 14) == [[0, 2], [1]]


def test_loss_mask_marks_exactly_the_response_tokens():
    traces = _traces()
    batch = pack_traces(traces, MAX_LEN)
    assert batch.prompt_lens == [1] * len(batch)
    for (r, offset), t in zip(_placement(traces, MAX_LEN), traces):
        row = batch.tokens[r]
        start = offset + len(t.prompt_ids)
        assert row[offset : offset + len(t)].tolist() == t.prompt_ids + t.response_ids
        # mask entry j is for token j + 1 (prompt_lens = 1)
        assert batch.loss_mask[r][start - 1 : start - 1 + len(t.response_ids)].tolist() == [1.0] * len(t.response_ids)
        assert batch.loss_mask[r][offset - 1 : start - 1].sum() == 0 if offset else True
    assert sum(float(m.sum()) for m in batch.loss_mask) == sum(len(t.response_ids) for t in traces)
    assert [sum(s) for s in batch.segments] == batch.lengths


def test_position_ids_restart_and_attention_stays_inside_each_trace():
    a, b, c = Trace("a", [5, 6], [7, 8, 9]), Trace("b", [1], [2, 3]), Trace("c", [4, 4], [4])
    batch = pack_traces([a, b, c], 9)
    assert batch.segments == [[5, 3], [3]]
    mb = collate(batch, [0, 1])
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 0, 1, 2, 3, 4]]
    mask = mb.attention_mask  # True = masked out
    assert mask.shape == (2, 1, 8, 8) and mask.dtype == torch.bool
    attend = ~mask[0, 0]
    assert attend[:5, :5].equal(torch.ones(5, 5, dtype=torch.bool).tril())
    assert attend[5:, 5:].equal(torch.ones(3, 3, dtype=torch.bool).tril())
    assert not attend[5:, :5].any() and not attend[:5, 5:].any()
    attend = ~mask[1, 0]  # the padding (5 columns) is a piece of its own: no query row is fully masked
    assert not attend[3:, :3].any() and attend.any(dim=1).all()
    # the first token of a later trace is not trained (it would be predicted from the previous trace)
    assert mb.loss_mask[0].tolist() == [0, 1, 1, 1, 0, 1, 1, 0]  # column j predicts token j + 1
    # unpacked rows keep the plain causal path
    plain = collate(pack_traces([a, b, c], 9, pack=False), [0, 1, 2])
    assert plain.attention_mask is None and plain.position_ids[0].tolist() == list(range(5))


def test_unpacked_batch_and_errors():
    traces = _traces(3)
    batch = pack_traces(traces, MAX_LEN, pack=False)
    assert batch.segments is None and batch.prompt_lens == [len(t.prompt_ids) for t in traces]
    assert [b.tolist() for b in batch.tokens] == [t.prompt_ids + t.response_ids for t in traces]
    with pytest.raises(ValueError, match="more than max_seq_len=4: fit the traces first"):
        pack_traces(traces, 4)
    with pytest.raises(ValueError, match="at least one prompt and one response token"):
        pack_traces([Trace("x", [1], [])], 4)
    with pytest.raises(ValueError, match=r"segments\[0\]"):
        dataclasses.replace(pack_traces(traces, MAX_LEN), segments=[[1]] * len(pack_traces(traces, MAX_LEN)))


# ----------------------------------------------------------------------------- the actor on packed rows
def _job(hf_dir, traces):
    from nemo_lead.models import export_hf_weights
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor, compute_logprobs
    from nemo_lead.training.actor.sft_update import sft_eval_loss, sft_train_step

    info = init_parallel(1, 1)
    packed, single = pack_traces(traces, MAX_LEN), pack_traces(traces, MAX_LEN, pack=False)
    out = {}
    for name, batch in (("packed", packed), ("single", single)):
        # a small token budget: several micro-batches of different shapes
        actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=2 * MAX_LEN,
                                         optim={"lr": 1e-3, "adam_eps": 1e-3}), info)
        out[name] = {"logp": compute_logprobs(actor, batch), "eval": sft_eval_loss(actor, batch),
                     "step": sft_train_step(actor, batch)}
        out[name]["weights"] = dict(export_hf_weights(actor.model))
        if name == "packed":  # the same rows without their segments: attention crosses traces
            out["unmasked"] = compute_logprobs(actor, dataclasses.replace(batch, segments=None))
    destroy_parallel()
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("packing") / "qwen2", "qwen2", seed=3, init_std=0.1))


def test_packed_rows_give_the_same_tokens_loss_and_gradients(hf_dir):
    traces = _traces()
    out = run_distributed(_job, 1, hf_dir, traces)[0]
    packed, single = out["packed"], out["single"]
    where = _placement(traces, MAX_LEN)

    def per_trace(logp_rows):
        pieces = []
        for (r, offset), t in zip(where, traces):
            start = offset + len(t.prompt_ids) - 1  # row response index of the trace's first response token
            pieces.append(logp_rows[r][start : start + len(t.response_ids)])
        return pieces

    for got, ref in zip(per_trace(packed["logp"]), single["logp"]):
        assert got.shape == ref.shape and (got - ref).abs().max() < 1e-5
    # without the mask a later trace sees the one before it: the comparison above can fail
    assert max((a - b).abs().max() for a, b in zip(per_trace(out["unmasked"]), single["logp"])) > 1e-3
    tokens = sum(len(t.response_ids) for t in traces)
    ref_loss = -torch.cat(single["logp"]).mean().item()
    for name in ("eval", "step"):
        assert packed[name]["tokens"] == single[name]["tokens"] == tokens
        assert packed[name]["loss"] == pytest.approx(ref_loss, abs=1e-5)
        assert single[name]["loss"] == pytest.approx(ref_loss, abs=1e-5)
    assert packed["step"]["sequences"] < single["step"]["sequences"]
    assert packed["step"]["grad_norm"] == pytest.approx(single["step"]["grad_norm"], rel=1e-5)
    worst = max((packed["weights"][k] - single["weights"][k]).abs().max().item() for k in single["weights"])
    assert worst < 2e-6
