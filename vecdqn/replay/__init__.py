"""Prioritized experience replay: a vectorized sum tree and a frame-once replay buffer.

Shape legend (every docstring in the package uses it)::

    N      envs stepped together; one ``add`` stores one transition per env (N is fixed by the
           first ``add`` of a `PrioritizedReplayBuffer`)
    B      batch size of ``sample`` / length of an index batch
    S      frame-stack depth, ``obs_shape[0]`` (4 for Atari)
    H, W   frame height and width (84, 84); ``obs_shape == (S, H, W)``
    C      capacity: frame *slots* of a `PrioritizedReplayBuffer` (see there)

Sources:

* Schaul, Quan, Antonoglou, Silver 2016, "Prioritized Experience Replay" (ICLR): eq. 1
  ``P(i) = p_i^α / Σ_k p_k^α`` with proportional priorities ``p_i = |δ_i| + ε``; new transitions
  get the largest priority seen so far (Alg. 1, line 6); sampling from ``B`` equal segments of the
  total (Appendix B.2.1); importance-sampling weights ``w_i = (N·P(i))^-β / max_j w_j`` (section
  3.4 and Alg. 1, line 10).
* Sutton & Barto 2018, "Reinforcement Learning: An Introduction", 2nd ed., section 7.1: the
  n-step return ``G = Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n})``.
* Hessel et al. 2018, "Rainbow" (AAAI): n = 3 steps with prioritized replay on Atari.

Modules, one concern each:

* `sum_tree`: `SumTree` (16-ary, vectorized prefix sums) and `PriorityIndex` (the sum tree with
  a min tree and the count: the buffers' priorities); `last_wins` for repeated indices.
* `prioritized`: proportional sampling, importance weights and `update_priorities`, the base of
  the buffer.
* `frames`: `FrameRings`, frame-once per-env rings and the stacks read back from them.
* `nstep`: `NStepAccumulator`, the per-env queues of pending n-step windows.
* `buffer`: `PrioritizedReplayBuffer` (frame-efficient, n-step; what the trainer uses).
* `sample`: `ReplaySample`, the batch it returns; `ReplaySlots`, the same batch as frame slots
  (`PrioritizedReplayBuffer.sample_slots`). `checks`: argument checks, `ReplayIndexError`.
"""

from vecdqn.replay.buffer import PrioritizedReplayBuffer
from vecdqn.replay.checks import ReplayIndexError
from vecdqn.replay.nstep import NStepAccumulator
from vecdqn.replay.sample import ReplaySample, ReplaySlots
from vecdqn.replay.sum_tree import PriorityIndex, SumTree, last_wins

__all__ = [
    "NStepAccumulator",
    "PrioritizedReplayBuffer",
    "PriorityIndex",
    "ReplayIndexError",
    "ReplaySample",
    "ReplaySlots",
    "SumTree",
    "last_wins",
]
