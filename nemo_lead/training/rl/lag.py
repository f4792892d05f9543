"""Off-policy RL with a fixed lag k (`rollout.lag`): which weights sample which step's rollouts, the queue of
batches sampled ahead, and the queue's place in the checkpoint.

Weights W_s are the actor's after s optimizer steps (W_0 the starting ones). Step t (t = 1, 2, ...) trains on
batch B_t (`phases.Batch`): its prompts, responses, grades, rewards and keep mask (`phases.select_groups`, phases 1-5). The rule,
one line: at the start of step t, every batch up to B_min(t+k, steps) that does not exist yet is sampled
with the current weights W_(t-1). So B_t comes from W_max(0, t-1-k): at most k steps old, by a rule that
reads nothing but t and k (never "the newest weights available"), so what a run computes does not depend
on timing. k = 0 samples B_t at the start of step t with W_(t-1): the paper's on-policy loop, unchanged
(no key is added to metrics.jsonl). Prompts and sampling seeds are functions of (seed, t, round) and the
data order as before; the data order simply advances when a batch is sampled, k steps early.

Two layouts fill the queue the same way:
- serial (`BatchQueue`, colocated, the default): the loop samples the batches itself with the engine on
  the live actor weights. Nothing is copied: "W_(t-1) samples B_(t+k)" holds because B_(t+k) is sampled
  at the start of step t. This is the oracle the split layout is tested against.
- split (`nemo_lead.training.rl.split`, `rollout.generator_ranks`): generator ranks sample B_j with the
  weights the trainers sent them, while the trainers train; `take` then receives instead of sampling.

The loss for lagged samples is decoupled PPO: the clipped ratio is taken against the proximal policy
pi_prox (the actor's log-probs before the update: the old-log-prob pass, which a lag always recomputes,
`loop.old_logprobs_from_update`), and each token's term is weighted by pi_prox / mu, mu being the engine's
log-probs of the weights that sampled it, truncated or masked as `lead.rollout_correction` says (a lag
requires a mode other than none). The mismatch metric (`mismatch/logprob_abs_mean`) then measures the
policy's drift over the lag plus the engine / actor numeric gap; `rollout_correction/token_frac` the share
of truncated (or masked) weights; `lag/staleness` = (t - 1) - version, how many steps old the batch's
weights were (k once the queue is full).

Exact resume: a checkpoint after step t holds, besides the weights, optimizer, RNG and data position, the
batches B_(t+1) .. B_min(t+k, steps) with their versions (`lag/batches.pt` in the checkpoint folder, meta.json's
loop state "lag"). They were sampled by older weights, so they are data to keep, not something a resumed
run could sample again. A resumed run therefore continues the same sequence of batches and weights; a run
extended past its last step (`--steps` raised) samples its first new batches with its last weights (the
queue was empty at the end), so those have staleness below k.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nemo_lead.data import Problem
from nemo_lead.generation import Rollout
from nemo_lead.parallel.ranks import dist_rank
from nemo_lead.training.rl.phases import Batch, RLState, select_groups
from nemo_lead.training.rl.rollouts import Group
from nemo_lead.training.run.lifecycle import Run

PART = "lag"  # the checkpoint part (folder) holding the queued batches
BATCHES_FILE = "batches.pt"
SAMPLE_TIMES = ("time/generate", "time/verify")  # what sampling a batch reports; they travel with it


def sample_batch(s: RLState, step: int, version: int) -> Batch:
    """Phases 1-5 for `step` with the engine's current weights (which are W_version). Collective. An engine
    that keeps a weight version (vllm) must hold W_version: stale weights would be an error, not a silent lag."""
    held = s.ctx.engine.weight_version
    if held is not None and held != version:
        raise RuntimeError(f"step {step}: the rollout engine holds the weights of step {held}, the batch needs those "
                           f"of step {version}")

    times = dict.fromkeys(SAMPLE_TIMES, 0.0)
    seen, selected, rounds = select_groups(s, step, times)
    return Batch(step, version, seen, selected, rounds, times, s.order.state_dict())


def check_staleness(batch: Batch, step: int, k: int) -> None:
    """The batch is step's and its weights at most k steps old (the trainer's assertion on every batch)."""
    if batch.step != step:
        raise RuntimeError(f"step {step} was handed the batch of step {batch.step}")
    if not 0 <= step - 1 - batch.version <= k:
        raise RuntimeError(f"step {step}: its batch was sampled with the weights of step {batch.version}, "
                           f"{step - 1 - batch.version} steps old; rollout.lag={k} allows at most {k}")


def lag_metrics(batch: Batch, step: int, k: int) -> dict[str, Any]:
    """The step's lag keys: none at k = 0 (the on-policy loop's metrics, unchanged)."""
    return {"lag/staleness": step - 1 - batch.version, "lag/version": batch.version} if k > 0 else {}


# ----------------------------------------------------------------------------- batches as data
def batch_to_data(b: Batch) -> dict[str, Any]:
    """Plain lists, numbers, strings and tensors (for torch.load(weights_only=True), or a pickle on the wire)."""
    index = {id(g): i for i, g in enumerate(b.seen)}
    groups = [{"problem": dataclasses.asdict(g.problem), "prompt_ids": list(g.prompt_ids),
               "rollouts": [dataclasses.asdict(r) for r in g.rollouts], "texts": list(g.texts),
               "outcomes": list(g.outcomes), "extracted": list(g.extracted), "rewards": g.rewards, "keep": g.keep}
              for g in b.seen]
    return {"step": b.step, "version": b.version, "rounds": b.rounds, "times": dict(b.times), "order": dict(b.order),
            "selected": [index[id(g)] for g in b.selected], "groups": groups}


def batch_from_data(d: dict[str, Any]) -> Batch:
    seen = [Group(problem=Problem(**g["problem"]), prompt_ids=g["prompt_ids"],
                  rollouts=[Rollout(**r) for r in g["rollouts"]], texts=g["texts"], outcomes=g["outcomes"],
                  extracted=g["extracted"], rewards=g["rewards"], keep=g["keep"]) for g in d["groups"]]
    return Batch(d["step"], d["version"], seen, [seen[i] for i in d["selected"]], d["rounds"], d["times"], d["order"])


# ----------------------------------------------------------------------------- the queue
class BatchQueue:
    """The batches sampled ahead, B_(t+1) .. B_min(t+k, steps) between steps; the serial layout's source of
    step t's rollouts (`take`). `produce(s, j)` makes B_j: by default `sample_batch` with the live weights
    (W_run.step); the split layout receives it instead and takes no batch before it is due (`ahead` 0)."""

    def __init__(self, k: int, next_step: int, queued: list[Batch] = (), *,
                 produce: Callable[[RLState, int], Batch] | None = None, ahead: int | None = None):
        self.k = k
        self.pending: deque[Batch] = deque(queued)
        self.next_step = next_step + len(self.pending)  # the first batch not made yet
        self.produce = produce or (lambda s, j: sample_batch(s, j, version=s.run.step))
        self.ahead = k if ahead is None else ahead

    def fill(self, s: RLState, last: int) -> None:
        """Make every batch up to B_min(last, steps) that does not exist yet."""
        while self.next_step <= min(last, s.cfg.steps):
            self.pending.append(self.produce(s, self.next_step))
            self.next_step += 1

    def take(self, s: RLState, step: int) -> Batch:
        """B_step (phases 1-5), after making what is due at the start of the step."""
        self.fill(s, step + self.ahead)
        batch = self.pending.popleft()
        check_staleness(batch, step, self.k)
        return batch

    def after_update(self, s: RLState, step: int) -> dict[str, float]:  # noqa: ARG002 - the split layout's hook
        """After step's update (the split layout sends the new weights here); its seconds by key."""
        return {}

    def loop_state(self, s: RLState) -> dict[str, Any]:
        """meta.json's "lag" entry, once the queue holds everything the checkpoint after this step must."""
        self.fill(s, s.run.step + self.k)
        return {"lag": {"k": self.k, "queued": [[b.step, b.version] for b in self.pending]}}

    def write_part(self, folder: Path) -> None:
        """The checkpoint part: the queued batches as data (global rank 0 writes; every rank holds them)."""
        if dist_rank() == 0:
            torch.save([batch_to_data(b) for b in self.pending], folder / BATCHES_FILE)

    def close(self) -> None:
        """Nothing to end in the serial layout."""


def restored_batches(run: Run, k: int) -> list[Batch]:
    """The queued batches of the checkpoint `run` resumed from (none for a fresh run, or k = 0)."""
    saved = run.loop_state.get("lag")
    if not saved or not saved["queued"]:
        return []
    if saved["k"] != k:
        raise ValueError(f"{run.resumed_from}: saved with rollout.lag={saved['k']}, this run has rollout.lag={k}")
    data = torch.load(Path(run.resumed_from) / PART / BATCHES_FILE, weights_only=True)
    batches = [batch_from_data(d) for d in data]
    if [[b.step, b.version] for b in batches] != saved["queued"]:
        raise ValueError(f"{run.resumed_from}/{PART}/{BATCHES_FILE} does not hold the batches meta.json lists")
    return batches
