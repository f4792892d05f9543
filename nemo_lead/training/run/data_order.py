"""The order in which a loop visits its data: a seeded shuffle per epoch, read as one endless stream.

    order = DataOrder(num_items=len(problems), seed=cfg.seed, shuffle=True)
    indices = order.take(32)            # the next 32 items; crosses into the next epoch when one ends
    state = order.state_dict()          # {"epoch": e, "position": p}: saved in the checkpoint's loop state
    order.load_state_dict(state)        # a resumed run continues with exactly the same items

Epoch e's permutation depends only on (seed, e), so the order needs no RNG state of its own and every rank
computes the same one without talking.
"""

from __future__ import annotations

import random


class DataOrder:
    def __init__(self, num_items: int, seed: int, shuffle: bool = True):
        if num_items < 1:
            raise ValueError("the data set is empty: nothing to train on")
        self.num_items, self.seed, self.shuffle = num_items, seed, shuffle
        self.epoch, self.position = 0, 0
        self._perm: list[int] | None = None

    def permutation(self, epoch: int) -> list[int]:
        perm = list(range(self.num_items))
        if self.shuffle:
            random.Random(f"{self.seed}/epoch/{epoch}").shuffle(perm)
        return perm

    def take(self, k: int) -> list[int]:
        """The next k item indices (an item repeats only across epochs, and only if k > num_items)."""
        out: list[int] = []
        while len(out) < k:
            if self._perm is None:
                self._perm = self.permutation(self.epoch)
            n = min(k - len(out), self.num_items - self.position)
            out.extend(self._perm[self.position:self.position + n])
            self.position += n
            if self.position == self.num_items:
                self.epoch, self.position, self._perm = self.epoch + 1, 0, None
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._perm = int(state["epoch"]), int(state["position"]), None
