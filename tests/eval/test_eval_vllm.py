"""`nemo-lead eval` and the distill stage's sampling on the `vllm` engine (vLLM's CPU build: the vllm leg; skipped
where vLLM is not installed, an error with NEMO_LEAD_REQUIRE_VLLM=1).

One process (vLLM keeps process-wide state), the tiny Qwen2 at hidden 128 (head size 32, the CPU attention's
smallest), 6 problems x 3 samples of at most 12 tokens:
- calls of 2 sequences and one call of all 18 write the same files byte for byte: every sample is a request of
  its own, seeded from (its problem's seed, its index), so vLLM's scheduler may batch it with anything. (On
  a GPU vLLM's kernels may round differently at another batch size, so a near tie may flip a token there;
  on this CPU build and fp32 they do not, which is what is checked.)
- rounds ([1]: sample 0, then the other two only where it is wrong; a stand-in grade marks a third of the
  responses correct) write exactly the one-call run's lines for the samples they draw, and draw the other
  two samples for exactly the problems whose sample 0 is wrong: the same first correct sample per problem,
  so the same traces for keep: first.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from distributed import run_distributed

from nemo_lead.models import write_tiny_model

try:
    from nemo_lead.generation.vllm_engine import vllm_importable

    HAVE_VLLM = vllm_importable()
except Exception:  # pragma: no cover - a broken install reads as absent; the required leg then fails below
    HAVE_VLLM = False

if not HAVE_VLLM and os.environ.get("NEMO_LEAD_REQUIRE_VLLM") == "1":
    raise RuntimeError("NEMO_LEAD_REQUIRE_VLLM=1 but vLLM does not import here (scripts/setup_venv.sh vllm)")
pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (the vllm leg runs these)")

N, PROBLEMS = 3, 6


def _runs_job(model: str, data: str, root: str) -> dict:
    from nemo_lead.cli import main
    from nemo_lead.eval.runner import Grader

    real = Grader._grade

    def grade(self, texts, golds, finished):  # a third of the responses "correct", deterministically
        return [dataclasses.replace(g, correct=sum(map(ord, t)) % 3 == 0) for g, t in zip(real(self, texts, golds, finished), texts)]

    Grader._grade = grade
    out = {}
    for name, extra in (("calls-of-2", ["call_sequences=2"]), ("one-call", ["call_sequences=64"]),
                        ("rounds", ["call_sequences=4", "rounds=[1]"])):
        folder = Path(root) / name
        status = main(["eval", f"model={model}", f"data={data}", f"out={folder}", f"sampling.n={N}",
                       "sampling.max_tokens=12", "engine.kind=vllm", "engine.max_batch_size=8", "verify.workers=1",
                       "progress=none", "plot=false", *extra])
        out[name] = (status, {f: (folder / f).read_bytes() for f in ("samples.jsonl", "summary.json")})
    return out


def test_vllm_samples_do_not_depend_on_the_calls_and_rounds_draw_only_what_they_need(tmp_path):
    model = write_tiny_model(tmp_path / "qwen2", "qwen2", seed=3, init_std=0.1, hidden_size=128,
                             tie_word_embeddings=False)
    data = tmp_path / "six.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i}*{i}", "answer": str(i * i)}) + "\n"
                            for i in range(PROBLEMS)))
    (runs,) = run_distributed(_runs_job, 1, str(model), str(data), str(tmp_path / "runs"), timeout=400)
    assert {name: status for name, (status, _) in runs.items()} == {"calls-of-2": 0, "one-call": 0, "rounds": 0}
    assert runs["calls-of-2"][1] == runs["one-call"][1]  # samples.jsonl and summary.json, byte for byte

    def lines(name):
        rows = [json.loads(line) for line in runs[name][1]["samples.jsonl"].decode().splitlines()]
        return {(r["problem_id"], r["sample"]): r for r in rows}

    every, drawn = lines("one-call"), lines("rounds")
    assert all(every[key] == row for key, row in drawn.items())
    unsolved = {pid for (pid, s), r in every.items() if s == 0 and not r["correct"]}
    assert 0 < len(unsolved) < PROBLEMS
    assert set(drawn) == {(f"p{i}", 0) for i in range(PROBLEMS)} | {(p, s) for p in unsolved for s in range(1, N)}
