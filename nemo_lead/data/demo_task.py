"""The embedded demo task: chains of one-digit additions and subtractions, with R1-format traces.

`nemo-lead demo` trains a tiny model from random initialisation through the whole pipeline (SFT, RL stage 1,
RL stage 2, evaluation) on a CPU in minutes, so the task must be learnable by a ~1M-parameter model with a
character vocabulary, have exact answers the project's verifier grades, and leave RL both accuracy to gain
and length to lose.

Problems: `3+5-2+7-4`, one-digit operands, 2 to 6 of them, drawn so that every running value stays in
`VALUE_RANGE` (0-9: a ~1M-parameter model learns the ~110 one-digit facts in minutes; chains whose running
values reach two digits need many more facts and were far from learned in the same budget). The difficulty
is the number of operands (2..6), so the paper's stage-1 filter (`difficulty: ">= 2.5"`) keeps
chains of three or more. The prompt is the problem followed by `DEMO_PROMPT.suffix`.

Trace (the response, which starts inside the think block the chat template opened): the problem restated,
then the chain rewritten one operation at a time, each line the line above with its first two operands
replaced by their result, down to the answer; then the think block closes and the answer is boxed:

    3+5-2+7-4
    8-2+7-4
    Wait, let me check.
    6+7-4
    ...
    9
    </think>

    \boxed{9}

Every state is computed from the state just above it, so no value is carried across other text but the
filler. The filler is a constant line (`DEMO_FILLER`, one token) that carries no value: it cannot be
copied wrong, and skipping it costs the next line two tokens of distance. That keeps verbosity harmless to
accuracy (docs/design.md, "a trap for the ablation"; restating the state instead was not harmless: each
restatement is one more copy that can go wrong and the error propagates). Each trace draws a verbosity
level and each state gets 0-`MAX_FILLERS` filler lines at that level, independently of correctness, so
only a length-aware reward has a reason to shorten traces.

Wrong traces: each step slips with probability `slip_prob` (its result off by 1 or 2); later steps
continue from the slipped value, so the boxed answer is wrong. Longer chains slip more often, as harder
problems do. The SFT rows keep the true answer in "answer" (a slipped trace is a wrong trace, not a
relabelled problem).

Files (`write_demo_data`): `sft_traces.jsonl` ({"id", "problem", "response", "answer"} plus "difficulty",
"filler_lines", "slipped"), `rl_stage1.jsonl` and `rl_stage2_extra.jsonl` ({"id", "problem", "answer",
"difficulty"}), `heldout.jsonl` (the same fields, an equal number per difficulty). The problem sets are
pairwise disjoint; SFT traces share no problem with any of them (a short chain may appear in several SFT
traces: there are only 99 chains of two operands). Everything comes from `seed` alone, in about a second.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from nemo_lead.data.prompts import PromptConfig

DEMO_PROMPT = PromptConfig(suffix="=?")  # every character is a token: the shortest instruction that reads
DEMO_FILLER = "Wait, let me check."  # a filler line; one token
BOXED = "\\boxed{"
DEMO_EXTRA_TOKENS = (BOXED, DEMO_FILLER)  # for nemo_lead.models.tiny.char_tokenizer / write_tiny_model

DIFFICULTIES = (2, 3, 4, 5, 6)  # operands per chain
VALUE_RANGE = (0, 9)  # every running value of a chain stays in this range
VERBOSITY_LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)  # per trace: chance of each of the filler lines a state may get
MAX_FILLERS = 3  # per state; far below the stage-2 repetition detector's 10 identical chunks
SLIP_PROB = 0.04  # per step of an SFT trace
SLIP_DELTAS = (-2, -1, 1, 2)

# The files' sizes and difficulty mixes (weights over DIFFICULTIES).
SFT_TRACES = 8000
SFT_WEIGHTS = (1, 2, 3, 3, 1)
RL_STAGE1_PROBLEMS = 2000
RL_STAGE1_WEIGHTS = (0, 2, 3, 3, 1)  # already past the paper's stage-1 filter (difficulty >= 2.5)
RL_STAGE2_EXTRA_PROBLEMS = 500
RL_STAGE2_EXTRA_WEIGHTS = (0, 0, 0, 1, 2)  # the hard end, as the paper's extra set
HELDOUT_PER_DIFFICULTY = 32

# The recommended model: HF config overrides of conf/model/tiny-qwen2.yaml for write_tiny_model
# (`extra_tokens=DEMO_EXTRA_TOKENS`). A plain-PyTorch prototype of a 0.82M-parameter GPT (d 128, 4 layers,
# 4 heads, 4x GELU MLP) learned chains of one-digit operands in minutes of SFT on one CPU thread
# (docs/design.md, "Facts measured on the CPU machines"); a SwiGLU MLP of 352 has about the same parameter count (0.83M with the ~104-token vocabulary). Prompt plus the longest gold trace stay under
# 110 tokens.
DEMO_MODEL: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}

_MULTI_CHAR_TOKENS = re.compile("|".join(re.escape(t) for t in (
    "<|endoftext|>", "<|user|>", "<|assistant|>", "<think>", "</think>", *DEMO_EXTRA_TOKENS)))
_CHAIN = re.compile(r"(-?\d+)((?:[+-]\d+)*)")
_OPERATION = re.compile(r"([+-])(\d+)")


# ----------------------------------------------------------------------------- problems and solutions
def make_problem(rng: random.Random, operands: int, value_range: tuple[int, int] = VALUE_RANGE) -> str:
    """A random chain of `operands` one-digit numbers joined by + and -, e.g. "3+5-2", whose running value
    stays within `value_range` (each step drawn uniformly among the operations that keep it there)."""
    if operands < 2:
        raise ValueError(f"a chain needs at least 2 operands, got {operands}")
    lo, hi = value_range
    value = rng.randint(max(1, lo), min(9, hi))
    text = str(value)
    for _ in range(operands - 1):
        moves = [(op, b) for op in "+-" for b in range(10) if lo <= (value + b if op == "+" else value - b) <= hi]
        op, b = rng.choice(moves)
        value = value + b if op == "+" else value - b
        text += op + str(b)
    return text


def _parse(chain: str) -> tuple[list[int], list[str]]:
    m = _CHAIN.fullmatch(chain)
    if m is None:
        raise ValueError(f"not a +/- chain of integers: {chain!r}")
    rest = _OPERATION.findall(m.group(2))
    return [int(m.group(1))] + [int(v) for _, v in rest], [op for op, _ in rest]


def _render(values: Sequence[int], ops: Sequence[str]) -> str:
    return str(values[0]) + "".join(op + str(v) for op, v in zip(ops, values[1:]))


def solution_states(problem: str, slips: Mapping[int, int] | None = None) -> list[str]:
    """The chain after each step, from the problem itself to the final number. `slips` maps a step index
    to an error added to that step's result (later steps continue from the wrong value)."""
    values, ops = _parse(problem)
    states = [problem]
    for step in range(len(ops)):
        a, b = values[0], values[1]
        result = a + b if ops[0] == "+" else a - b
        result += (slips or {}).get(step, 0)
        values, ops = [result, *values[2:]], ops[1:]
        states.append(_render(values, ops))
    return states


