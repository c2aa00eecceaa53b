"""vecdqn: a Deep Q-Network trainer for Atari 2600 games.

Double DQN, dueling network and prioritized replay, or PQN (``--algo pqn``: Q(lambda) over the
vector env's rollouts), fed by custom gymnasium wrappers running in
``gymnasium.vector.AsyncVectorEnv`` subprocesses.
"""

__version__ = "0.1.0"
# First: its atexit callback must be registered before any library's, to run last (see exit_process).
from vecdqn import signals as _signals  # noqa: E402, F401
from vecdqn.envs import catch as _catch  # noqa: E402, F401  (registers vecdqn/Catch-v0 on import)
