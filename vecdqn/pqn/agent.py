"""`PQNAgent`: PQN's one Q-network and the epochs of minibatch updates of one rollout.

Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR 2025, arXiv
2407.04811), Algorithm 1: ``N`` envs act ε-greedily for ``T`` steps with the current network;
the λ-returns of that rollout are computed once; then ``epochs`` passes, each over a fresh
shuffle of the ``T·N`` samples split into ``minibatches`` equal minibatches, take one gradient
step per minibatch. No replay, no target network; LayerNorm in the network keeps it stable.

Shape legend: ``T`` rollout steps, ``N`` envs, ``M`` any batch of observations, ``S`` stacked
frames, ``H×W`` frame, ``A`` actions. One rollout, step ``t`` of env ``n``::

    obs[t, n]                    (T, N, S, H, W) uint8   the observation acted on at step t
    actions[t, n]                (T, N) int64
    rewards[t, n]                (T, N) float32          r_t (clipped if clipping is on)
    terminated, truncated[t, n]  (T, N) bool             step t's outcome
    next_q_max[t, n]             (T, N) float32          max_a Q(s_{t+1}, a)
    returns[t, n]                (T, N) float32          G_t of `lambda_returns`

``s_{t+1}`` is the observation after step t: ``obs[t + 1]`` inside the rollout, the observation
after the last step at ``t = T − 1``, and the **final** observation (``info["final_obs"]``), never
the next episode's first, where step t ended an episode.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from vecdqn.learners import POLICY_KEY
from vecdqn.model import QNetwork
from vecdqn.staging import ScheduledLearningRate, check_amp, to_device

__all__ = ["PQNAgent", "UpdateStopped"]


class UpdateStopped(RuntimeError):
    """`PQNAgent.update` was stopped (its ``stop`` event set) before its last gradient step."""


class PQNAgent(ScheduledLearningRate):
    """PQN's one Q-network (no target network), RAdam, gradient-norm clipping and the updates of
    one rollout.

    The λ-returns are the caller's: computed once per rollout, before `update`, with
    `lambda_returns` over ``next_q_max`` taken from `q_values` with the network as it acted (none
    of them is recomputed during the epochs). The network does not change during a rollout, so
    ``max_a Q(obs[t + 1])`` kept from acting (as CleanRL's ``pqn_atari_envpool.py`` keeps it) is
    the same value, up to the rounding of a batch of another size; only the final observations
    of ended episodes and the observation after the rollout's last step need a forward pass of
    their own.

    Args:
        n_actions: ``A``.
        obs_shape: ``(S, H, W)`` of one observation (``H == W``).
        device: where the network lives; observations move there as ``uint8``.
        learning_rate: RAdam's step size (2.5e-4: CleanRL's PQN Atari default).
        max_grad_norm: global gradient-norm clip (0 disables the clip; the norm is still reported).
        dueling, hidden_size, layer_norm: network shape (see `QNetwork`); LayerNorm is on by
            default, as in PQN.
        amp: ``"off"`` or ``"bf16"``: autocast the forward passes (fp32 weights, returns and
            loss; see `vecdqn.staging.check_amp`).
        seed: seeds the ε-greedy generator. The network's initial weights come from torch's
            global generator: seed it before constructing the learner.
        build: makes the network (a run's learner passes `QNetwork.from_config`); None: a
            `QNetwork` of ``obs_shape`` and the shape arguments.

    Raises:
        ValueError: ``obs_shape`` not ``(S, H, H)``, ``amp`` that ``device`` cannot run, or a
            negative ``learning_rate``/``max_grad_norm``.
    """

    def __init__(
        self,
        n_actions: int,
        obs_shape: tuple[int, int, int],
        device: torch.device,
        *,
        learning_rate: float = 2.5e-4,
        max_grad_norm: float = 10.0,
        dueling: bool = True,
        hidden_size: int = 512,
        layer_norm: bool = True,
        amp: str = "off",
        seed: int | None = None,
        build: Callable[[], QNetwork] | None = None,
    ):
        obs_shape = tuple(int(x) for x in obs_shape)
        if len(obs_shape) != 3 or obs_shape[1] != obs_shape[2]:
            raise ValueError(f"PQNAgent: obs_shape {obs_shape} is not (S, H, H)")
        if learning_rate < 0 or max_grad_norm < 0:
            raise ValueError(f"PQNAgent: learning_rate={learning_rate} and max_grad_norm={max_grad_norm} "
                             "must be >= 0 (max_grad_norm 0 disables the clip)")
        self.n_actions = n_actions
        self.obs_shape = obs_shape
        self.device = device
        self.max_grad_norm = max_grad_norm
        self.amp_dtype = check_amp(device, amp)
        # Saved under vecdqn.learners.POLICY_KEY, where evaluation and the actors load a policy.
        self.online = (build() if build is not None else QNetwork(
            n_actions, obs_shape[0], obs_shape[1], dueling=dueling, hidden_size=hidden_size, layer_norm=layer_norm)
        ).to(device)
        self.optimizer = torch.optim.RAdam(self.online.parameters(), lr=learning_rate)
        self.rng = np.random.default_rng(seed)

    # -- acting ----------------------------------------------------------------------------------
    def q_values(self, obs: np.ndarray | torch.Tensor, network: nn.Module | None = None) -> torch.Tensor:
        """Q-values of a batch of observations, without gradient (for acting and for ``next_q_max``).

        Args:
            obs: ``(M, S, H, W) uint8`` NumPy array or tensor (any device; moved to the learner's).
            network: another network of this shape to ask (a copy of ``online`` that acts while
                ``online`` trains on another thread); None: ``online``.

        Returns:
            ``(M, A) float32`` on the learner's device.

        Raises:
            ValueError: ``obs`` of another shape or dtype.
        """
        obs = self._observations(obs, "q_values: obs", 1)
        with torch.no_grad(), self._autocast():
            return (network or self.online)(obs).float()

    # -- learning --------------------------------------------------------------------------------
    def update(
        self,
        obs: np.ndarray | torch.Tensor,
        actions: np.ndarray | torch.Tensor,
        returns: torch.Tensor,
        *,
        epochs: int,
        minibatches: int,
        generator: np.random.Generator,
        stop: threading.Event | None = None,
    ) -> dict[str, float]:
        """The updates of one rollout: ``epochs`` passes over its ``T·N`` samples, each a fresh
        shuffle (from ``generator``) split into ``minibatches`` equal minibatches, one RAdam step
        per minibatch on ``0.5 · mean (Q(s, a) − G)²`` (the loss of the authors' code; CleanRL's
        ``F.mse_loss`` is twice it), after clipping the gradient's global norm.

        Args:
            obs: ``(T, N, S, H, W) uint8`` observations acted on.
            actions: ``(T, N) int64`` actions taken, in ``[0, A)``.
            returns: ``(T, N) float32`` `lambda_returns` of the rollout (constants here).
            epochs: passes over the rollout (>= 1).
            minibatches: minibatches per pass (>= 1, dividing ``T·N``).
            generator: draws the shuffles (the caller's; its state decides them).
            stop: checked before each gradient step; once set, the update ends there (a run
                stopped at once does not wait for the rest of its epochs).

        Returns:
            ``{"td_loss", "q_values", "grad_norm"}`` as floats, each the mean over the
            ``epochs · minibatches`` steps: the loss, the mean ``Q(s, a)`` of the minibatch, and
            the gradient's global norm before clipping. One device→host copy, at the end.

        Raises:
            ValueError: inputs of other shapes or dtypes, actions outside ``[0, A)``, or
                ``epochs``/``minibatches`` that do not fit.
            UpdateStopped: ``stop`` was set before the last step (the steps before it are taken).
        """
        obs = self._observations(obs, "update: obs", 2)
        t, n = obs.shape[:2]
        actions = self._rollout_field(actions, torch.int64, "actions", (t, n))
        returns = self._rollout_field(returns, torch.float32, "returns", (t, n))
        total = t * n
        if epochs < 1 or minibatches < 1 or total % minibatches:
            raise ValueError(f"update: epochs={epochs}, minibatches={minibatches} for T·N = {t}·{n} = {total} "
                             "samples; use epochs >= 1 and a number of minibatches >= 1 that divides T·N")
        low, high = int(actions.min()), int(actions.max())
        if low < 0 or high >= self.n_actions:
            raise ValueError(f"update: actions span [{low}, {high}]; they must lie in [0, {self.n_actions})")
        obs, actions, returns = obs.reshape(total, *self.obs_shape), actions.reshape(total), returns.reshape(total)
        size = total // minibatches
        max_norm = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")  # inf: measure, never clip
        sums = torch.zeros(3, device=self.device)
        for _ in range(epochs):
            order = to_device(generator.permutation(total), self.device)
            for k in range(minibatches):
                if stop is not None and stop.is_set():
                    raise UpdateStopped("update stopped before its last gradient step")
                idx = order[k * size:(k + 1) * size]
                with self._autocast():
                    q = self.online(obs[idx]).float()
                q_taken = q.gather(1, actions[idx].unsqueeze(1)).squeeze(1)
                loss = 0.5 * (q_taken - returns[idx]).square().mean()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(self.online.parameters(), max_norm)
                self.optimizer.step()
                sums += torch.stack([loss.detach(), q_taken.detach().mean(), grad_norm.detach().float()])
        td_loss, q_mean, norm = (sums / (epochs * minibatches)).tolist()
        return {"td_loss": td_loss, "q_values": q_mean, "grad_norm": norm}

    def _observations(self, obs: np.ndarray | torch.Tensor, name: str, lead: int) -> torch.Tensor:
        """``obs`` as a ``uint8`` tensor on this device after checking its shape: ``lead`` leading
        dimensions, then ``obs_shape``."""
        shape, dtype = tuple(obs.shape), obs.dtype
        uint8 = dtype == torch.uint8 if isinstance(obs, torch.Tensor) else dtype == np.uint8
        if len(shape) != lead + 3 or shape[lead:] != self.obs_shape or not uint8:
            lead_names = "(M, " if lead == 1 else "(T, N, "
            raise ValueError(f"{name} is {shape} {dtype}; it must be {lead_names}{', '.join(map(str, self.obs_shape))})"
                             " uint8")
        return obs.to(self.device) if isinstance(obs, torch.Tensor) else to_device(obs, self.device)

    def _rollout_field(self, value: np.ndarray | torch.Tensor, dtype: torch.dtype, name: str,
                       shape: tuple[int, int]) -> torch.Tensor:
        """A ``(T, N)`` field as a tensor of ``dtype`` on this device, after checking it."""
        tensor = torch.from_numpy(np.asarray(value)) if not isinstance(value, torch.Tensor) else value
        if tuple(tensor.shape) != shape or tensor.dtype != dtype:
            raise ValueError(f"update: {name} is {tuple(tensor.shape)} {tensor.dtype}; it must be {shape} {dtype}, "
                             "as obs's (T, N)")
        return tensor.to(self.device)

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast of the forward passes when ``amp`` asks for it."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # -- checkpoint ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"online", "optimizer", "rng"}``: the network's and RAdam's state dicts and the
        ε-greedy generator's state; with the caller's shuffle generator, enough to resume exactly."""
        return {POLICY_KEY: self.online.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`'s result (a network of the same shape)."""
        self.online.load_state_dict(state[POLICY_KEY])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