def answer_of(problem: str) -> str:
    """The exact answer of a chain, as the verifier's gold string."""
    return solution_states(problem)[-1]


def render_trace(states: Sequence[str], fillers: Sequence[int]) -> str:
    """The response text: each state on its own line (the problem first), each followed by fillers[i]
    filler lines, then the boxed final state."""
    lines = []
    for state, repeat in zip(states, fillers):
        lines += [state] + [DEMO_FILLER] * repeat
    return "\n".join(lines) + f"\n</think>\n\n{BOXED}{states[-1]}}}"


def make_trace(problem: str, rng: random.Random, *, slip_prob: float = SLIP_PROB,
               verbosity: float | None = None) -> dict[str, Any]:
    """One SFT trace of `problem`: {"response", "boxed", "slipped", "filler_lines", "verbosity"}.
    `verbosity` (the chance of each filler line) is drawn from VERBOSITY_LEVELS when not given."""
    steps = len(_parse(problem)[1])
    slips = {s: rng.choice(SLIP_DELTAS) for s in range(steps) if rng.random() < slip_prob}
    states = solution_states(problem, slips)
    if verbosity is None:
        verbosity = rng.choice(VERBOSITY_LEVELS)
    fillers = [sum(rng.random() < verbosity for _ in range(MAX_FILLERS)) for _ in states]
    return {"response": render_trace(states, fillers), "boxed": states[-1], "slipped": bool(slips),
            "filler_lines": sum(fillers), "verbosity": verbosity}


# ----------------------------------------------------------------------------- the demo's files
def _draw(rng: random.Random, weights: Sequence[float]) -> int:
    return rng.choices(DIFFICULTIES, weights=weights)[0]


def _unique_problems(rng: random.Random, counts: Mapping[int, int], taken: set[str]) -> list[str]:
    """counts[d] problems of each difficulty d, none in `taken` (which gains them), in a shuffled order."""
    out: list[str] = []
    for d, n in counts.items():
        tries = 0
        while n > 0:
            p = make_problem(rng, d)
            tries += 1
            if tries > 10_000 + 100 * n:
                raise ValueError(f"cannot draw enough distinct chains of {d} operands (asked for more)")
            if p not in taken:
                taken.add(p)
                out.append(p)
                n -= 1
    rng.shuffle(out)
    return out


