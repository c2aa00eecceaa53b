"""The acting parts every player of envs shares: the vector-env collector, the Ape-X actor,
evaluation and each learner's rollout.

Shape legend: ``N`` envs (or observations) of one step, ``A`` actions, ``S`` stacked frames,
``H×W`` a frame.

* `epsilon_greedy`: ε-greedy actions over a batch (Mnih et al. 2015, Algorithm 1);
* `stored_next_obs`: the next observation a transition stores where a step ended an episode;
* `ended_games`: the whole games that ended in one vector step, from its ``infos``;
* `learner_rewards`: the rewards a learner learns from (sign clipping).

They assume the vector env of `vecdqn.envs.make_vector_env`: ``AutoresetMode.SAME_STEP``, so on
a step where env ``i`` ends, ``next_obs[i]`` is already the next episode's first observation and
``infos["final_obs"][i]`` the ended episode's last one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ended_games", "epsilon_greedy", "learner_rewards", "stored_next_obs"]


def epsilon_greedy(rng: np.random.Generator, epsilon: float | np.ndarray, n_actions: int, n: int,
                   greedy: np.ndarray | Callable[[], np.ndarray]) -> np.ndarray:
    """ε-greedy actions for ``n`` observations: each takes a uniformly random action with
    probability ``epsilon``, else its greedy action (Mnih et al. 2015, Algorithm 1).

    Draws ``rng.random(n)`` then ``rng.integers(n_actions, size=n)`` on every call, so a seeded
    generator gives the same actions whatever the greedy ones are.

    Args:
        rng: the player's generator.
        epsilon: a probability in [0, 1], one for all or ``(N,)`` one per observation.
        n_actions: ``A``.
        n: ``N``.
        greedy: the ``(N,)`` greedy actions (``argmax_a Q``), or a function returning them, called
            only when some observation acts greedily (no forward pass while ε = 1).

    Returns:
        ``(N,) int64`` actions.
    """
    explore = rng.random(n) < epsilon
    actions = rng.integers(n_actions, size=n)
    if not explore.all():
        actions = np.where(explore, actions, greedy() if callable(greedy) else greedy)
    return actions.astype(np.int64)


def stored_next_obs(next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                    infos: dict[str, Any]) -> np.ndarray:
    """The next observations a step's transitions store: ``next_obs`` with each ended env's row
    replaced by its episode's last observation, ``infos["final_obs"][i]``.

    Storing the reset observation instead would make the TD target of a truncation bootstrap
    from the next episode's first state.

    Args:
        next_obs: ``(N, S, H, W) uint8`` as the vector env returned it (ended envs: the next
            episode's first observation).
        terminated, truncated: ``(N,) bool``.
        infos: the step's info dict (``"final_obs"``, ``"_final_obs"`` where an env ended).

    Returns:
        ``(N, S, H, W) uint8``: ``next_obs`` itself when no env ended, else a copy.
    """
    if not (terminated | truncated).any():
        return next_obs
    stored = next_obs.copy()
    for i in np.flatnonzero(infos["_final_obs"]):
        stored[i] = infos["final_obs"][i]
    return stored


def ended_games(infos: dict[str, Any], first_step: int) -> list[tuple[int, float, float]]:
    """The whole games that ended in one vector step, as ``(agent step, raw return, length)``.

    Env ``i`` of a vector step whose first agent step is ``first_step`` (``t − N + 1`` for the
    step that ends at agent step ``t``) is agent step ``first_step + i``: games that end on the
    same vector step get distinct steps. Lengths are in the env family's unit (frames for ALE
    games, `vecdqn.envs.EnvFamily.length_unit`).

    A game normally ends on a step (its statistics are in ``final_info``); rarely it ends inside
    a reset (the life-loss continuation's no-op or FIRE reaches the frame cap), and the wrappers
    then put its statistics in the reset's info, the top-level ``info``.
    """
    games = []
    for source in (infos.get("final_info", {}), infos):
        stats = source.get("episode")
        if stats is not None:
            games += [(first_step + int(i), float(stats["r"][i]), float(stats["l"][i]))
                      for i in np.flatnonzero(source["_episode"])]
    return games


def learner_rewards(rewards: np.ndarray, clip: bool) -> np.ndarray:
    """The rewards a learner learns from: ``sign(r)`` with clipping on (Mnih et al. 2015,
    Methods; before any n-step sum, as in Rainbow), else the raw ``(N,)`` rewards. Logged
    returns stay raw."""
    return np.sign(rewards) if clip else rewards
