"""vecdqn: a Deep Q-Network trainer for Atari 2600 games.

Double DQN, dueling network and prioritized replay, fed by custom gymnasium wrappers running in
``gymnasium.vector.AsyncVectorEnv`` subprocesses.
"""

__version__ = "0.1.0"
