"""The embedded demo task: deterministic files, disjoint sets, traces the verifier grades as intended,
filler that never carries a value, and lengths that fit the demo's sequence budget."""

from __future__ import annotations

import random
import re
import statistics

import pytest
import yaml

from nemo_lead.algorithms import Outcome
from nemo_lead.data import STAGE1_DIFFICULTY, filter_by_bound, format_prompt, load_problems
from nemo_lead.data.demo_task import (
    DEMO_EXTRA_TOKENS,
    DEMO_FILLER,
    DEMO_MODEL,
    DEMO_PROMPT,
    DIFFICULTIES,
    HELDOUT_PER_DIFFICULTY,
    MAX_FILLERS,
    VALUE_RANGE,
    answer_of,
    demo_prompt_tokens,
    demo_rows,
    demo_token_count,
    make_problem,
    make_trace,
    render_trace,
    solution_states,
    trace_stats,
    write_demo_data,
)
from nemo_lead.models.tiny import char_tokenizer
from nemo_lead.pipeline.recipe import recipes_dir
from nemo_lead.verify import MathVerifier

SMALL = {"sft_traces": 1500, "rl_stage1": 400, "rl_stage2_extra": 100}


@pytest.fixture(scope="module")
def rows():
    return demo_rows(0)


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer(DEMO_EXTRA_TOKENS)


# ----------------------------------------------------------------------------- problems and traces
def test_problems_are_chains_with_exact_answers_in_range():
    rng = random.Random(1)
    lo, hi = VALUE_RANGE
    for operands in DIFFICULTIES:
        for _ in range(200):
            chain = make_problem(rng, operands)
            assert len(chain) == 2 * operands - 1
            assert int(answer_of(chain)) == eval(chain)  # noqa: S307 - digits and +/- only
            states = solution_states(chain)
            assert states[0] == chain and len(states) == operands
            for state in states[1:]:
                assert lo <= int(re.match(r"-?\d+", state).group()) <= hi  # the running value


def test_trace_shape_and_filler_that_carries_nothing():
    rng = random.Random(2)
    for _ in range(300):
        chain = make_problem(rng, rng.choice(DIFFICULTIES))
        trace = make_trace(chain, rng)
        think, _, tail = trace["response"].partition("\n</think>\n\n")
        assert tail == f"\\boxed{{{trace['boxed']}}}"
        lines = think.split("\n")
        assert lines.count(DEMO_FILLER) == trace["filler_lines"]
        content = [line for line in lines if line != DEMO_FILLER]
        # without its filler lines a trace is the plain chain of states, whatever its verbosity:
        # each state is computed from the state just before it, never from a filler line
        assert "\n".join(content) + "\n</think>\n\n" + tail == render_trace(content, [0] * len(content))
        assert content[0] == chain and content[-1] == trace["boxed"]
        assert (trace["boxed"] != answer_of(chain)) == trace["slipped"]
        assert max(len(list(g)) for g in _runs(lines)) <= MAX_FILLERS  # no long runs for the repetition detector


def _runs(lines):
    run = [lines[0]]
    for line in lines[1:]:
        if line == run[-1]:
            run.append(line)
        else:
            yield run
            run = [line]
    yield run


def test_slip_changes_every_later_state():
    states = solution_states("3+5-2+7", {0: 1})
    assert states == ["3+5-2+7", "9-2+7", "7+7", "14"]
    assert answer_of("3+5-2+7") == "13"


# ----------------------------------------------------------------------------- files
def test_files_are_deterministic_for_a_seed(tmp_path):
    a = write_demo_data(tmp_path / "a", seed=3, **SMALL)
    b = write_demo_data(tmp_path / "b", seed=3, **SMALL)
    c = write_demo_data(tmp_path / "c", seed=4, **SMALL)
    assert set(a) == {"sft_traces", "rl_stage1", "rl_stage2_extra", "heldout"}
    for name in a:
        assert a[name].read_bytes() == b[name].read_bytes()
        assert a[name].read_bytes() != c[name].read_bytes()


def test_heldout_set_does_not_depend_on_training_sizes():
    assert demo_rows(5, **SMALL)["heldout"] == demo_rows(5, sft_traces=10, rl_stage1=10, rl_stage2_extra=10)[
        "heldout"]


