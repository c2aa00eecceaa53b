"""Everything between an env id and a batch of observations.

- `make_env` (`vecdqn.envs.make`): one preprocessed env from an id and its `EnvOptions`;
- `vecdqn.envs.wrappers`: the DQN preprocessing as gymnasium wrappers (ALE games);
- `env_family` (`vecdqn.envs.family`): what an env id's family uses and how it is built;
- `make_vector_env`, `WorkerGuard`, `WorkerError` (`vecdqn.envs.vector`): N envs in worker
  processes, each failure turned into one error;
- `vecdqn.envs.ale_direct` (the ALE fast path), `vecdqn.envs.state` (emulator snapshots),
  `vecdqn.envs.frame_tap` (every raw frame, for evaluation), `vecdqn.envs.catch` (Catch).

Importing this package registers the ALE's ids and ``vecdqn/Catch-v0`` with gymnasium.
"""

from vecdqn.envs.family import EnvFamily, check_env_id, check_family_options, env_family, register_envs
from vecdqn.envs.make import check_env_options, env_options, make_env
from vecdqn.envs.options import EnvOptions
from vecdqn.envs.vector import WorkerError, WorkerGuard, make_vector_env

__all__ = [
    "EnvFamily", "EnvOptions", "WorkerError", "WorkerGuard", "check_env_id", "check_env_options",
    "check_family_options", "env_family", "env_options", "make_env", "make_vector_env", "register_envs",
]
