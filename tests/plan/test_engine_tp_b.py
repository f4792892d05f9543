"""The plan's engine at a TP b between 1 and the actor's (engine.tp=b engine.pp=1, b | actor.tp): the shape
read from the config, the copy's memory (its layers' shards at TP b, the vocabulary tables whole), the replicas, the fixes' keys and the
search's candidates, on the 14B RL shape at actor TP8 on 8 x H100 (`test_engine_auto`'s)."""

from test_engine_auto import H100, _shape

from nemo_lead.models.hf_config import padded_vocab_size
from nemo_lead.plan.fixes import changes_of
from nemo_lead.plan.job import plan_job
from nemo_lead.plan.search import shapes_searched


def test_engine_tp2_over_tp8_counts_a_tp2_copy_and_four_replicas():
    s2 = _shape("engine.tp=2", "engine.pp=1")
    assert (s2.engine_tp1, s2.engine_tp, s2.engine_layout) == (True, 2, (2, 1, 4))
    s1 = _shape("engine.tp=1", "engine.pp=1")
    assert (s1.engine_tp1, s1.engine_tp, s1.engine_layout) == (True, 1, (1, 1, 8))
    actor = _shape("engine.tp=actor", "engine.pp=actor")
    assert (actor.engine_tp1, actor.engine_layout) == (False, (8, 1, 1))
    p1, p2 = plan_job(s1, H100), plan_job(s2, H100)
    c1, c2 = p1.phases["generation"]["engine_copy"], p2.phases["generation"]["engine_copy"]
    # the layers' weights halve at TP2 (up to the replicated norms and biases); the two vocabulary tables
    # (untied, bf16) stay whole, padded for TP1 and for TP2
    a = s1.arch
    t1, t2 = (2 * padded_vocab_size(a.vocab_size, 128 * b) * a.hidden_size * 2 for b in (1, 2))
    want = (c1 - t1) / 2 + t2
    assert abs(c2 - want) < 1e-3 * want and c2 > 0.5 * c1 + 1e9, (c1, c2, want)
    assert changes_of(s1, s2) == {"engine.tp": 2, "engine.pp": 1}
    searched = {(s.tp, s.pp, s.engine_tp1, s.engine_tp) for s in shapes_searched(actor)}
    assert {(8, 1, True, b) for b in (1, 2, 4)} <= searched and (8, 1, True, 8) not in searched
    assert (1, 8, True, 1) in searched and not any(s[:2] == (1, 8) and s[3] > 1 for s in searched if s[2])


def test_graphs_at_engine_tp_above_1_count_only_once_measured(monkeypatch):
    """engine.cuda_graphs_tp: with TP_GRAPH_DECODE_BANDWIDTH_FRACTION None (not measured) the plan's times do
    not move; with a figure, the TP2 copies' and the TP8 actor's generation take it, TP1's does not change."""
    from nemo_lead.plan import timing

    def times(*extra):
        return {tp: plan_job(_shape(f"engine.tp={tp}", "engine.pp=1" if tp != "actor" else "engine.pp=actor", *extra),
                             H100).time for tp in (1, 2, "actor")}

    on = _shape("engine.tp=2", "engine.pp=1", "engine.cuda_graphs_tp=true")
    assert on.cuda_graphs_tp and not _shape("engine.tp=2", "engine.pp=1").cuda_graphs_tp
    assert timing.TP_GRAPH_DECODE_BANDWIDTH_FRACTION is None
    off = times()
    assert times("engine.cuda_graphs_tp=true") == off
    monkeypatch.setattr(timing, "TP_GRAPH_DECODE_BANDWIDTH_FRACTION", 0.05)
    assert times() == off  # the switch off: still eager steps at TP > 1
    graphs = times("engine.cuda_graphs_tp=true")
    assert graphs[1] == off[1]
    for tp in (2, "actor"):  # no eager host time per layer, the measured fraction instead of TP1's
        assert graphs[tp].generation < off[tp].generation and graphs[tp].update == off[tp].update, tp
    eager = times("engine.cuda_graphs_tp=true", "engine.cuda_graphs=false")  # no graphs anywhere
    assert eager[2] == off[2] and eager["actor"] == off["actor"] and eager[1].generation > off[1].generation
