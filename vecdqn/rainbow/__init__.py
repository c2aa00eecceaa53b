"""Rainbow's math: C51's projection, noisy layers, the distributional dueling network, its loss.

Hessel et al. 2018, "Rainbow: Combining Improvements in Deep Reinforcement Learning" (AAAI):
double Q-learning, prioritized replay, dueling networks, multi-step returns, distributional RL
(C51: Bellemare, Dabney, Munos 2017) and noisy nets (Fortunato et al. 2018) in one agent.

- `categorical_projection`, `categorical_support` (`vecdqn.rainbow.projection`): the projected
  distributional Bellman target on a fixed support;
- `NoisyLinear` (`vecdqn.rainbow.noisy`): the factorised Gaussian noisy linear layer;
- `RainbowNetwork` (`vecdqn.rainbow.network`): the Nature torso with a dueling head over return
  distributions and noisy layers (``atoms=1``: a Q-network);
- `sample_losses`, `rainbow_loss` (`vecdqn.rainbow.loss`): the per-sample cross-entropy (the new
  PER priority) and its importance-weighted mean; double DQN's Huber loss when ``atoms=1``;
- `RAINBOW_DEFAULTS` (`vecdqn.rainbow.defaults`): Table 1's hyperparameters in agent steps;
- `RainbowAgent` (`vecdqn.rainbow.agent`): the networks, Adam and one update of ``--algo
  rainbow``, which DQN's replay learner hosts in place of its own agent (the record in
  `vecdqn.learners` names it).
"""

from vecdqn.rainbow.agent import RainbowAgent
from vecdqn.rainbow.defaults import FRAMES_PER_AGENT_STEP, RAINBOW_DEFAULTS
from vecdqn.rainbow.loss import rainbow_loss, sample_losses
from vecdqn.rainbow.network import RainbowNetwork
from vecdqn.rainbow.noisy import NoisyLinear, scaled_noise
from vecdqn.rainbow.projection import categorical_projection, categorical_support

__all__ = ["FRAMES_PER_AGENT_STEP", "RAINBOW_DEFAULTS", "NoisyLinear", "RainbowAgent",
           "RainbowNetwork", "categorical_projection",
           "categorical_support", "rainbow_loss", "sample_losses", "scaled_noise"]
