"""DQN's math: double-DQN targets, the loss, one update, and ε-greedy acting on the online network.

Shape legend: ``N`` envs, ``B`` batch, ``S`` stacked frames, ``A`` actions, ``H×W`` frame.
The math lives in pure functions (`double_dqn_target`, `td_loss`) testable with
hand-computed numbers; `DQNAgent` owns the networks, the optimizer and the device.

On a GPU a batch-32 update is dozens of small kernels, so its cost is expected to be their
launches, not their arithmetic (not measured: no GPU has run this code here). Three options
make them fewer and fatter: one forward pass of the online network over ``obs`` and ``next_obs``
together (``fuse_forward``, on by default on CUDA); the loss's
forward and backward as CUDA graphs (``compile`` on CUDA: ``torch.compile(mode="reduce-overhead")``
over static input buffers; fused Adam is one kernel already); bf16 autocast (``amp="bf16"``:
fp32 master weights, fp32 targets and loss).

On a CPU whose second core is left idle by the env workers, ``overlap_forward`` runs the two
next-observation passes (target and online, no gradient) on a second thread while the main
thread runs the online pass over ``obs``; the backward pass then waits for both. Each pass does
the same arithmetic on either thread, so the update's results are bit for bit those without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vecdqn.acting import epsilon_greedy
from vecdqn.learners import POLICY_KEY
from vecdqn.model import QNetwork
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

__all__ = ["DQNAgent", "double_dqn_target", "td_loss"]


def double_dqn_target(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    double: bool = True,
) -> torch.Tensor:
    """TD target ``y = R + discount · Q_target(s', a*)``.

    Double DQN (van Hasselt et al. 2016, eq. 4) picks ``a* = argmax_a Q_online(s', a)`` and
    evaluates it with the target network; ``double=False`` gives the Nature target
    ``max_a Q_target(s', a)`` (Mnih et al. 2015, eq. 2 / Algorithm 1).

    Args:
        rewards: ``(B,) float32`` (n-step) returns ``R = Σ_{k<n} γ^k r_{t+k}``.
        discounts: ``(B,) float32`` bootstrap discounts ``γ^n (1 − terminated)``; a
            truncation does not zero it (the target bootstraps through a time limit).
        next_q_online: ``(B, A) float32`` online-network Q-values of the next observation.
        next_q_target: ``(B, A) float32`` target-network Q-values of the next observation.

    Returns:
        ``(B,) float32`` targets (no gradient flows through them when the inputs carry none).
    """
    if double:
        best = next_q_online.argmax(dim=1, keepdim=True)
        next_value = next_q_target.gather(1, best).squeeze(1)
    else:
        next_value = next_q_target.max(dim=1).values
    return rewards + discounts * next_value


def td_loss(
    q_taken: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-weighted Huber loss and the TD errors.

    ``loss = mean_i w_i · huber(y_i − Q(s_i, a_i))`` with the Huber threshold 1 (the error
    clipping of Mnih et al. 2015, Methods) and the importance-sampling weights ``w_i`` of
    Schaul et al. 2016 (Algorithm 1, line 12).

    Args:
        q_taken: ``(B,) float32`` ``Q_online(s, a)`` of the actions taken.
        targets: ``(B,) float32`` TD targets (treated as constants).
        weights: ``(B,) float32`` importance-sampling weights (ones for uniform replay).

    Returns:
        ``(loss () float32, td_errors (B,) float32)`` with ``td_error = y − Q(s, a)``.
    """
    targets = targets.detach()
    td_errors = targets - q_taken
    per_sample = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
    return (weights * per_sample).mean(), td_errors.detach()


class DQNAgent(ScheduledLearningRate):
    """Online and target Q-networks, Adam, and one double-DQN update.

    Args:
        n_actions: ``A``.
        obs_shape: ``(S, H, W)`` of one observation.
        device: where the networks live; observations move there as ``uint8``.
        learning_rate, adam_eps: Adam's settings.
        max_grad_norm: global gradient-norm clip (0 disables).
        double: double-DQN target; dueling, hidden_size, layer_norm: network shape (see `QNetwork`).
        build: makes each of its two networks, online then target (a run's learner passes
            `QNetwork.from_config`); None: a `QNetwork` of ``obs_shape`` and the shape arguments.
        seed: seeds the exploration generator (network init uses torch's global generator,
            seeded by the trainer).
        compile: on CUDA, `loss_terms` (forward and backward) as CUDA graphs through
            ``torch.compile(mode="reduce-overhead")`` over static input buffers; elsewhere the
            online network in ``torch.compile`` (default mode).
        amp: ``"off"`` or ``"bf16"``: autocast the forward passes (see `staging.check_amp`).
        fuse_forward: one online forward over ``obs`` and ``next_obs`` concatenated, ``(2B, …)``
            (None: on CUDA only; on a CPU the backward over 2B rows costs more than the second
            forward's launches save).
        overlap_forward: compute ``Q_target(s')`` and ``Q_online(s')`` (no gradient) on a second
            thread beside ``Q_online(s)`` (see the module); meant for a CPU learner with a core
            to spare. Results are unchanged.

    Raises:
        ValueError: ``amp`` that ``device`` cannot run; ``overlap_forward`` with ``compile``.
    """

    def __init__(
        self,
        n_actions: int,
        obs_shape: tuple[int, int, int],
        device: torch.device,
        *,
        learning_rate: float = 6.25e-5,
        adam_eps: float = 1.5e-4,
        max_grad_norm: float = 10.0,
        double: bool = True,
        dueling: bool = True,
        hidden_size: int = 512,
        seed: int | None = None,
        compile: bool = False,
        amp: str = "off",
        fuse_forward: bool | None = None,
        overlap_forward: bool = False,
        layer_norm: bool = False,
        build: Callable[[], QNetwork] | None = None,
    ):
        if overlap_forward and compile:
            raise ValueError("DQNAgent: overlap_forward=True cannot be combined with compile=True "
                             "(a compiled network is not called from two threads); choose one")
        self.n_actions = n_actions
        self.obs_shape = tuple(obs_shape)
        self.device = device
        self.double = double
        self.max_grad_norm = max_grad_norm
        build = build or (lambda: QNetwork(n_actions, obs_shape[0], obs_shape[1], dueling=dueling,
                                           hidden_size=hidden_size, layer_norm=layer_norm))
        self.online = build().to(device).channels_last()
        self.target = build().to(device).channels_last()
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = adam(self.online.parameters(), lr=learning_rate, eps=adam_eps)
        self.amp_dtype = check_amp(device, amp)
        self.fuse_forward = device.type == "cuda" if fuse_forward is None else bool(fuse_forward)
        self.cuda_graphs = compile and device.type == "cuda"
        # The online network's Q-values of scaled frames (see `QNetwork.scale`), compiled if asked.
        self.online_q = (torch.compile(self.online.q_values) if compile and not self.cuda_graphs
                         else self.online.q_values)
        self._loss_terms = (torch.compile(self.loss_terms, mode="reduce-overhead") if self.cuda_graphs
                            else self.loss_terms)
        self._static: DeviceBatch | None = None  # the compiled graphs' input buffers
        self.rng = np.random.default_rng(seed)
        # The second thread of `overlap_forward` (the executor starts it on the first update).
        self._next_pool = ThreadPoolExecutor(1, thread_name_prefix="vecdqn-next-q") if overlap_forward else None

    # -- acting ----------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """ε-greedy actions for all envs (`vecdqn.acting.epsilon_greedy`) from one forward pass.

        Args:
            obs: ``(N, S, H, W) uint8`` observations.
            epsilon: probability of a uniformly random action, per env.

        Returns:
            ``(N,) int64`` actions.
        """
        return epsilon_greedy(self.rng, epsilon, self.n_actions, obs.shape[0], lambda: self.greedy(obs))

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` ``argmax_a Q_online(obs, a)``."""
        with torch.no_grad():
            q = self.online_q(self.online.scale(to_device(obs, self.device)))
            return q.argmax(dim=1).cpu().numpy()

    # -- learning --------------------------------------------------------------------------------
    def _check(self, batch: DeviceBatch) -> None:
        """The learner's boundary: one type, on this device, shapes and dtypes as `DeviceBatch`
        states them.

        Raises:
            TypeError: ``batch`` is not a `DeviceBatch`.
            ValueError: it is on another device.
        """
        if not isinstance(batch, DeviceBatch):
            raise TypeError(f"DQNAgent.update takes a vecdqn.staging.DeviceBatch, not a {type(batch).__name__}; "
                            f"convert host arrays with vecdqn.staging.stage(batch, agent.device)")
        if not on_device(batch.obs, self.device):
            raise ValueError(f"DQNAgent.update: the batch is on {batch.obs.device} but the learner on {self.device}; "
                             "build it there (vecdqn.staging.stage(batch, agent.device) from host arrays)")
        obs, b = batch.obs, batch.obs.shape[0]
        assert obs.shape[1:] == self.obs_shape and obs.dtype == torch.uint8, (obs.shape, obs.dtype)
        assert batch.next_obs.shape == obs.shape and batch.next_obs.dtype == torch.uint8, batch.next_obs.shape
        assert all(t.shape == (b,) for t in batch[2:]), [tuple(t.shape) for t in batch[2:]]

    def loss_terms(self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                   discounts: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The forward half of an update, on `DeviceBatch` fields (shapes there).

        Returns:
            ``(loss () float32, td_errors (B,) float32, mean Q () float32)``; only the loss carries
            a gradient. Targets and loss are fp32 under ``amp`` too.
        """
        b = obs.shape[0]
        # Each batch of frames is scaled once, here, and shared by the passes that read it.
        x, next_x = self.online.scale(obs), self.online.scale(next_obs)
        fused = self.double and self.fuse_forward
        # Grad mode and autocast are per thread: `_next_q` sets both on its own.
        pending = self._next_pool.submit(self._next_q, next_x, not fused) if self._next_pool else None
        with self._autocast():
            if fused:
                q_both = self.online_q(torch.cat([x, next_x])).float()
                q, next_q_online = q_both[:b], q_both[b:].detach()
            else:
                q = self.online_q(x).float()
        next_q_target, online = pending.result() if pending else self._next_q(next_x, not fused)
        if not fused:
            next_q_online = online
        targets = double_dqn_target(rewards, discounts, next_q_online, next_q_target, self.double)
        q_taken = q.gather(1, actions.unsqueeze(1)).squeeze(1)
        loss, td_errors = td_loss(q_taken, targets, weights)
        return loss, td_errors, q_taken.detach().mean()

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast of the forward passes when ``amp`` asks for it (on the calling thread)."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _next_q(self, next_x: torch.Tensor, online: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(Q_target(s'), Q_online(s') or None)``, both ``(B, A) float32`` without gradient, from
        scaled next observations; ``online`` False skips the online pass (the Nature target reuses
        the target network's values, the fused forward computes its own)."""
        with torch.no_grad(), self._autocast():
            next_q_target = self.target.q_values(next_x).float()
            if not online:
                return next_q_target, None
            return next_q_target, (self.online_q(next_x).float() if self.double else next_q_target)

    def update_async(self, batch: DeviceBatch) -> PendingUpdate:
        """One gradient step on a `DeviceBatch` on this device (see `update`), without waiting
        for its results: on CUDA this returns once the work is queued.

        Returns:
            a `PendingUpdate`; its ``result()`` is ``(metrics, td_errors)``, as `update` returns.

        Raises:
            TypeError, ValueError: as `update`.
        """
        self._check(batch)
        if self.cuda_graphs:
            batch = self._into_static(batch)
            torch.compiler.cudagraph_mark_step_begin()  # the graphs' earlier outputs may be reused
        loss, td_errors, q_mean = self._loss_terms(*batch)
        return gradient_step(self.optimizer, self.online.parameters(), self.max_grad_norm, loss, td_errors, q_mean)

    def update(self, batch: DeviceBatch) -> tuple[dict[str, float], np.ndarray]:
        """One gradient step on a replay batch, waiting for its results.

        Args:
            batch: a `DeviceBatch` on this agent's device: ``obs, next_obs (B, S, H, W) uint8``,
                ``actions (B,) int64``, ``rewards (B,) float32`` (n-step returns, already clipped
                if clipping is on), ``discounts (B,) float32`` and ``weights (B,) float32``
                (`vecdqn.staging.stage` makes one from a replay sample).

        Returns:
            ``(metrics, td_errors)``: ``{"td_loss", "q_values", "grad_norm"}`` as floats and the
            ``(B,) float32`` TD errors on the host (for the priorities). One device→host copy.

        Raises:
            TypeError: ``batch`` is not a `DeviceBatch`.
            ValueError: it is on another device.
        """
        return self.update_async(batch).result()

    def _into_static(self, batch: DeviceBatch) -> DeviceBatch:
        """``batch`` copied into the buffers the CUDA graphs read (made on first use, and again
        if the batch size changes), so that every replay reads the same addresses."""
        if self._static is None or self._static.obs.shape != batch.obs.shape:
            self._static = DeviceBatch(*(torch.empty_like(t) for t in batch))
            for tensor in self._static:
                torch._dynamo.mark_static_address(tensor)  # noqa: SLF001 - no public spelling yet
        for static, value in zip(self._static, batch):
            static.copy_(value, non_blocking=True)
        return self._static

    def sync_target(self) -> None:
        """Hard target update: copy the online weights into the target network."""
        self.target.load_state_dict(self.online.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return {
            POLICY_KEY: self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.online.load_state_dict(state[POLICY_KEY])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
