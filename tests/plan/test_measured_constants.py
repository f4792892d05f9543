"""One rule for the plan's measured constants (`nemo_lead.plan.timing`): each is the figure of the latest run
bench/RESULTS.md records for it, cited by that run's date, commit, megatron-core version and GPU, in the
code (`timing.SOURCES`) and in the plan's output. Read from RESULTS.md's blocks here: a new GPU run that
records other figures fails this test until the constant (and, through test_doc_claims, the docs) follow."""

import re
from pathlib import Path

import pytest

from nemo_lead.plan import timing
from nemo_lead.plan.timing import ACTOR_GPU_RUN, ROLLOUT_GPU_RUN

ROOT = Path(__file__).resolve().parents[2]
RESULTS = (ROOT / "bench" / "RESULTS.md").read_text()


def block(tag: str) -> tuple[str, str]:
    """(the `tag` block of bench/RESULTS.md, the paragraph after it)."""
    inside = RESULTS.split(f"<!-- {tag} -->", 1)[1]
    body, after = inside.split(f"<!-- /{tag} -->", 1)
    return body, after.strip().split("\n\n", 1)[0]


def run_facts(tag: str) -> tuple[str, str, str, str]:
    """(date, GPU, commit, megatron-core) of the run a block records."""
    body, after = block(tag)
    date, gpu = re.search(r"; (\d{4}-\d\d-\d\d), (NVIDIA [^,]+),", body).groups()
    commit, mcore = re.search(r"Code measured: commit (\w+), megatron-core (\d+\.\d+\.\d+)", after).groups()
    return date, gpu, commit, mcore


@pytest.mark.parametrize("run", [ACTOR_GPU_RUN, ROLLOUT_GPU_RUN], ids=lambda r: r.record)
def test_each_run_cited_is_the_one_results_md_records(run):
    assert (run.date, run.gpu, run.commit, run.megatron_core) == run_facts(run.record)


def test_the_decode_figures_are_the_latest_rollout_runs():
    body, _ = block("rollout:gpu")
    weights, kv = map(float, re.search(r"Bytes read per step: ([\d.]+) GB weights \+ ([\d.]+) GB KV", body).groups())
    eager = float(re.search(r"\| eager steps \| \d+ \| ([\d.]+) \|", body).group(1))
    graphs, percent = re.search(r"\| CUDA graphs \| \d+ \| ([\d.]+) \| [\d.]+ \| \*\*([\d.]+)%\*\*", body).groups()
    assert timing.DECODE_BANDWIDTH_FRACTION == pytest.approx((weights + kv) * 1e9 / (float(graphs) * 1e-3) / 4.8e12)
    assert round(100 * timing.DECODE_BANDWIDTH_FRACTION, 1) == float(percent)
    assert timing.EAGER_HOST_S_PER_LAYER == pytest.approx((eager - float(graphs)) * 1e-3 / 28)


def test_the_update_figures_are_the_latest_actor_runs():
    body, _ = block("actor:gpu")
    rows = {int(t): int(f) for t, f in re.findall(r"^\| (\d+) \| \d+ \| [\d.]+ \| \d+ \| (\d+) \|", body, re.M)}
    assert rows == {4096: 366, 8192: 406}
    assert timing.UPDATE_PEAK_FRACTION == {t: pytest.approx(f / 989) for t, f in rows.items()}


def test_the_plan_prints_the_efficiencies_with_their_runs(capsys):
    from nemo_lead.cli import main

    assert main(["plan", "--command", "rl", "--gpus", "8", "--gpu", "h200", "--fastest", "0",
                 "job.actor.model=r1-distill-qwen-1.5b", "job.engine.kind=megatron"]) in (0, 1)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  efficiencies: "))
    assert ACTOR_GPU_RUN.cite() in line and ROLLOUT_GPU_RUN.cite() in line
    assert "9.8% of the HBM bound" in line and "2026-11-30" not in line
