"""`RainbowAgent`: online and target `RainbowNetwork`, Adam, one Rainbow update, and acting on
the noisy network.

Shape legend: ``N`` envs, ``B`` batch, ``S`` stacked frames, ``A`` actions, ``K`` atoms.

The agent a replay learner hosts for ``--algo rainbow`` (its record names it: `vecdqn.learners`),
with the interface of DQN's agent: ``act``, ``update_async``/``update`` on a
`vecdqn.staging.DeviceBatch`, ``sync_target``, the learning rate, ``state_dict``. What Rainbow
changes (Hessel et al. 2018, Sec. "The Integrated Agent"):

- the networks are `RainbowNetwork` (a dueling head over C51 distributions, noisy layers);
- the loss of a batch is `sample_losses`' per-sample cross-entropy against the projected n-step
  target with the double-Q action choice, weighted by the importance-sampling weights; the same
  cross-entropy is each sample's new priority, in place of the TD error;
- with noisy layers (``explores``), new noise before each action selection (one sample per
  vector step, shared by its ``N`` actions) and before each update (online and target networks,
  independently), drawn from the agent's own generator, which a checkpoint keeps (Fortunato et
  al. 2018, Appendix C, Algorithm 1; `RainbowNetwork.reset_noise`); ε is then 0 (Table 1).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from vecdqn.acting import epsilon_greedy
from vecdqn.learners import POLICY_KEY
from vecdqn.rainbow.loss import sample_losses
from vecdqn.rainbow.network import RainbowNetwork
from vecdqn.staging import (
    DeviceBatch,
    PendingUpdate,
    ScheduledLearningRate,
    adam,
    check_amp,
    gradient_step,
    on_device,
    to_device,
)

__all__ = ["RainbowAgent"]


class RainbowAgent(ScheduledLearningRate):
    """Online and target `RainbowNetwork`, Adam, and one Rainbow update.

    Args:
        n_actions: ``A``.
        obs_shape: ``(S, H, W)`` of one observation.
        device: where the networks live; observations move there as ``uint8``.
        build: makes each of its two networks, online then target (e.g. `RainbowNetwork.from_config`).
        learning_rate, adam_eps: Adam's settings (Table 1: 6.25e-5 and 1.5e-4).
        max_grad_norm: global gradient-norm clip (0 disables).
        double: the double-Q choice of the next action (van Hasselt et al. 2016).
        seed: seeds the ε-greedy generator (used with ``noisy=False``).
        noise_seed: seeds the generator of the noisy layers' noise.
        amp: ``"off"`` or ``"bf16"``: autocast the forward passes; targets and loss in fp32.

    Raises:
        ValueError: ``amp`` that ``device`` cannot run.
    """

    def __init__(self, n_actions: int, obs_shape: tuple[int, ...], device: torch.device, *,
                 build: Any, learning_rate: float = 6.25e-5, adam_eps: float = 1.5e-4, max_grad_norm: float = 10.0,
                 double: bool = True, seed: int | None = None, noise_seed: int = 0, amp: str = "off"):
        self.n_actions, self.obs_shape, self.device = n_actions, tuple(obs_shape), device
        self.double, self.max_grad_norm = double, max_grad_norm
        self.online: RainbowNetwork = build().to(device).channels_last()
        self.target: RainbowNetwork = build().to(device).channels_last()
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = adam(self.online.parameters(), lr=learning_rate, eps=adam_eps)
        self.amp_dtype = check_amp(device, amp)
        self.rng = np.random.default_rng(seed)
        self.noise = torch.Generator().manual_seed(noise_seed)
        self.explores = self.online.noisy  # noisy layers explore: the learner's ε is 0

    @classmethod
    def from_config(cls, config: Any, device: torch.device, obs_shape: tuple[int, ...], n_actions: int,
                    learning_rate: float) -> RainbowAgent:
        """The agent of a run (`vecdqn.config.Config`), at the learning rate its schedule starts at."""
        c = config
        return cls(n_actions, obs_shape, device, learning_rate=learning_rate, adam_eps=c.adam_eps,
                   max_grad_norm=c.max_grad_norm, double=c.double, seed=c.seed + 1, noise_seed=c.seed + 2, amp=c.amp,
                   build=lambda: RainbowNetwork.from_config(c, n_actions, obs_shape))

    def _amp(self) -> contextlib.AbstractContextManager:
        """bf16 autocast of the forward passes when ``amp`` asks for it."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # -- acting ----------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` ε-greedy actions (`vecdqn.acting.epsilon_greedy`;
        ε is 0 with noisy layers) from one forward pass."""
        return epsilon_greedy(self.rng, epsilon, self.n_actions, obs.shape[0], lambda: self.greedy(obs))

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` ``argmax_a Q(obs, a)`` of the online network's
        expected returns, under new noise (one sample for the ``N`` envs) when it is noisy."""
        if self.explores:
            self.online.reset_noise(self.noise)
        with torch.no_grad(), self._amp():
            return self.online.q_values(to_device(obs, self.device)).argmax(dim=1).cpu().numpy()

    # -- learning --------------------------------------------------------------------------------
    def loss_terms(self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                   discounts: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The forward half of an update, on `DeviceBatch` fields: ``(loss () float32, priorities
        (B,) float32, mean Q () float32)``; the loss the importance-weighted mean of `sample_losses`
        (fp32 under ``amp`` too), the priorities its per-sample cross-entropies (``atoms=1``: double
        DQN's TD errors), the mean Q the expected return of the actions taken."""
        with self._amp():
            logits = self.online.logits(self.online.scale(obs)).float()
        with torch.no_grad(), self._amp():
            next_x = self.online.scale(next_obs)
            next_logits_target = self.target.logits(next_x).float()
            next_q_online = self.online.expected_q(self.online.logits(next_x).float()) if self.double else None
        losses, priorities = sample_losses(logits, actions, rewards, discounts, next_q_online, next_logits_target,
                                           self.online.support, self.double)
        with torch.no_grad():
            q_taken = self.online.expected_q(logits).gather(1, actions.unsqueeze(1)).squeeze(1)
        return (weights * losses).mean(), priorities, q_taken.mean()

    def update_async(self, batch: DeviceBatch) -> PendingUpdate:
        """One gradient step on a replay batch, after new noise for the online and the target
        network (when noisy), without waiting for its results.

        Returns:
            a `PendingUpdate`; its ``result()`` is ``(metrics, priorities)`` (see `loss_terms`).

        Raises:
            TypeError: ``batch`` is not a `DeviceBatch`.
            ValueError: it is on another device.
        """
        if not isinstance(batch, DeviceBatch):
            raise TypeError(f"RainbowAgent.update takes a vecdqn.staging.DeviceBatch, not a {type(batch).__name__}")
        if not on_device(batch.obs, self.device):
            raise ValueError(f"RainbowAgent.update: the batch is on {batch.obs.device} but the learner on "
                             f"{self.device}; build it there (vecdqn.staging.stage)")
        if self.explores:
            self.online.reset_noise(self.noise)
            self.target.reset_noise(self.noise)
        loss, priorities, q_mean = self.loss_terms(*batch)
        return gradient_step(self.optimizer, self.online.parameters(), self.max_grad_norm, loss, priorities, q_mean)

    def update(self, batch: DeviceBatch) -> tuple[dict[str, float], np.ndarray]:
        """`update_async`, waiting for its results: ``({"td_loss", "q_values", "grad_norm"},
        priorities (B,) float32 on the host)``."""
        return self.update_async(batch).result()

    def sync_target(self) -> None:
        """Hard target update: copy the online weights (and noise) into the target network."""
        self.target.load_state_dict(self.online.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """Networks (their noise buffers too), Adam, and both generators' states."""
        return {POLICY_KEY: self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "rng": self.rng.bit_generator.state,
                "noise": self.noise.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.online.load_state_dict(state[POLICY_KEY])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
        self.noise.set_state(state["noise"])
