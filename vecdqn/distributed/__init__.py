"""Ape-X on Ray (Horgan et al. 2018, "Distributed Prioritized Experience Replay"): actors in
their own processes play with their own epsilons and a recent copy of the network, compute
initial priorities, and ship their transitions (each frame once) to one learner, which fills
one prioritized replay, samples, updates and publishes its weights through Ray's object store.

Modules: `actor` (`Actor`, `apex_epsilons`), `blocks` (`Block`, what an actor ships, and
`BlockIngest`, how the learner files it into the replay), `pool` (`ActorPool`: the Ray actors,
the bounded queue of block requests, restarts, weights; `start_ray`), `learner`
(`DistributedTrainer`, the trainer of ``--actors N``: its `BlockCollector` feeds the same
`vecdqn.core.TrainingCore` as the single-process trainer's vector-env loop).

Ray is an optional dependency (``pip install -e ".[ray]"``): importing this package does not
import it; `require_ray` says what to install.
"""

from __future__ import annotations

from typing import Any

from vecdqn.extras import require

__all__ = ["RAY_MISSING", "DistributedTrainer", "require_ray"]

RAY_MISSING = 'the ray package is not installed; --actors needs it: pip install -e ".[ray]"'


def require_ray() -> None:
    """Raise ``ImportError(RAY_MISSING)`` when Ray cannot be imported (checked without starting
    anything)."""
    require("ray", RAY_MISSING)


def __getattr__(name: str) -> Any:
    if name == "DistributedTrainer":
        from vecdqn.distributed.learner import DistributedTrainer

        return DistributedTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
