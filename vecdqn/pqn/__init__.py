"""PQN (``--algo pqn``): parallel Q-learning on the vector env.

Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR 2025, arXiv
2407.04811): ε-greedy actors on ``N`` envs collect a rollout of ``T`` steps; Q(λ) returns are
computed backwards through it with the network that acted; a few epochs of large-minibatch
updates follow. No replay buffer, no target network: LayerNorm in the network keeps TD stable.

- `lambda_returns` (`vecdqn.pqn.returns`): the Q(λ) returns of a rollout;
- `PQNAgent` (`vecdqn.pqn.agent`): the network, RAdam and the epochs of one rollout;
- `PQNLearner` (`vecdqn.pqn.learner`): the rollout and its schedule, behind the training core's
  learner interface.
"""

from vecdqn.pqn.agent import PQNAgent
from vecdqn.pqn.learner import PQNLearner
from vecdqn.pqn.returns import lambda_returns

__all__ = ["PQNAgent", "PQNLearner", "lambda_returns"]