def _mix(rng: random.Random, total: int, weights: Sequence[float]) -> dict[int, int]:
    counts = dict.fromkeys(DIFFICULTIES, 0)
    for _ in range(total):
        counts[_draw(rng, weights)] += 1
    return counts


def _problem_rows(prefix: str, problems: Iterable[str]) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i:05d}", "problem": p, "answer": answer_of(p), "difficulty": len(_parse(p)[0])}
            for i, p in enumerate(problems)]


def demo_rows(seed: int = 0, *, sft_traces: int = SFT_TRACES, rl_stage1: int = RL_STAGE1_PROBLEMS,
              rl_stage2_extra: int = RL_STAGE2_EXTRA_PROBLEMS,
              heldout_per_difficulty: int = HELDOUT_PER_DIFFICULTY) -> dict[str, list[dict[str, Any]]]:
    """The rows of the demo's four files (see the module docstring), from `seed` alone.

    Drawn in a fixed order (held-out set, stage-2 extra, stage 1, SFT), each excluding what came before, so
    the evaluation set is the same for any sizes of the training sets."""
    rng = random.Random(f"nemo-lead-demo-{seed}")
    taken: set[str] = set()
    heldout = _unique_problems(rng, dict.fromkeys(DIFFICULTIES, heldout_per_difficulty), taken)
    heldout.sort(key=lambda p: len(p))  # grouped by difficulty, for readable evaluation tables
    extra = _unique_problems(rng, _mix(rng, rl_stage2_extra, RL_STAGE2_EXTRA_WEIGHTS), taken)
    stage1 = _unique_problems(rng, _mix(rng, rl_stage1, RL_STAGE1_WEIGHTS), taken)
    sft = []
    for i in range(sft_traces):
        problem = make_problem(rng, _draw(rng, SFT_WEIGHTS))
        while problem in taken:  # SFT may repeat a chain, but never one of the problem sets'
            problem = make_problem(rng, len(_parse(problem)[0]))
        trace = make_trace(problem, rng)
        sft.append({"id": f"demo-sft-{i:05d}", "problem": problem, "response": trace["response"],
                    "answer": answer_of(problem), "difficulty": len(_parse(problem)[0]),
                    "filler_lines": trace["filler_lines"], "slipped": trace["slipped"]})
    return {
        "sft_traces": sft,
        "rl_stage1": _problem_rows("demo-rl1", stage1),
        "rl_stage2_extra": _problem_rows("demo-rl2x", extra),
        "heldout": _problem_rows("demo-eval", heldout),
    }


def write_demo_data(folder: str | Path, seed: int = 0, **sizes: int) -> dict[str, Path]:
    """Write the demo's JSONL files into `folder` and return {name: path} (names: sft_traces, rl_stage1,
    rl_stage2_extra, heldout). `sizes` are demo_rows' keyword arguments."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in demo_rows(seed, **sizes).items():
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths[name] = path
    return paths


# ----------------------------------------------------------------------------- sanity statistics
def demo_token_count(text: str) -> int:
    """Tokens of `text` under the tiny model's character tokenizer with DEMO_EXTRA_TOKENS: one per
    character, except that special tokens, `\\boxed{` and the filler marker count one each."""
    return len(_MULTI_CHAR_TOKENS.sub("x", text))


def demo_prompt_tokens(problem: str) -> int:
    """Prompt tokens under the tiny model's chat template: `<|user|>`, the problem and the suffix,
    `<|assistant|>`, `<think>`, newline."""
    return 4 + demo_token_count(DEMO_PROMPT.prefix + problem + DEMO_PROMPT.suffix)


def trace_stats(rows: Sequence[Mapping[str, Any]],
                count_tokens: Callable[[str], int] = demo_token_count) -> dict[str, Any]:
    """The mix of a list of SFT rows: share of slipped traces, filler and response lengths (tokens), the
    longest prompt + response + eos, overall and by difficulty."""
    def summary(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        lengths = sorted(count_tokens(r["response"]) for r in group)
        return {
            "traces": len(group),
            "slipped": mean(bool(r["slipped"]) for r in group),
            "filler_lines": mean(r["filler_lines"] for r in group),
            "response_tokens_mean": mean(lengths),
            "response_tokens_min": lengths[0],
            "response_tokens_p90": lengths[int(0.9 * (len(lengths) - 1))],
            "response_tokens_max": lengths[-1],
            "sequence_tokens_max": max(demo_prompt_tokens(r["problem"]) + count_tokens(r["response"]) + 1
                                       for r in group),
        }

    if not rows:
        raise ValueError("trace_stats needs at least one row")
    by_difficulty = {}
    for d in sorted({r["difficulty"] for r in rows}):
        by_difficulty[d] = summary([r for r in rows if r["difficulty"] == d])
    return {**summary(rows), "by_difficulty": by_difficulty}
