"""Schedules of a value over agent steps (epsilon, importance-sampling beta, learning rate)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence


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
