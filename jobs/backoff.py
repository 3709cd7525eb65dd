"""How long a failed chunk waits before its next attempt: data, and one pure function.

The wait is applied through the queue: a failed chunk's message is made visible again
after :func:`compute_backoff` seconds, so a retry costs no worker any time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter, capped.

    Attempt 1 fails -> wait about ``first_seconds``; each further failure multiplies
    the wait by ``multiplier`` up to ``max_seconds``; ``jitter`` (0-1) spreads each wait
    uniformly over ``[wait * (1 - jitter), wait]`` so failing chunks do not return
    together.
    """

    first_seconds: float = 5.0
    multiplier: float = 2.0
    max_seconds: float = 300.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.first_seconds < 0 or self.max_seconds < self.first_seconds:
            raise ValueError("Backoff needs 0 <= first_seconds <= max_seconds")
        if self.multiplier < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("Backoff needs multiplier >= 1 and 0 <= jitter <= 1")


def compute_backoff(policy: Backoff, failures: int, rng: random.Random | None = None) -> int:
    """Whole seconds to wait after the ``failures``-th failure (1-based) of a chunk.

    Whole seconds because queue visibility is counted in whole seconds.
    """
    if failures < 1:
        raise ValueError(f"failures counts from 1, not {failures}")
    # Cap the exponent first so a chunk failing for the 10,000th time cannot overflow.
    exponent = min(failures - 1, 64)
    try:
        grown = policy.first_seconds * policy.multiplier**exponent
    except OverflowError:  # a steep multiplier: far past any cap
        grown = policy.max_seconds
    wait = min(policy.max_seconds, grown)
    spread = (rng or random).uniform(1.0 - policy.jitter, 1.0)
    return max(0, round(wait * spread))
