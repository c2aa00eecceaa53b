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

Modules::

    prioritized.py   PrioritizedReplayBuffer (what the trainer uses): add, sample, sample_slots,
                     transitions, and _gather, the n-step gather
    proportional.py  ReplayBase, its base: the priorities and update_priorities; draw, the
                     stratified sum-tree draw with its importance-sampling weights
    sum_tree.py      SumTree (16-ary, vectorized prefix sums; find is the draw's descent),
                     PriorityIndex (the sum tree, a min tree and the count), last_wins
    frames.py        FrameRings: frame-once per-env rings; the frame slots of stacked observations
    nstep.py         NStepAccumulator: per-env queues of pending n-step windows; discount_table
    sample.py        ReplaySample, the batch sample returns; ReplaySlots, the same as frame slots
    checks.py        argument checks; ReplayIndexError

``PrioritizedReplayBuffer.sample(B, beta)``, call by call (``sample_slots`` stops before the last)::

    sample                         prioritized.py
    ├─ ReplayBase.draw             proportional.py  B stratified prefix sums; importance weights
    │  │                                            w_i = (N·P(i))^-β / max_j w_j = (p_i^α / min_j p_j^α)^-β
    │  └─ SumTree.find             sum_tree.py      prefix sums -> (B,) slots
    ├─ _gather                     prioritized.py   n-step returns, discounts γ^h·(1-terminated)
    │  └─ FrameRings.stack_slots   frames.py        (2B, S) frame slots of obs and next_obs
    └─ ReplaySlots.with_frames     sample.py        (B, S, H, W) uint8 obs and next_obs
"""

from vecdqn.replay.checks import ReplayIndexError
from vecdqn.replay.nstep import NStepAccumulator
from vecdqn.replay.prioritized import PrioritizedReplayBuffer
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
