"""The shared readers and dict helpers: JSON lines (strict, or with a torn last line) and dotted keys."""

import pytest

from nemo_lead.config.dotted import MISSING, flatten, lookup
from nemo_lead.runtime.files import TornFileError, iter_jsonl, read_jsonl


def test_flatten_with_and_without_empty_sections():
    data = {"lead": {"alpha": 0.1, "rc": {}}, "steps": 5, "paths": {"a": {"b": None}}}
    assert flatten(data) == {"lead.alpha": 0.1, "steps": 5, "paths.a.b": None}
    assert flatten(data, keep_empty=True) == {"lead.alpha": 0.1, "lead.rc": {}, "steps": 5, "paths.a.b": None}
    assert flatten({}) == {} and flatten({"x": {}}) == {}


def test_lookup_follows_dots_unless_the_dotted_name_is_a_key():
    record = {"meta": {"answer": "7", "none": None}, "meta.answer": "column"}
    assert lookup(record, "meta.answer") == "column"
    assert lookup({"meta": {"answer": "7"}}, "meta.answer") == "7"
    assert lookup(record, "meta.none") is None
    assert lookup(record, "meta.nope") is MISSING and lookup(record, "meta.answer.x", 0) == 0


def test_iter_jsonl_names_file_line_and_column(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n\n[2]\n{"b":\n')
    with pytest.raises(ValueError, match=r"a\.jsonl:4: invalid JSON \(Expecting value at column 6\)$"):
        list(iter_jsonl(path))
    with pytest.raises(ValueError, match=r"a\.jsonl:4: .*only a torn last line"):  # a newline after it: not torn
        list(iter_jsonl(path, torn_last_line=True))
    path.write_text('{"a": 1}\n\n[2]\n{"b":')
    assert list(iter_jsonl(path, torn_last_line=True)) == [(1, {"a": 1}), (3, [2])]
    with pytest.raises(KeyError, match=r"a\.jsonl:3: expected a JSON object, got list"):
        list(iter_jsonl(path, objects=True, error=KeyError))


def test_read_jsonl_skips_only_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_jsonl(path) == []
    path.write_text('{"step": 1}\n{"step": 2}\n{"st')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(TornFileError, match=r"metrics\.jsonl:2: invalid JSON \(expected a metrics line\).*only a torn last"):
        read_jsonl(path, what="a metrics line")
