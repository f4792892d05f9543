"""`nemo-lead demo`: the main job of the README.

Until the full demo recipe (SFT then RL on the embedded tiny model) lands, this runs one real GRPO-LEAD
step through the installed package on a toy batch: a tabular policy over a small answer space samples
G responses per prompt, each response is graded against the prompt's answer, and the step goes through
`shape_rewards` -> `compute_advantages` -> `group_keep_mask` -> `policy_loss` -> an optimizer update,
printing the rewards and advantages it computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from rich.console import Console
from rich.table import Table

from .algorithms import (
    LeadConfig,
    Outcome,
    compute_advantages,
    group_keep_mask,
    overlong_keep_mask,
    policy_loss,
    shape_rewards,
)


@dataclass
class DemoConfig:
    lead: LeadConfig = field(default_factory=LeadConfig.paper)
    seed: int = 1234
    num_prompts: int = 4
    group_size: int = 8
    num_answers: int = 6  # size of the toy answer space
    max_length: int = 400  # toy response lengths are drawn in [20, max_length]
    steps: int = 20
    lr: float = 0.5


def run_demo(cfg: DemoConfig) -> int:
    console = Console()
    gen = torch.Generator().manual_seed(cfg.seed)
    Q, G = cfg.num_prompts, cfg.group_size
    # toy policy: per prompt, a categorical over answers and a per-answer mean response length
    logits = torch.zeros(Q, cfg.num_answers, requires_grad=True)
    gold = torch.arange(Q) % cfg.num_answers
    mean_len = torch.randint(20, cfg.max_length, (Q, cfg.num_answers), generator=gen).float()
    opt = torch.optim.SGD([logits], lr=cfg.lr)
    console.print(f"[bold]GRPO-LEAD toy step[/bold]  preset={cfg.lead.preset}  {Q} prompts x {G} samples")

    for step in range(cfg.steps):
        with torch.no_grad():
            probs = torch.softmax(logits, -1)
            answers = torch.multinomial(probs, G, replacement=True, generator=gen)  # [Q, G]
            lengths = (mean_len.gather(1, answers) * (0.5 + torch.rand(Q, G, generator=gen))).long().clamp(1)
        group = torch.arange(Q).repeat_interleave(G)
        answers, lengths = answers.reshape(-1), lengths.reshape(-1)
        outcome = torch.where(answers == gold[group], Outcome.CORRECT, Outcome.WRONG).long()
        rewards = shape_rewards(outcome, lengths, group, cfg.lead)
        adv = compute_advantages(rewards, outcome, group, cfg.lead)
        keep = group_keep_mask(rewards, outcome, group, cfg.lead) & overlong_keep_mask(outcome, cfg.lead)

        logp = torch.log_softmax(logits, -1)[group, answers][:, None]  # one "token" per response
        old_logp = logp.detach()
        loss, metrics = policy_loss(logp, old_logp, adv, keep[:, None], cfg.lead)
        opt.zero_grad()
        loss.backward()
        opt.step()

        if step == 0:
            table = Table(title="step 0: one group per prompt")
            for col in ("prompt", "outcome", "tokens", "reward", "advantage", "kept"):
                table.add_column(col, justify="right")
            for i in range(min(len(group), 2 * G)):
                table.add_row(str(int(group[i])), Outcome(int(outcome[i])).name, str(int(lengths[i])),
                              f"{rewards[i]:+.3f}", f"{adv[i]:+.3f}", "yes" if keep[i] else "no")
            console.print(table)
        acc = (outcome == Outcome.CORRECT).float().mean()
        console.print(f"step {step:3d}  loss {loss.item():+.4f}  accuracy {acc:.3f}  "
                      f"mean reward {rewards.mean():+.3f}  clip_frac {metrics['clip_frac']:.3f}")
    final = torch.softmax(logits, -1).gather(1, gold[:, None]).mean()
    console.print(f"[bold]probability of the right answer after {cfg.steps} steps: {final:.3f}[/bold]")
    return 0
