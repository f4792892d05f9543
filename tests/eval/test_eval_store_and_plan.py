"""The pieces of `nemo-lead eval` that need no model: the run folder's resume rules, per-sample seeds, the cut
into calls and rounds, budgets."""

from __future__ import annotations

import json

import pytest

from nemo_lead.data import Problem
from nemo_lead.eval.calls import Item, dataset_name, pending_items, plan_calls, problem_seed, round_ranges
from nemo_lead.eval.config import EvalConfig, budget_points, model_name
from nemo_lead.eval.store import SampleStore, SettingsMismatch, settings_tag
from nemo_lead.generation import SamplingParams

SETTINGS = {"model": {"path": "/m"}, "sampling": {"temperature": 0.6, "n": 2}}


def _rec(pid: str, s: int, tag: str, **kw) -> dict:
    return {"dataset": "d", "problem_id": pid, "sample": s, "run": tag, "correct": False, **kw}


def test_store_tolerates_only_a_torn_last_line(tmp_path):
    tag = settings_tag(SETTINGS)
    store = SampleStore.open(tmp_path, SETTINGS, write=True)
    store.append([_rec("a", 0, tag), _rec("a", 1, tag)])
    path = tmp_path / "samples.jsonl"
    path.write_bytes(path.read_bytes() + b'{"dataset": "d", "probl')  # a crash in the middle of a write
    reader = SampleStore.open(tmp_path, SETTINGS, write=False)
    assert sorted(reader.records) == [("d", "a", 0), ("d", "a", 1)] and reader.torn_bytes == 23
    assert path.read_bytes().endswith(b"probl")  # reading alone leaves the file as it is
    writer = SampleStore.open(tmp_path, SETTINGS, write=True)
    writer.append([_rec("a", 1, tag, correct=True), _rec("b", 0, tag)])  # a known key is not written again
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["problem_id"], r["sample"], r["correct"]) for r in lines] == [("a", 0, False), ("a", 1, False),
                                                                             ("b", 0, False)]
    path.write_text(path.read_text().replace('"b"', '"b', 1))  # now a malformed line that is not the last
    path.write_text(path.read_text() + json.dumps(_rec("c", 0, tag)) + "\n")
    with pytest.raises(ValueError, match=r"samples.jsonl:3: malformed line"):
        SampleStore.open(tmp_path, SETTINGS, write=False)


def test_store_refuses_other_settings_naming_what_differs(tmp_path):
    SampleStore.open(tmp_path, SETTINGS, write=True).append([_rec("a", 0, settings_tag(SETTINGS))])
    other = {"model": {"path": "/m2"}, "sampling": {"temperature": 0.7, "n": 2}}
    with pytest.raises(SettingsMismatch) as e:
        SampleStore.open(tmp_path, other, write=False)
    assert "model.path: '/m' there, '/m2' now; sampling.temperature: 0.6 there, 0.7 now" in str(e.value)
    (tmp_path / "run.json").unlink()  # without run.json the tag on each line still tells
    with pytest.raises(SettingsMismatch, match=r"samples.jsonl:1: sample made with other settings"):
        SampleStore.open(tmp_path, other, write=False)


def test_store_rewrite_replaces_records_atomically(tmp_path):
    tag = settings_tag(SETTINGS)
    store = SampleStore.open(tmp_path, SETTINGS, write=True)
    store.append([_rec("a", 0, tag), _rec("a", 1, tag)])
    store.rewrite([_rec("a", 1, tag, correct=True)])
    again = SampleStore.open(tmp_path, SETTINGS, write=False)
    assert [r["correct"] for r in again.records.values()] == [False, True]
    assert not list(tmp_path.glob("*.tmp"))


def _problems(name: str, n: int) -> list[Problem]:
    return [Problem(f"{name}-{i}", f"q{i}", str(i)) for i in range(n)]


def test_problem_seeds_depend_on_the_problem_only():
    a, b = _problems("a", 5), _problems("b", 3)
    seeds = {p.id: problem_seed(7, "a", p.id) for p in a} | {p.id: problem_seed(7, "b", p.id) for p in b}
    assert len(set(seeds.values())) == 8 and all(0 <= s < 2**63 for s in seeds.values())
    # sha256 of the base seed, the dataset's name and the id, joined by the unit separator: by hand
    import hashlib
    digest = hashlib.sha256(b"7\x1fb\x1fb-2").digest()[:8]
    assert seeds["b-2"] == int.from_bytes(digest, "little") >> 1
    assert problem_seed(8, "b", "b-2") != seeds["b-2"] and problem_seed(7, "a", "b-2") != seeds["b-2"]
    # every item of a round carries its problem's seed, whatever else is pending
    items = pending_items({"a": a, "b": b}, 7, range(0, 3), range(0, 0), lambda k: False, lambda k: False)
    assert {i.problem.id: i.seed for i in items} == seeds


