"""`rollout.lag` and `rollout.generator_ranks` end to end on a tiny model (CPU, gloo), against the serial
emulation (`nemo_lead.training.rl.lag`), the oracle:

- lag 0 through the queue is the on-policy loop: the same run as phases 1-5 called at the start of each
  step, as `rl_step` did before the queue existed, and no key is added to metrics.jsonl;
- the split layout (1 trainer + 1 generator rank) equals the serial run bit for bit for k = 0, 1, 2:
  metrics (timing aside), validation, per-problem stats, every rollout and the final weights; lagged
  batches report their staleness (min(k, t - 1)) and a lag really changes what is sampled;
- slowing either side down (a sleep in the generator's sampling, or in the trainer's update) changes
  nothing and blocks nothing;
- kill -9 at a random moment of a lagged serial run and of a split run, then the same command again: the
  logs and final weights equal the uninterrupted run's (the queued batches came back from the checkpoint);
  SIGTERM stops a split run after a step with a checkpoint and exit 0 (the generators are drained and told
  to stop), and the rerun completes it the same way.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest
from distributed import run_distributed
from loops_common import interrupt, run_cli, strip_timing

pytestmark = pytest.mark.slow
STEPS = 6
SETTINGS = [f"steps={STEPS}", "save_every=2", "prompts_per_step=4", "rollout.n=4", "rollout.max_tokens=32",
            "actor.optim.lr=1e-3", "validation.every=3", "validation.n=2", "validation.limit=6",
            "rollout.temperature=1.0", "progress=none", "prompt.suffix="]
LOGS = ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl")


def _lag(k: int) -> list[str]:
    return [f"rollout.lag={k}", "lead.rollout_correction.mode=tis"] if k else []


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Problems a+b and an SFT checkpoint that answers some of them (groups with signal)."""
    from nemo_lead.models import write_tiny_model

    root = tmp_path_factory.mktemp("lag")
    model = write_tiny_model(root / "model", family="qwen2", seed=0)
    rng = random.Random(0)
    problems = []
    for i in range(240):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        problems.append({"id": f"p{i}", "problem": f"{a}+{b}", "answer": str(a + b)})
    traces = [{**p, "response": f"{p['problem']}={p['answer']}\n</think>\n\n\\boxed{{{p['answer']}}}"} for p in problems[:200]]
    for name, rows in (("traces.jsonl", traces), ("problems.jsonl", problems[:200]), ("val.jsonl", problems[200:])):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_cli(["sft", "--model", str(model), "--data", str(root / "traces.jsonl"), "--out", str(root / "sft"),
                "--steps", "80", "--save-every", "80", "global_batch=16", "data.max_seq_len=64", "actor.optim.lr=1e-2",
                "actor.optim.lr_warmup_steps=2", "actor.optim.min_lr=1e-3", "progress=none", "prompt.suffix="])
    assert res.returncode == 0, res.stderr
    return root, root / "sft" / "checkpoints" / "step_000080"


def _overrides(data, out: Path, extra=()) -> list[str]:
    root, ckpt = data
    return [f"actor.model={ckpt}", f"data.path={root / 'problems.jsonl'}", f"validation.data={root / 'val.jsonl'}",
            f"out={out}", *SETTINGS, *extra]


# ----------------------------------------------------------------------------- in-process runs
class _OnPolicy:
    """Phases 1-5 as rl_step called them before the queue: `select_groups` at the start of each step."""

    def __init__(self, *args, **kwargs):  # noqa: ARG002 - BatchQueue's signature
        pass

    def take(self, s, step):
        from nemo_lead.training.rl.phases import Batch, select_groups

        times = {"time/generate": 0.0, "time/verify": 0.0}
        seen, selected, rounds = select_groups(s, step, times)
        return Batch(step, step - 1, seen, selected, rounds, times)

    def after_update(self, s, step):  # noqa: ARG002
        return {}

    def loop_state(self, s):  # noqa: ARG002
        return {}

    def write_part(self, folder):
        pass

    def close(self):
        pass


def _rl_job(overrides: list[str], slow: str | None = None, on_policy: bool = False) -> None:
    """rl_job on this rank; `slow`: "generator" sleeps before sampling each batch, "trainer" before each update."""
    import nemo_lead.training.rl.loop as rl
    import nemo_lead.training.rl.split as split
    from nemo_lead.cli import resolve_config

    def sleepy(fn):
        def wrapped(*args, **kwargs):
            time.sleep(0.4)
            return fn(*args, **kwargs)
        return wrapped

    if slow == "generator":
        split.sample_batch = sleepy(split.sample_batch)
    elif slow == "trainer":
        rl.update_policy = sleepy(rl.update_policy)
    if on_policy:
        rl.BatchQueue = _OnPolicy
    rl.rl_job(resolve_config("rl", [], overrides))


def _serial(data, out: Path, k: int, **kwargs) -> Path:
    run_distributed(_rl_job, 1, _overrides(data, out, _lag(k)), timeout=600, **kwargs)
    return out