def test_sets_are_disjoint_and_sized(rows):
    sets = {name: {r["problem"] for r in rows[name]} for name in ("rl_stage1", "rl_stage2_extra", "heldout")}
    for name, problems in sets.items():
        assert len(problems) == len(rows[name])  # no problem twice within a problem set
    assert not sets["rl_stage1"] & sets["rl_stage2_extra"]
    assert not sets["heldout"] & (sets["rl_stage1"] | sets["rl_stage2_extra"])
    sft = {r["problem"] for r in rows["sft_traces"]}
    assert not sft & (sets["rl_stage1"] | sets["rl_stage2_extra"] | sets["heldout"])
    assert len(rows["sft_traces"]) == 8000
    counts = statistics.multimode(r["difficulty"] for r in rows["heldout"])
    assert sorted(counts) == list(DIFFICULTIES)  # equal numbers of each difficulty
    assert len(rows["heldout"]) == HELDOUT_PER_DIFFICULTY * len(DIFFICULTIES)
    extra = statistics.mean(r["difficulty"] for r in rows["rl_stage2_extra"])
    assert extra > statistics.mean(r["difficulty"] for r in rows["rl_stage1"]) + 0.5


def test_files_load_as_problem_sets(tmp_path):
    paths = write_demo_data(tmp_path, seed=0, **SMALL)
    for name in ("rl_stage1", "rl_stage2_extra", "heldout"):
        problems = load_problems(paths[name])
        assert all(p.answer == answer_of(p.problem) for p in problems)
        assert all(p.meta["difficulty"] == (len(p.problem) + 1) // 2 for p in problems)
    stage1 = load_problems(paths["rl_stage1"])
    assert filter_by_bound(stage1, "difficulty", STAGE1_DIFFICULTY) == stage1  # past the paper's stage-1 filter
    sft = load_problems(paths["sft_traces"])
    assert [p.id for p in sft] == [f"demo-sft-{i:05d}" for i in range(SMALL["sft_traces"])]
    assert {"response", "difficulty", "filler_lines", "slipped"} <= set(sft[0].meta)


# ----------------------------------------------------------------------------- grading
def test_verifier_grades_gold_traces_correct_and_slipped_traces_wrong(rows):
    good = [r for r in rows["sft_traces"] if not r["slipped"]][:60]
    bad = [r for r in rows["sft_traces"] if r["slipped"]][:30]
    with MathVerifier(workers=1, answer_region="after_think") as verifier:
        grades = verifier.grade([r["response"] for r in good + bad], [r["answer"] for r in good + bad])
    assert [g.outcome for g in grades] == [Outcome.CORRECT] * len(good) + [Outcome.WRONG] * len(bad)
    assert all(g.extracted == r["answer"] for g, r in zip(grades, good))


# ----------------------------------------------------------------------------- tokens and the mix
def test_token_counts_match_the_tiny_tokenizer(rows, tokenizer):
    for token in DEMO_EXTRA_TOKENS:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    for r in rows["sft_traces"][:200]:
        assert demo_token_count(r["response"]) == len(tokenizer(r["response"], add_special_tokens=False)["input_ids"])
        prompt = format_prompt(tokenizer, r["problem"], DEMO_PROMPT)
        assert prompt.endswith("<|assistant|><think>\n")
        assert demo_prompt_tokens(r["problem"]) == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])


def test_trace_mix_has_wrong_answers_and_length_to_lose(rows):
    stats = trace_stats(rows["sft_traces"])
    assert 0.05 < stats["slipped"] < 0.2
    by = stats["by_difficulty"]
    slipped = [by[d]["slipped"] for d in DIFFICULTIES]
    assert slipped == sorted(slipped)  # longer chains slip more often
    for d in DIFFICULTIES:
        assert by[d]["response_tokens_max"] >= 1.6 * by[d]["response_tokens_min"]  # verbosity varies
    # verbosity is independent of correctness: slipped and clean traces carry as much filler
    sft = rows["sft_traces"]
    clean = statistics.mean(r["filler_lines"] for r in sft if not r["slipped"])
    wrong = statistics.mean(r["filler_lines"] for r in sft if r["slipped"])
    assert abs(clean - wrong) < 0.1 * clean + 0.5
    # the sizes the demo recipe runs with fit the traces and the model
    recipe = {s["name"]: s for s in yaml.safe_load((recipes_dir() / "demo.yaml").read_text())["stages"]}
    limit = recipe["sft"]["data"]["max_seq_len"]
    assert stats["sequence_tokens_max"] <= limit <= DEMO_MODEL["max_position_embeddings"]
    longest = max(demo_token_count(r["response"]) for r in sft)
    assert longest + 1 <= recipe["rl1"]["rollout"]["max_tokens"]
