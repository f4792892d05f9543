"""`nemo-lead prepare deepscaler SRC --out DIR` on a small release in the authors' format (JSON lists per file)."""

import json

from nemo_lead.cli import main
from nemo_lead.data import load_problems
from nemo_lead.data.deepscaler import AUTHORS_FILES


def _release(folder):
    folder.mkdir()
    rows = {
        "amc": [{"problem": "1+1?", "answer": "2", "difficulty": 1.0},
                {"problem": "x^2=4, x>0?", "answer": "2", "difficulty": 2.5},
                {"problem": "no rating", "answer": "3"}],
        "omni_math": [{"problem": "hard", "answer": "\\frac{1}{2}", "difficulty": 6.5},
                      {"problem": "words", "answer": "the set of all primes", "difficulty": 4.0}],
        "aime": [{"problem": "aime", "answer": 25, "difficulty": 3.5}, {"problem": "", "answer": "1", "difficulty": 5}],
        "still": [],
        "math": [{"problem": "m", "answer": "7", "difficulty": 1.5}],
    }
    for name, records in rows.items():
        (folder / f"{name}.json").write_text(json.dumps(records))
    (folder / "olympiad.json").write_text(json.dumps([{"problem": "left out", "answer": "1", "difficulty": 9}]))
    return folder


def test_prepare_writes_the_recipes_file_and_counts(tmp_path, capsys):
    src, out = _release(tmp_path / "train"), tmp_path / "data"
    assert main(["prepare", "deepscaler", str(src), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "amc.json: 3 read, 1 without a difficulty, 0 without a problem or answer, 2 kept" in text
    assert "aime.json: 2 read, 0 without a difficulty, 1 without a problem or answer, 1 kept" in text
    assert "6 of 8 written" in text
    counts = json.loads((out / "counts.json").read_text())
    assert counts["bounds"] == {"difficulty > 1 (sft_problems)": 5, "difficulty >= 2.5 (stage1_data, the paper)": 4,
                                "difficulty >= 3.5 (the authors' code)": 3,
                                "difficulty >= 3.5 and an evaluable answer (the authors' stage1_data)": 2}
    problems = load_problems(out / "deepscaler.jsonl")  # what paths.deepscaler reads
    assert [p.id for p in problems] == ["amc/0", "amc/1", "omni_math/0", "omni_math/1", "aime/0", "math/0"]
    assert problems[4].answer == "25" and problems[4].meta["difficulty"] == 3.5
    assert "left out" not in (out / "deepscaler.jsonl").read_text()  # olympiad.json is not read
    assert list(AUTHORS_FILES) == ["amc", "omni_math", "aime", "still", "math"]


def test_a_missing_file_is_named(tmp_path, capsys):
    src = _release(tmp_path / "train")
    (src / "still.json").unlink()
    assert main(["prepare", "deepscaler", str(src), "--out", str(tmp_path / "d")]) == 2
    assert "no still.json" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
