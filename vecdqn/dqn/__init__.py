"""DQN (``--algo dqn``, the default): double DQN with a dueling head on prioritized n-step replay.

Mnih et al. 2015 (DQN, target network), van Hasselt et al. 2016 (double DQN), Wang et al. 2016
(dueling head), Schaul et al. 2016 (prioritized replay), Hessel et al. 2018 (n-step returns).

- `double_dqn_target`, `td_loss`, `DQNAgent` (`vecdqn.dqn.agent`): the math, the networks, Adam
  and one update;
- `LearnerPipeline` (`vecdqn.dqn.pipeline`): store, draw, update, set priorities, in one order,
  with an optional prefetch thread;
- `DeviceFrames` (`vecdqn.dqn.device_replay`): a copy of the replay's frames on the learner's
  device (``--replay-device``);
- `DQNLearner` (`vecdqn.dqn.learner`): the replay, agent and pipeline behind the training core's
  learner interface (`vecdqn.learners.ReplayLearner`).
"""

from vecdqn.dqn.agent import DQNAgent, double_dqn_target, td_loss
from vecdqn.dqn.learner import DQNLearner

__all__ = ["DQNAgent", "DQNLearner", "double_dqn_target", "td_loss"]