def test_calls_group_problems_with_the_same_samples_up_to_the_call_size():
    a, b = _problems("a", 5), _problems("b", 3)
    stored = {("a", "a-1", 0), ("a", "a-1", 1), ("a", "a-2", 1)}  # a-1 has 0 and 1, a-2 has 1 (a torn call)
    items = pending_items({"a": a, "b": b}, 7, range(0, 3), range(0, 0), stored.__contains__, lambda k: False)
    spans = [(i.problem.id, i.first, i.count) for i in items]
    # a-1 misses sample 2 only; a-2 misses 0 and 2, so it draws 0..2 again (sample 1 comes out the same)
    assert spans == [("a-0", 0, 3), ("a-1", 2, 1), ("a-2", 0, 3), ("a-3", 0, 3), ("a-4", 0, 3), ("b-0", 0, 3),
                     ("b-1", 0, 3), ("b-2", 0, 3)]
    calls = plan_calls(items, 7)  # at most 7 sequences: two problems of 3 samples
    assert [[i.problem.id for i in c.items] for c in calls] == [
        ["a-0"], ["a-1"], ["a-2", "a-3"], ["a-4", "b-0"], ["b-1", "b-2"]]
    assert [c.sequences for c in calls] == [3, 1, 6, 6, 6]
    ones = plan_calls(items, 1)  # a sample a call: every problem's samples cut into spans of one
    assert [(c.items[0].problem.id, c.first, c.count) for c in ones][:4] == [("a-0", 0, 1), ("a-0", 1, 1),
                                                                           ("a-0", 2, 1), ("a-1", 2, 1)]
    assert len(ones) == sum(i.count for i in items) == 22
    twos = plan_calls(items, 2)  # 3 samples: spans 0-1 and 2; a-0's span 2 and a-1's (2) share a call
    assert [([i.problem.id for i in c.items], c.first, c.count) for c in twos][:4] == [
        (["a-0"], 0, 2), (["a-0", "a-1"], 2, 1), (["a-2"], 0, 2), (["a-2"], 2, 1)]
    with pytest.raises(ValueError, match="at least one sequence"):
        plan_calls(items, 0)


def test_rounds_sample_only_the_problems_not_yet_solved():
    assert round_ranges(4, []) == [range(0, 4)]
    assert round_ranges(4, [1]) == [range(0, 1), range(1, 4)]
    assert round_ranges(4, [1, 1]) == [range(0, 1), range(1, 2), range(2, 4)]
    assert round_ranges(1, [1]) == [range(0, 1)] and round_ranges(4, [1, 3]) == [range(0, 1), range(1, 4)]
    for bad in ([0], [3, 2]):
        with pytest.raises(ValueError, match="rounds"):
            round_ranges(4, bad)
    a = _problems("a", 3)
    correct = {("a", "a-0", 0)}
    stored = {("a", p.id, 0) for p in a}
    second = pending_items({"a": a}, 7, range(1, 4), range(0, 1), stored.__contains__, correct.__contains__)
    assert [(i.problem.id, i.first, i.count) for i in second] == [("a-1", 1, 3), ("a-2", 1, 3)]
    assert isinstance(second[0], Item) and second[0].seed == problem_seed(7, "a", "a-1")


def test_budgets_names_and_config_checks(tmp_path):
    cfg = EvalConfig(model="m")
    assert cfg.sampling.temperature == 0.6 and cfg.sampling.top_p == 0.95 and cfg.sampling.n == 32
    points = budget_points(cfg)
    assert points[0] == 896 and points[-1] == 14336 and len(points) == 17 and 8192 in points  # 16 steps + 8192
    cfg.sampling.max_tokens = 8192
    assert budget_points(cfg) == [512 * i for i in range(1, 17)]
    cfg.budgets = [100, 9000, 4000]
    assert budget_points(cfg) == [100, 4000]
    assert model_name(str(tmp_path / "lead-7b" / "checkpoints" / "step_000100")) == "lead-7b-step_000100"
    assert dataset_name("aime24") == "aime24" and dataset_name("/x/my_set.jsonl") == "my_set"
    with pytest.raises(ValueError, match="sampling.seed must be an integer"):
        EvalConfig(model="m", sampling=SamplingParams(seed=None))
    with pytest.raises(ValueError, match="--compare"):
        EvalConfig()


def test_settings_bind_only_once_a_sample_is_written(tmp_path):
    """A run that failed before its first chunk leaves run.json behind; the next run replaces it."""
    SampleStore.open(tmp_path, SETTINGS, write=True)  # e.g. the model then failed to load
    other = {"model": {"path": "/m2"}, "sampling": {"temperature": 0.7, "n": 2}}
    store = SampleStore.open(tmp_path, other, write=True)
    assert json.loads((tmp_path / "run.json").read_text())["settings"] == other
    store.append([_rec("a", 0, store.tag)])
    with pytest.raises(SettingsMismatch, match="holds samples made with other settings"):
        SampleStore.open(tmp_path, SETTINGS, write=False)


def test_a_changed_problem_is_refused_naming_the_dataset(tmp_path):
    from nemo_lead.data import Problem

    first = {"d": [Problem(id="a", problem="1+1", answer="2"), Problem(id="b", problem="2+2", answer="4")]}
    store = SampleStore.open(tmp_path, SETTINGS, write=True, problems=first)
    store.append([_rec("a", 0, store.tag)])
    # more problems (limit raised) and a problem without samples that changed: both fine
    more = {"d": [first["d"][0], Problem(id="b", problem="2+3", answer="5"), Problem(id="c", problem="3", answer="3")]}
    SampleStore.open(tmp_path, SETTINGS, write=True, problems=more)
    replaced = {"d": [Problem(id="a", problem="1+2", answer="3")]}
    with pytest.raises(SettingsMismatch, match=r"dataset 'd' whose problem text or answer has changed.*problems a\b"):
        SampleStore.open(tmp_path, SETTINGS, write=False, problems=replaced)


def test_model_fingerprint_follows_content_not_modification_times(tmp_path, monkeypatch):
    import os

    from nemo_lead.eval.store import describe_differences
    from nemo_lead.models import write_tiny_model
    from nemo_lead.models.source import model_source

    monkeypatch.setenv("NEMO_LEAD_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    write_tiny_model(model, "qwen2", seed=0)
    before = model_source(str(model)).fingerprint()
    config = model / "config.json"
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))  # `touch`
    assert model_source(str(model)).fingerprint() == before
    weights = next(model.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    after = model_source(str(model)).fingerprint()
    assert after != before
    words = describe_differences({"model": before}, {"model": after})
    assert words == f"the model's file content changed: {weights.name}"
