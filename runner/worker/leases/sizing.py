"""How long a job type's lease should be, from how late its renewals land.

What the workers observe is *lateness*: how long after its due time a renewal's answer
came back (the UpdateMessage's round trip plus any stall of the keeper: a frozen VM, a
long GC, a store that slows down). A lease of L seconds is renewed L minus
:func:`~runner.worker.leases.lease.end_margin_seconds` after it starts, so a renewal is
in time while its lateness stays under that margin (30 % of a lease of 10 s or more).

The rule (:func:`next_lease_seconds`):

- **Need**: :data:`MARGIN` (1.5) times the :data:`PERCENTILE` (99.9th) of the
  lateness, the lease just long enough that its end margin covers that. A chunk renewed
  200 times meets a lateness above the 99.9th percentile in 18 % of chunks, and the 1.5
  margin above it is what keeps those in time; Google's Pub/Sub clients size their ack
  deadline from the same percentile. With fewer samples than the percentile can see
  (under 1,000), the highest bucket seen stands for it.
- **Grow at once**: a lease lost since the last step doubles the lease (at least), and a
  need above the lease is met at once.
- **Shrink slowly**: otherwise the lease moves down towards the need by at most
  :data:`SHRINK_FRACTION` (10 %) a step, and only once :data:`MIN_SAMPLES` renewals were
  seen: a lesson learned from a slow store is forgotten over tens of steps, not one.
- **Bounds**: never below the class's lower bound nor above its upper one
  (:data:`DEFAULT_BOUNDS`, 10 s to 600 s: 10 s keeps a renewal per 7 s, the cost said in
  SCALE.md, and recovers a crash in seconds; 600 s is Pub/Sub's ceiling and a hung
  chunk's longest hold).

:class:`Lateness` is a histogram, not a mean (one frozen VM must not hide in a thousand
fast renewals): fixed buckets, so histograms of many workers merge by adding counts, and
a record of it stays the same size however many renewals it saw. It halves its counts
past :data:`MAX_SAMPLES`, so what it says follows the store as it is now.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from runner.worker.leases.lease import end_margin_seconds

#: Upper bounds of the lateness buckets (seconds); the last catches everything above.
BUCKETS_SECONDS: tuple[float, ...] = (
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
    45.0, 60.0, 90.0, 120.0, 180.0, 300.0, math.inf,
)  # fmt: skip
#: The percentile of lateness the lease's end margin must cover ...
PERCENTILE = 0.999
#: ... with this much to spare.
MARGIN = 1.5
#: Renewals seen before the lease may shrink.
MIN_SAMPLES = 20
#: Past this many samples every count is halved: old lessons weigh less.
MAX_SAMPLES = 100_000
#: At most this fraction off the lease per step while renewals land early.
SHRINK_FRACTION = 0.10
#: The text form's version (a record property holds it).
ENCODING = "lateness/1"


@dataclass(frozen=True)
class LeaseBounds:
    """The lowest and the highest lease a job type may be given (seconds)."""

    low_seconds: float = 10.0
    high_seconds: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.low_seconds <= self.high_seconds or math.isinf(self.high_seconds):
            raise ValueError(
                f"lease bounds must be 0 < low <= high < inf seconds, not "
                f"({self.low_seconds:g}, {self.high_seconds:g})"
            )

    def clamp(self, seconds: float) -> float:
        return min(self.high_seconds, max(self.low_seconds, seconds))


DEFAULT_BOUNDS = LeaseBounds()


@dataclass(frozen=True)
class Lateness:
    """Counts of renewals by lateness bucket (:data:`BUCKETS_SECONDS`)."""

    counts: tuple[int, ...] = (0,) * len(BUCKETS_SECONDS)

    @property
    def samples(self) -> int:
        return sum(self.counts)

    def observe(self, seconds: float) -> Lateness:
        """With one renewal ``seconds`` late more (early, or not a number, counts as 0)."""
        late = seconds if seconds >= 0 else 0.0  # NaN too
        index = next(i for i, upper in enumerate(BUCKETS_SECONDS) if late <= upper)
        counts = list(self.counts)
        counts[index] += 1
        return Lateness(tuple(counts))._bounded()

    def merge(self, other: Lateness) -> Lateness:
        """What two workers (or a record and a worker) saw, together."""
        return Lateness(
            tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        )._bounded()

    def percentile_seconds(self, fraction: float) -> float:
        """The upper bound of the bucket where ``fraction`` of the samples are reached (the
        last bucket seen: :data:`BUCKETS_SECONDS`' largest finite bound); 0 with none."""
        if not 0 < fraction <= 1:
            raise ValueError(f"a percentile is a fraction in (0, 1], not {fraction!r}")
        if self.samples == 0:
            return 0.0
        wanted = fraction * self.samples
        index = next(
            i
            for i, seen in enumerate(itertools.accumulate(self.counts))
            if self.counts[i] and seen >= wanted
        )
        upper = BUCKETS_SECONDS[index]
        return upper if math.isfinite(upper) else BUCKETS_SECONDS[-2]

    def encode(self) -> str:
        """The text a record property holds: ``lateness/1:0,3,12,...``."""
        return f"{ENCODING}:{','.join(map(str, self.counts))}"

    @classmethod
    def decode(cls, text: str) -> Lateness:
        """Read :meth:`encode`'s text. Raises ValueError, saying what is wrong, for any
        other (a record garbled by hand or by another version)."""
        version, _, body = text.partition(":")
        if version != ENCODING:
            raise ValueError(f"lateness of another encoding: {version[:40]!r}")
        try:
            counts = tuple(int(part) for part in body.split(","))
        except ValueError:
            raise ValueError(f"lateness counts that are not whole numbers: {body[:80]!r}") from None
        if len(counts) != len(BUCKETS_SECONDS) or min(counts) < 0:
            raise ValueError(f"lateness of {len(counts)} buckets, or a negative count")
        return cls(counts)._bounded()

    def halved(self) -> Lateness:
        """Every count halved (rounded down): old lessons weigh half."""
        return Lateness(tuple(count // 2 for count in self.counts))

    def _bounded(self) -> Lateness:
        if self.samples <= MAX_SAMPLES:
            return self
        return self.halved()._bounded()


def whole_seconds(seconds: float) -> int:
    """A lease in whole seconds (a queue's visibility timeout is), rounded up past the
    hundredth :func:`needed_lease_seconds` is exact to."""
    return math.ceil(round(seconds, 2))


def needed_lease_seconds(lateness: Lateness, bounds: LeaseBounds = DEFAULT_BOUNDS) -> float:
    """The shortest lease in ``bounds`` whose end margin covers :data:`MARGIN` times the
    :data:`PERCENTILE` of ``lateness`` (the bounds' highest if none does)."""
    need = MARGIN * lateness.percentile_seconds(PERCENTILE)
    low, high = bounds.low_seconds, bounds.high_seconds
    if end_margin_seconds(low) >= need:
        return low
    if end_margin_seconds(high) < need:
        return high
    # The end margin grows with the lease (never shrinks): the smallest lease enough, to
    # a ten-thousandth of a second
    while high - low > 0.0001:
        middle = (low + high) / 2
        low, high = (low, middle) if end_margin_seconds(middle) >= need else (middle, high)
    return high


def next_lease_seconds(
    current_seconds: float,
    lateness: Lateness,
    lost: int,
    bounds: LeaseBounds = DEFAULT_BOUNDS,
) -> float:
    """The lease after ``current_seconds``, given the lateness seen and how many leases
    were lost since the last step (see the module's rule)."""
    current = bounds.clamp(current_seconds)
    needed = needed_lease_seconds(lateness, bounds)
    if lost > 0:
        return bounds.clamp(max(2 * current, needed))
    if needed >= current:
        return needed
    if lateness.samples < MIN_SAMPLES:
        return current
    return bounds.clamp(max(needed, current * (1 - SHRINK_FRACTION)))
