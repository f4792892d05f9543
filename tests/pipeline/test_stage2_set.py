"""The stage-2 set as the paper's: the extra problems (the authors' released stage-2/3 file) are deduplicated
by normalised problem text, and rows already in the user's stage-1 pool are not added again."""

import json

import pytest

from nemo_lead.data import load_problems, problem_key
from nemo_lead.pipeline.config import SelectConfig
from nemo_lead.pipeline.select import select_problems


def test_problem_key_ignores_spacing_and_case():
    assert problem_key("Let $A B C$ be  a\ttriangle.") == problem_key("let $ABC$ be a triangle.")
    assert problem_key("x + 1") != problem_key("x + 2")


def test_the_shipped_file_alone():
    # the shipped file's 3,453 rows hold 3,355 distinct problems: 98 rows repeat an earlier one (34 verbatim,
    # the others differ only in spacing such as `$ABC$` / `$A B C$`)
    rows = load_problems("lead_stage2")
    assert len(rows) == 3453
    assert len({" ".join(p.problem.split()) for p in rows}) == 3363  # whitespace runs collapsed only
    assert len({p.problem for p in rows}) == 3419
    assert len({problem_key(p.problem) for p in rows}) == 3355


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def low_accuracy_pool(tmp_path_factory):
    """A stage-1 pool holding the authors' own low-accuracy problems (pass_rate <= 0.75: 1,720 rows), under
    other ids and with other spacing, as a user's DeepScaleR file would hold them; plus two problems of
    their own."""
    rows = [{"id": f"s1/{i}", "problem": "  ".join(p.problem.split(" ")), "answer": p.answer}
            for i, p in enumerate(load_problems("lead_stage2")) if p.meta["pass_rate"] <= 0.75]
    rows += [{"id": "mine/0", "problem": "What is 2+3?", "answer": "5"},
             {"id": "mine/1", "problem": "What is 7*6?", "answer": "42"}]
    return _write(tmp_path_factory.mktemp("pool") / "stage1.jsonl", rows)


def test_extra_rows_in_the_pool_are_not_added_again(low_accuracy_pool):
    problems, report = select_problems(SelectConfig(problems=[low_accuracy_pool], extra=["lead_stage2"]))
    # 1,733 of the 3,453 rows are one of the pool's 1,661 distinct problems (the 1,720 rows and their
    # repeats), 26 more repeat an earlier extra row, 1,694 are new
    assert report == {"candidates": 1722, "selected": 1722, "extra": 3453, "extra_in_pool": 1733,
                      "extra_repeated": 26, "extra_kept": 1694, "total": 3416}
    assert len(problems) == 3416 and len({problem_key(p.problem) for p in problems[1722:]}) == 1694
    assert not {problem_key(p.problem) for p in problems[:1722]} & {problem_key(p.problem) for p in problems[1722:]}
    first_new = next(p for p in load_problems("lead_stage2") if p.meta["pass_rate"] > 0.75)
    assert problems[1722].id == first_new.id  # the extra rows keep their order


def test_extra_without_overlap_keeps_one_row_per_problem(tmp_path):
    pool = _write(tmp_path / "p.jsonl", [{"id": "a", "problem": "What is 2+3?", "answer": "5"}])
    problems, report = select_problems(SelectConfig(problems=[pool], extra=["lead_stage2"]))
    assert (report["extra_in_pool"], report["extra_repeated"], report["extra_kept"]) == (0, 98, 3355)
    assert report["total"] == 3356 == len(problems)
