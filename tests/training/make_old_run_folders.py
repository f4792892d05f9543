"""Write the run folders tests/training/test_old_run_folders.py continues (fixtures/runs-2026-12-04): an SFT run
(4 of 6 steps) and an RL run (2 of 3 steps, rollout.lag=1 so that its checkpoint holds the lag queue), made with
paths relative to the folder given, so that a copy of it anywhere resumes with the same settings.

    python tests/training/make_old_run_folders.py FOLDER
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from loops_common import problem_row, rl_args, sft_args  # noqa: E402

from nemo_lead.models import write_tiny_model  # noqa: E402


def cli(root, args):
    r = subprocess.run([sys.executable, "-m", "nemo_lead.cli", *args], cwd=root, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode:
        raise SystemExit(r.stderr)


root = Path(sys.argv[1])
root.mkdir(parents=True)
write_tiny_model(root / "model", family="qwen2", seed=0)
rng = random.Random(0)
problems = [problem_row(rng, i) for i in range(240)]
traces = [{**p, "response": f"{p['problem']}={p['answer']}\n</think>\n\n\\boxed{{{p['answer']}}}"} for p in problems[:200]]
for name, rows in (("traces.jsonl", traces), ("problems.jsonl", problems[:200]), ("val.jsonl", problems[200:])):
    (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
cli(root, sft_args(Path("."), "model", "sft", steps=4, extra=["--save-every", "4"]))
cli(root, rl_args(Path("."), "model", "rl", steps=2, extra=["--save-every", "2", "rollout.lag=1", "lead.rollout_correction.mode=tis"]))