def _split(data, out: Path, k: int, **kwargs) -> Path:
    run_distributed(_rl_job, 2, _overrides(data, out, [*_lag(k), "rollout.generator_ranks=1"]), timeout=600, **kwargs)
    return out


@pytest.fixture(scope="module")
def serial(data, tmp_path_factory):
    """The serial emulation's run for lag k (each made once per module)."""
    runs: dict[int, Path] = {}

    def get(k: int) -> Path:
        if k not in runs:
            runs[k] = _serial(data, tmp_path_factory.mktemp(f"serial{k}"), k)
        return runs[k]
    return get


def _rows(run: Path, name: str) -> list[dict]:
    return strip_timing([json.loads(x) for x in (run / name).read_text().splitlines()])


def _same_weights_job(a: str, b: str) -> bool:
    import torch

    from nemo_lead.models import export_hf_weights
    from nemo_lead.models.weights_checkpoint import build_from_checkpoint
    from nemo_lead.parallel import destroy_parallel, init_parallel

    init_parallel(1, 1, seed=0)
    wa, wb = (dict(export_hf_weights(build_from_checkpoint(p)[0])) for p in (a, b))
    destroy_parallel()
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _assert_same_run(a: Path, b: Path) -> None:
    for name in LOGS:
        assert _rows(a, name) == _rows(b, name), name
    files = sorted(p.name for p in (b / "rollouts").iterdir())
    assert files == sorted(p.name for p in (a / "rollouts").iterdir()) and len(files) == STEPS
    for f in files:
        assert (a / "rollouts" / f).read_text() == (b / "rollouts" / f).read_text(), f
    final = f"checkpoints/step_{STEPS:06d}"
    assert run_distributed(_same_weights_job, 1, str(a / final), str(b / final))[0]


# ----------------------------------------------------------------------------- tests
def test_lag0_is_the_on_policy_loop(data, serial, tmp_path):
    out = tmp_path / "on_policy"
    run_distributed(_rl_job, 1, _overrides(data, out), on_policy=True, timeout=600)
    _assert_same_run(serial(0), out)
    rows = _rows(serial(0), "metrics.jsonl")
    assert not any(k.startswith("lag/") for k in rows[0]) and any(r["grad_norm"] for r in rows if not r["skipped"])


@pytest.mark.parametrize("k", [0, 1, 2])
def test_split_layout_equals_the_serial_emulation(data, serial, tmp_path, k):
    split = _split(data, tmp_path / "split", k)
    _assert_same_run(serial(k), split)
    rows = [json.loads(x) for x in (split / "metrics.jsonl").read_text().splitlines()]
    assert all(("time/wait_rollouts" in r, "time/send_weights" in r, "time/wait_weights" in r) == (True,) * 3 for r in rows)
    if k:
        assert [r["lag/staleness"] for r in rows] == [min(k, t - 1) for t in range(1, STEPS + 1)]
        assert all("rollout_correction/token_frac" in r for r in rows)
        lagged, on_policy = (_rows(serial(j), "problem_stats.jsonl") for j in (k, 0))
        assert lagged != on_policy  # older weights sampled other responses


@pytest.mark.parametrize("slow", ["generator", "trainer"])
def test_a_slow_side_changes_nothing(data, serial, tmp_path, slow):
    _assert_same_run(serial(1), _split(data, tmp_path / slow, 1, slow=slow))


def _cli(data, out: Path, extra=()) -> list[str]:
    return ["rl", *_overrides(data, out, [*extra, "progress=lines"])]  # lines: "resuming from" is printed


@pytest.mark.parametrize("k, split", [(2, False), (1, True)])
def test_a_lagged_run_resumes_exactly_after_kill(data, serial, tmp_path, k, split):
    out = tmp_path / "killed"
    args = _cli(data, out, [*_lag(k), *(["rollout.generator_ranks=1"] if split else [])])
    interrupt(args, out, after_lines=3)  # in step 4: the checkpoint of step 2 (holding B_3 .. B_(2+k)) is complete
    assert len(_rows(out, "metrics.jsonl")) < STEPS
    res = run_cli(args)
    assert res.returncode == 0 and "resuming from" in res.stderr, res.stderr
    _assert_same_run(serial(k), out)


def test_sigterm_stops_a_split_run_at_a_step_and_the_rerun_completes_it(data, serial, tmp_path):
    out = tmp_path / "stopped"
    args = _cli(data, out, [*_lag(2), "rollout.generator_ranks=1"])
    assert interrupt(args, out, after_lines=1, sig=signal.SIGTERM) == 0
    stopped_at = len(_rows(out, "metrics.jsonl"))
    assert stopped_at < STEPS and (out / "checkpoints" / f"step_{stopped_at:06d}" / "lag").is_dir()
    res = run_cli(args)
    assert res.returncode == 0, res.stderr
    _assert_same_run(serial(2), out)
