"""load_problems: shipped sets, file formats, field mapping, ids, and errors that name the file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemo_lead.data import BUILTIN_DATASETS, DataError, Problem, builtin_path, load_problems

FIXTURES = Path(__file__).parent / "fixtures"  # written by `datasets` 5.2 save_to_disk


def write_jsonl(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    for lineno, text in (raw_lines or {}).items():
        lines.insert(lineno - 1, text)
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- shipped sets
@pytest.mark.parametrize("name, rows", [("aime24", 30), ("aime25", 30), ("math500", 500), ("lead_stage2", 3453)])
def test_shipped_sets_load_with_their_row_counts(name, rows):
    problems = load_problems(name)
    assert len(problems) == rows
    assert len({p.id for p in problems}) == rows
    assert all(p.problem.strip() and p.answer.strip() for p in problems)


@pytest.mark.parametrize("name, year", [("aime24", "2024"), ("aime25", "2025")])
def test_aime_answers_are_unpadded_integers_and_ids_follow_the_source(name, year):
    problems = load_problems(name)
    for p in problems:
        assert re.fullmatch(r"0|[1-9][0-9]{0,2}", p.answer), p.answer
        m = re.fullmatch(rf"AIME {year} (I|II) #(\d+)", p.meta["source"])
        assert m and p.id == f"{year}-{m[1]}-{m[2]}"
    assert sum(p.id.startswith(f"{year}-I-") for p in problems) == 15


def test_math500_keeps_subject_level_and_solution():
    problems = load_problems("math500")
    first = problems[0]
    assert first.id == "test/precalculus/807.json"
    assert first.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first.meta["subject"] == "Precalculus" and first.meta["level"] == 2
    assert "\\boxed" in first.meta["solution"]
    assert {p.meta["level"] for p in problems} == {1, 2, 3, 4, 5}


def test_lead_stage2_rows_have_rates_and_index_ids():
    problems = load_problems("lead_stage2")
    assert problems[17].id == "lead_stage2/17"
    assert all(0 < p.meta["pass_rate"] <= 1 and 1 <= p.meta["difficulty"] <= 10 for p in problems)
    assert sum("solution" in p.meta for p in problems) == 1485


def test_sources_md_names_every_shipped_file_with_its_row_count():
    files_dir = builtin_path("aime24").parent
    sources = (files_dir / "SOURCES.md").read_text()
    shipped = sorted(f.name for f in files_dir.glob("*.jsonl"))
    assert shipped == sorted(BUILTIN_DATASETS.values())
    for name in shipped:
        rows = sum(1 for line in (files_dir / name).read_text().splitlines() if line.strip())
        assert re.search(rf"\| `{re.escape(name)}` \| {rows:,} \|", sources), name


def test_limit_keeps_the_first_rows():
    assert [p.id for p in load_problems("aime25", limit=2)] == ["2025-I-1", "2025-I-2"]
    with pytest.raises(ValueError, match="limit"):
        load_problems("aime25", limit=0)


def test_unknown_name_suggests_the_nearest_builtin():
    with pytest.raises(DataError, match="unknown dataset 'math5'.*did you mean 'math500'"):
        load_problems("math5")


# ----------------------------------------------------------------------------- JSONL and JSON
def test_jsonl_fields_ids_and_meta(tmp_path):
    path = write_jsonl(
        tmp_path / "set.jsonl",
        [
            {"problem": "p0", "answer": "1", "difficulty": 3.0},
            {"problem": "p1", "answer": 42, "id": 7},
            {"problem": "p2", "answer": 5.0},
        ],
        raw_lines={2: "   "},  # blank lines are skipped but still counted for line numbers
    )
    problems = load_problems(path)
    assert problems == [
        Problem(id="set/0", problem="p0", answer="1", meta={"difficulty": 3.0}),
        Problem(id="7", problem="p1", answer="42", meta={}),
        Problem(id="set/2", problem="p2", answer="5", meta={}),
    ]
    assert load_problems(path, name="mine")[0].id == "mine/0"


@pytest.mark.parametrize(
    "rows, raw, message",
    [
        ([{"problem": "a", "answer": "1"}, {"problem": "b"}], None,
         "set.jsonl:2: missing field 'answer' or 'final_answer' or 'reward_model.ground_truth'"),
        ([{"problem": "a", "answer": "1"}], {2: "", 3: "{not json"}, r"set.jsonl:3: invalid JSON"),
        ([{"problem": "a", "answer": "1"}], {2: "[1, 2]"}, "set.jsonl:2: expected a JSON object, got list"),
        ([{"answer": "1"}], None, "set.jsonl:1: missing field 'problem' or 'question' or 'prompt'"),
        ([{"problem": "a", "answer": ["1"]}], None, "set.jsonl:1: field 'answer' must be a string or a number"),
        ([{"problem": "a", "answer": "  "}], None, "set.jsonl:1: field 'answer' is empty"),
        ([{"problem": 3, "answer": "1"}], None, "set.jsonl:1: field 'problem' is not a non-empty problem text"),
        ([{"problem": "a", "answer": "1", "id": [1]}], None, "set.jsonl:1: field 'id' must be a string or an integer"),
        ([{"problem": "a", "answer": "1", "id": "x"}, {"problem": "b", "answer": "2", "id": "x"}], None,
         r"set.jsonl:2: duplicate id 'x' \(first at .*set.jsonl:1\)"),
        ([], None, "no problems"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, rows, raw, message):
    path = write_jsonl(tmp_path / "set.jsonl", rows, raw)
    with pytest.raises(DataError, match=message):
        load_problems(path)


def test_field_mapping_and_fallback_names(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"q": "What?", "gt": "3", "uid": "a-1", "answer": "not this"}])
    [p] = load_problems(path, fields={"problem": "q", "answer": "gt", "id": "uid"})
    assert (p.id, p.problem, p.answer, p.meta) == ("a-1", "What?", "3", {"answer": "not this"})
    # the default names tried in order: question / final_answer / unique_id
    path = write_jsonl(tmp_path / "r.jsonl", [{"question": "Q", "final_answer": "4", "unique_id": "u"}])
    assert load_problems(path) == [Problem(id="u", problem="Q", answer="4")]
    # an explicitly mapped column must exist: no silent fallback to the default names
    with pytest.raises(DataError, match="r.jsonl:1: missing field 'gt'"):
        load_problems(path, fields={"answer": "gt"})
    with pytest.raises(ValueError, match="unknown field role 'questin'"):
        load_problems(path, fields={"questin": "q"})


def test_verl_style_rows_chat_prompt_and_nested_answer(tmp_path):
    row = {
        "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Solve 2+2."}],
        "reward_model": {"ground_truth": "4", "style": "rule"},
        "data_source": "x",
    }
    [p] = load_problems(write_jsonl(tmp_path / "v.jsonl", [row]))
    assert (p.problem, p.answer, p.meta) == ("Solve 2+2.", "4", {"data_source": "x"})


def test_json_list_file(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps([{"problem": "a", "answer": "1"}, {"problem": "b", "answer": "2"}]))
    assert [p.answer for p in load_problems(path)] == ["1", "2"]
    path.write_text(json.dumps([{"problem": "a", "answer": "1"}, {"problem": "b"}]))
    with pytest.raises(DataError, match=r"train.json \(row 1\): missing field 'answer'"):
        load_problems(path)
    path.write_text(json.dumps({"problem": "a"}))
    with pytest.raises(DataError, match="expected a JSON list of objects"):
        load_problems(path)


def test_unknown_file_type(tmp_path):
    path = tmp_path / "set.csv"
    path.write_text("problem,answer\n")
    with pytest.raises(DataError, match="unknown file type '.csv'"):
        load_problems(path)


# ----------------------------------------------------------------------------- Parquet and datasets folders
def test_parquet_file(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"question": ["a", "b"], "answer": ["1", None], "level": [1, 2]}), path)
    with pytest.raises(DataError, match=r"t.parquet \(row 1\): missing field 'answer'"):
        load_problems(path)
    pq.write_table(pa.table({"question": ["a", "b"], "answer": ["1", "2"], "level": [1, 2]}), path)
    assert load_problems(path) == [
        Problem(id="t/0", problem="a", answer="1", meta={"level": 1}),
        Problem(id="t/1", problem="b", answer="2", meta={"level": 2}),
    ]


def test_parquet_folder_with_splits(tmp_path):
    data = tmp_path / "hub" / "data"
    data.mkdir(parents=True)
    pq.write_table(pa.table({"problem": ["a", "b"], "answer": ["1", "2"]}), data / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"problem": ["c"], "answer": ["3"]}), data / "train-00001-of-00002.parquet")
    pq.write_table(pa.table({"problem": ["t"], "answer": ["9"]}), data / "test-00000-of-00001.parquet")
    with pytest.raises(DataError, match=r"holds several splits \(test, train\)"):
        load_problems(tmp_path / "hub")
    train = load_problems(tmp_path / "hub", split="train")
    assert [(p.id, p.answer) for p in train] == [("hub-train/0", "1"), ("hub-train/1", "2"), ("hub-train/2", "3")]
    assert [p.answer for p in load_problems(tmp_path / "hub", split="test")] == ["9"]
    with pytest.raises(DataError, match="no split 'validation'"):
        load_problems(tmp_path / "hub", split="validation")


def test_datasets_save_to_disk_folder():
    problems = load_problems(FIXTURES / "hf_dataset")
    assert problems == [
        Problem(id="7", problem="What is 1+1?", answer="2", meta={"level": 1}),
        Problem(id="8", problem="What is 2*3?", answer="6", meta={"level": 2}),
        Problem(id="9", problem="What is 10/4?", answer="\\frac{5}{2}", meta={"level": 3}),
    ]
    with pytest.raises(DataError, match="single-split"):
        load_problems(FIXTURES / "hf_dataset", split="train")


def test_datasets_dict_folder_needs_a_split_and_extracts_boxed_answers():
    with pytest.raises(DataError, match=r"holds several splits \(train, test\)"):
        load_problems(FIXTURES / "hf_dataset_dict")
    train = load_problems(FIXTURES / "hf_dataset_dict", split="train")
    # no answer column: the last \boxed{} of the solution is the answer; the solution stays in meta
    assert [p.answer for p in train] == ["7", "-4", "\\frac{3}{2}"]
    assert train[0].id == "hf_dataset_dict-train/0"
    assert train[0].meta["solution"] == "We add: $3+4=\\boxed{7}$."
    assert [p.answer for p in load_problems(FIXTURES / "hf_dataset_dict", split="test")] == ["32", "0"]


def test_solution_without_a_boxed_answer_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [{"problem": "a", "solution": "the answer is 3"}])
    with pytest.raises(DataError, match=r"s.jsonl:1: missing field .*no \\boxed\{\} answer in field 'solution'"):
        load_problems(path)


def test_json_lines_in_a_json_file_get_a_hint(tmp_path):
    from nemo_lead.data import DataError

    f = tmp_path / "rows.json"
    f.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n')
    with pytest.raises(DataError, match=r"rows.json:2: invalid JSON \(Extra data at column 1\); one JSON object per line is JSON Lines: name the file .jsonl"):
        load_problems(str(f))
