"""`ReplaySample`, the batch that both replay buffers return, and `ReplaySlots`, the same batch as
frame-slot numbers."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ReplaySample", "ReplaySlots"]


@dataclasses.dataclass(frozen=True, eq=False)
class ReplaySample:
    """One sampled batch, NumPy arrays on the host.

    Fields (``B`` = batch size)::

        obs         (B, S, H, W) uint8    observation s_t
        actions     (B,) int64            action a_t
        rewards     (B,) float32          n-step return Σ_{k<h} γ^k r_{t+k} (r_t for n_step=1)
        next_obs    (B, S, H, W) uint8    bootstrap observation s_{t+h}
        terminated  (B,) bool             the return was cut by a termination (no bootstrap)
        weights     (B,) float32          importance-sampling weights, max over the buffer = 1
        indices     (B,) int64            slots, for `update_priorities`
        discounts   (B,) float32          γ^h · (1 - terminated), h = steps in the return

    Three ways to read it: attributes (``batch.obs``), keys (``batch["obs"]``), and unpacking of
    the first seven fields in the order above::

        obs, actions, rewards, next_obs, terminated, weights, indices = buffer.sample(32, 0.4)

    ``discounts`` is an attribute and a key but not part of the unpacking: the seven-tuple is the
    common shape of a prioritized-replay sample (OpenAI baselines and its descendants), so code
    written for it keeps working, and with ``n_step=1`` the discount is just ``γ·(1-terminated)``.
    With ``n_step > 1`` use ``discounts``: the horizon differs between transitions.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    weights: np.ndarray
    indices: np.ndarray
    discounts: np.ndarray

    _fields = ("obs", "actions", "rewards", "next_obs", "terminated", "weights", "indices")

    def __iter__(self):
        return iter(tuple(getattr(self, name) for name in self._fields))

    def __getitem__(self, key: str | int) -> np.ndarray:
        """``batch["obs"]`` (any field, ``"discounts"`` included) or ``batch[0]`` (the seven)."""
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(f"{key!r} is not a ReplaySample field; fields: {self.keys()}")
            return getattr(self, key)
        return getattr(self, self._fields[key])

    def keys(self) -> tuple[str, ...]:
        """All eight field names."""
        return (*self._fields, "discounts")


@dataclasses.dataclass(frozen=True, eq=False)
class ReplaySlots:
    """A sampled batch with frame-slot numbers in place of the stacked frames: what a reader that
    keeps its own copy of the frame storage (another device) needs to rebuild the observations.

    Fields (``B`` = batch size, ``S`` = stack depth; ``frames`` is the buffer's ``(C, H, W)``
    storage, so ``frames[obs_slots]`` is `ReplaySample.obs`)::

        obs_slots       (B, S) int64      frame slots of obs, oldest first
        next_obs_slots  (B, S) int64      frame slots of next_obs, oldest first
        actions, rewards, terminated, weights, indices, discounts: as in `ReplaySample`
    """

    obs_slots: np.ndarray
    next_obs_slots: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    weights: np.ndarray
    indices: np.ndarray
    discounts: np.ndarray

    def with_frames(self, frames: np.ndarray) -> ReplaySample:
        """The `ReplaySample` these slots stand for, read from ``frames (C, H, W) uint8``."""
        b = self.obs_slots.shape[0]
        stacked = frames[np.concatenate([self.obs_slots, self.next_obs_slots])]
        return ReplaySample(obs=stacked[:b], actions=self.actions, rewards=self.rewards, next_obs=stacked[b:],
                            terminated=self.terminated, weights=self.weights, indices=self.indices,
                            discounts=self.discounts)
