"""Schedules of a value over agent steps (epsilon, importance-sampling beta, learning rate), and the
``step:value`` text of the ``--*-schedule`` options."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence


class PiecewiseLinear:
    """A value interpolated linearly between ``(step, value)`` points, constant outside them.

    Args:
        points: ``[(step_0, value_0), (step_1, value_1), ...]`` with strictly increasing steps
            (agent steps). One point gives a constant.

    Raises:
        ValueError: if ``points`` is empty or its steps do not increase.

    >>> eps = PiecewiseLinear([(0, 1.0), (100, 0.1)])
    >>> eps(0), eps(50), eps(100), eps(10_000)
    (1.0, 0.55, 0.1, 0.1)
    """

    def __init__(self, points: Sequence[tuple[float, float]]):
        if not points:
            raise ValueError("PiecewiseLinear needs at least one (step, value) point, got none")
        steps = [float(s) for s, _ in points]
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"the steps {[s for s, _ in points]} must increase strictly")
        self.steps = steps
        self.values = [float(v) for _, v in points]

    def __call__(self, step: float) -> float:
        if step <= self.steps[0]:
            return self.values[0]
        if step >= self.steps[-1]:
            return self.values[-1]
        k = bisect.bisect_right(self.steps, step)
        s0, s1 = self.steps[k - 1], self.steps[k]
        v0, v1 = self.values[k - 1], self.values[k]
        return v0 + (step - s0) / (s1 - s0) * (v1 - v0)

    def __repr__(self) -> str:
        return f"PiecewiseLinear({list(zip(self.steps, self.values))})"


class Schedules:
    """The run's schedules over agent steps: ε (exploration), β (importance-sampling exponent
    of prioritized replay, Schaul et al. 2016, Sec. 3.4) and Adam's learning rate.

    Each is a `PiecewiseLinear`; `from_config` builds them from a run's configuration.
    """

    def __init__(self, epsilon: PiecewiseLinear, beta: PiecewiseLinear, learning_rate: PiecewiseLinear):
        self.epsilon = epsilon
        self.beta = beta
        self.learning_rate = learning_rate

    @classmethod
    def from_config(cls, config) -> Schedules:
        """From a ``Config``'s ``schedule_points`` (a ``*_schedule`` option, or its two-point
        shorthand). All start at agent step 0, not at ``learning_starts``, so a run continued
        with a larger ``total_steps`` keeps its schedules (exact resume)."""
        return cls(*(PiecewiseLinear(config.schedule_points(q)) for q in ("epsilon", "per_beta", "learning_rate")))


def parse_pairs(text: str) -> list[tuple[float, float]]:
    """``"step:value,step:value,..."`` (agent steps from 0, strictly increasing) as a list of
    ``(step, value)`` points.

    >>> parse_pairs("0:1.0, 800000:0.1")
    [(0, 1.0), (800000, 0.1)]

    Raises:
        ValueError: naming the bad pair: not ``step:value`` numbers in ASCII digits, a negative
            step, a value that is not finite, or steps that do not increase.
    """
    points: list[tuple[float, float]] = []
    for pair in text.split(","):
        step, sep, value = pair.strip().partition(":")
        try:
            if not sep or not pair.isascii():  # int and float also read other scripts' digits
                raise ValueError
            point = (int(step), float(value))
        except ValueError:
            raise ValueError(f"{pair.strip()!r} is not a 'step:value' pair (e.g. '0:1.0,250000:0.01')") from None
        if point[0] < 0:
            raise ValueError(f"step {point[0]} of {pair.strip()!r} is negative; steps count agent steps from 0")
        if not math.isfinite(point[1]):
            raise ValueError(f"the value of {pair.strip()!r} is not a finite number")
        points.append(point)
    PiecewiseLinear(points)  # raises unless the steps increase strictly
    return points


# The two forms of each schedule: giving both is refused.
SCHEDULE_SHORTHANDS = {
    "epsilon_schedule": ("epsilon_start", "epsilon_end", "epsilon_decay_steps"),
    "per_beta_schedule": ("per_beta_start", "per_beta_end", "per_beta_steps"),
    "learning_rate_schedule": ("learning_rate",),
}


def replaced_options(given: Iterable[str]) -> set[str]:
    """The options that options ``given`` explicitly replace in an earlier set of values (a
    preset's, or a resumed run's saved ones): each given option, and the ``--*-schedule`` of
    each quantity whose two-point shorthand is given.

    Why the schedule: a schedule wins over its shorthand (`Config.schedule_points`), so keeping
    an earlier ``epsilon_schedule`` would silently ignore an explicit ``--epsilon-end``.

    >>> sorted(replaced_options({"epsilon_end", "total_steps"}))
    ['epsilon_end', 'epsilon_schedule', 'total_steps']
    """
    replaced = set(given)
    for schedule, shorthand in SCHEDULE_SHORTHANDS.items():
        if replaced.intersection(shorthand):
            replaced.add(schedule)
    return replaced
