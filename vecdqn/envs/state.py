"""Snapshots of a wrapped env: everything needed to continue it later exactly where it is.

Used for exact resume of a training run: each env worker's env is saved into the checkpoint
and put back on ``--resume``. A snapshot is a pickle of plain state (wrapper attributes, the
ALE's ``cloneState``, NumPy generator states); it is read back through `vecdqn.safe_pickle`,
so a crafted snapshot cannot run code.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import ale_py
import gymnasium as gym

from vecdqn import safe_pickle

__all__ = ["get_env_state", "set_env_state"]

# Wrapper attributes that are structure, not state: never saved or overwritten by a snapshot.
_STRUCTURE = frozenset({
    "env", "_action_space", "_observation_space", "_metadata", "_cached_spec", "_reward_range",
    "_direct",  # MaxAndSkip's handles on the layers below
})


def get_env_state(env: gym.Env) -> bytes:
    """Everything needed to continue ``env`` later exactly where it is, as one opaque blob.

    Walks the wrapper chain: each wrapper's own attributes (frame stack, lives, episode
    statistics, ...) and the base env's state. For ALE games that is the emulator's
    ``cloneState(include_rng=True)`` (screen, RAM, frame counters, sticky-action RNG) and the
    env's ``np_random`` (no-op draws); other envs are saved through their attributes, which must
    pickle. Used for exact resume of a training run.
    """
    layers = []
    layer = env
    while isinstance(layer, gym.Wrapper):
        layers.append({k: v for k, v in vars(layer).items() if k not in _STRUCTURE})
        layer = layer.env
    base = layer
    ale = getattr(base, "ale", None)
    if isinstance(ale, ale_py.ALEInterface):
        base_state: dict[str, Any] = {
            "ale": ale.cloneState(include_rng=True),
            "np_random": base.np_random.bit_generator.state,
        }
    else:
        base_state = {"vars": {k: v for k, v in vars(base).items() if k not in _STRUCTURE}}
    return pickle.dumps({"layers": layers, "base": base_state}, protocol=pickle.HIGHEST_PROTOCOL)


def set_env_state(env: gym.Env, state: bytes) -> None:
    """Restore a state from `get_env_state` into an env built with the same options.

    Raises:
        ValueError: the state was taken from an env with a different wrapper chain.
        safe_pickle.UnsafePickleError: the state names a callable outside the allowlist.
    """
    saved = safe_pickle.loads(state)
    layers = []
    layer = env
    while isinstance(layer, gym.Wrapper):
        layers.append(layer)
        layer = layer.env
    if len(layers) != len(saved["layers"]):
        raise ValueError(
            f"env state has {len(saved['layers'])} wrappers but this env has {len(layers)}; "
            "restore into an env made with the same options"
        )
    for wrapper, values in zip(layers, saved["layers"]):
        wrapper.__dict__.update(copy.deepcopy(values))
    base = layer
    if "ale" in saved["base"]:
        base.ale.restoreState(saved["base"]["ale"])
        base.np_random.bit_generator.state = saved["base"]["np_random"]
    else:
        base.__dict__.update(copy.deepcopy(saved["base"]["vars"]))
