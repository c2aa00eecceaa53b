"""Rainbow's loss: the multi-step distributional double-Q cross-entropy, and PER priorities.

Shape legend: ``B`` batch, ``S`` stacked frames, ``H`` frame side, ``A`` actions, ``K`` atoms
(``K == 1``: no distribution; the loss falls back to double DQN's Huber TD loss).

`sample_losses` is the math on network outputs (pure, testable with hand-computed numbers);
`rainbow_loss` runs the online and target `RainbowNetwork` on a `vecdqn.staging.DeviceBatch` and
weights the losses by the batch's importance-sampling weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vecdqn.rainbow.network import RainbowNetwork
from vecdqn.rainbow.projection import categorical_projection
from vecdqn.staging import DeviceBatch

__all__ = ["rainbow_loss", "sample_losses"]


def _check_inputs(logits: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                  next_q_online: torch.Tensor | None, next_logits_target: torch.Tensor,
                  support: torch.Tensor | None, double: bool) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or 0 in logits.shape:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"sample_losses: logits is {shape}; it must be a (B, A, K) tensor with B, A, K >= 1")
    b, a, k = logits.shape
    expected = {"actions": (actions, (b,), torch.int64), "rewards": (rewards, (b,), torch.float32),
                "discounts": (discounts, (b,), torch.float32),
                "next_logits_target": (next_logits_target, (b, a, k), None)}
    if double or next_q_online is not None:
        expected["next_q_online"] = (next_q_online, (b, a), None)
    if k > 1:
        expected["support"] = (support, (k,), torch.float32)
    for name, (tensor, shape, dtype) in expected.items():
        if not isinstance(tensor, torch.Tensor):
            hint = " (the double-DQN choice of a* needs it)" if name == "next_q_online" else ""
            raise ValueError(f"sample_losses: {name} is a {type(tensor).__name__}, not a torch.Tensor{hint}")
        if tuple(tensor.shape) != shape:
            raise ValueError(f"sample_losses: {name} has shape {tuple(tensor.shape)}; with logits of shape "
                             f"{(b, a, k)} (B, A, K) it must be {shape}")
        if dtype is not None and tensor.dtype != dtype:
            raise ValueError(f"sample_losses: {name} has dtype {tensor.dtype}; it must be {dtype}")


def sample_losses(
    logits: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    next_q_online: torch.Tensor | None,
    next_logits_target: torch.Tensor,
    support: torch.Tensor | None,
    double: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample losses and the values the replay's priorities are made from.

    ``K > 1`` (Hessel et al. 2018, Sec. "The Integrated Agent": the multi-step distributional
    loss with the double-Q bootstrap action; Bellemare, Dabney, Munos 2017, Algorithm 1):

    - the bootstrap action ``a* = argmax_a Q_online(s', a)`` (double Q: chosen by the online
      network, evaluated with the target network's distribution; van Hasselt et al. 2016, as
      Rainbow combines it); ``double=False``: ``argmax_a Σ_k z_k p^target_k(s', a)`` (C51's own
      choice, Algorithm 1);
    - the target ``m = Φ(R + discount · z, p^target(s', a*))`` (`categorical_projection`);
    - the loss ``ℓ_i = −Σ_k m_k log p_k(s_i, a_i)``, the cross-entropy, whose gradient is that of
      Rainbow's ``D_KL(m ‖ p(s, a))`` (they differ by the entropy of ``m``, a constant);
    - the priority value ``ℓ_i``: Rainbow prioritises transitions by this loss (Hessel et al.
      2018, Sec. "The Integrated Agent", which names the KL loss; the cross-entropy is the KL
      plus the target's entropy, and is what Kaixhin's Rainbow passes to its replay's
      ``update_priorities``).

    ``K == 1`` (no distribution, ``--atoms 1``): double DQN's target ``y = R + discount ·
    Q_target(s', a*)`` (van Hasselt et al. 2016, Eq. 4; ``double=False``: ``max_a Q_target``),
    the Huber loss ``ℓ_i = huber(y_i − Q(s_i, a_i))`` with threshold 1 (Mnih et al. 2015, Methods)
    and the TD error ``y − Q(s, a)`` as the priority value: what `vecdqn.dqn.double_dqn_target`
    and `vecdqn.dqn.td_loss` compute.

    Args:
        logits: ``(B, A, K) float32`` online-network logits at ``s`` (`RainbowNetwork.logits`);
            they carry the gradient.
        actions: ``(B,) int64`` actions taken.
        rewards: ``(B,) float32`` n-step returns ``R = Σ_{k<h} γ^k r_{t+k}`` of clipped rewards.
        discounts: ``(B,) float32`` ``γ^h · (1 − terminated)``, ``h <= n`` the steps in the return
            (0 at a termination; ``γ^h`` at a truncation, which bootstraps): the replay's
            per-transition discount, so no separate ``γ^n`` is taken.
        next_q_online: ``(B, A)`` online-network Q-values at ``s'`` (`RainbowNetwork.expected_q`),
            for the double-Q choice; may be None when ``double=False``.
        next_logits_target: ``(B, A, K)`` target-network logits at ``s'``.
        support: ``(K,) float32`` atoms (``RainbowNetwork.support``); None when ``K == 1``.
        double: the double-Q choice of ``a*``.

    Returns:
        ``(losses (B,) float32, priorities (B,) float32)``: ``losses`` with the gradient through
        ``logits``; ``priorities`` without gradient, what
        `vecdqn.replay.PrioritizedReplayBuffer.update_priorities` takes as its TD errors (it
        stores ``|value| + ε``): the cross-entropy for ``K > 1``, the signed TD error for ``K == 1``.

    Raises:
        ValueError: an input of the wrong shape or dtype (see Args), or ``next_q_online`` None
            with ``double=True``.
    """
    _check_inputs(logits, actions, rewards, discounts, next_q_online, next_logits_target, support, double)
    rows = torch.arange(logits.shape[0], device=logits.device)
    with torch.no_grad():
        next_logits_target = next_logits_target.float()
        if logits.shape[2] == 1:
            next_q_target = next_logits_target.squeeze(2)
            best = next_q_online.argmax(dim=1) if double else next_q_target.argmax(dim=1)
            targets = rewards + discounts * next_q_target[rows, best]
        else:
            next_probs = F.softmax(next_logits_target, dim=2)
            best = next_q_online.argmax(dim=1) if double else (next_probs * support).sum(dim=2).argmax(dim=1)
            targets = categorical_projection(next_probs[rows, best], rewards, discounts, support)
    chosen = logits.float()[rows, actions]  # (B, K): the online logits of the actions taken
    if logits.shape[2] == 1:
        q_taken = chosen.squeeze(1)
        losses = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
        return losses, (targets - q_taken).detach()
    losses = -(targets * F.log_softmax(chosen, dim=1)).sum(dim=1)
    return losses, losses.detach()


def rainbow_loss(online: RainbowNetwork, target: RainbowNetwork, batch: DeviceBatch,
                 double: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The importance-weighted Rainbow loss of one replay batch: ``loss = mean_i w_i · ℓ_i`` with
    ``ℓ_i`` from `sample_losses` and ``w_i`` the importance-sampling weights of Schaul et al. 2016
    (Algorithm 1, line 12).

    Three forward passes, none of which changes the noise (the caller resamples first: see
    `RainbowNetwork.reset_noise`): the online network at ``s`` (with gradient) and at ``s'`` (its
    expected Q for the double-Q choice, with ``double``), the target network at ``s'``.

    Args:
        online, target: `RainbowNetwork` of one shape (the target's parameters are not updated
            through this loss: its outputs are taken without gradient).
        batch: a `vecdqn.staging.DeviceBatch` on the networks' device: ``obs, next_obs (B, S, H, H)
            uint8``, ``actions (B,) int64``, ``rewards``, ``discounts``, ``weights (B,) float32``.
        double: the double-Q choice of ``a*``.

    Returns:
        ``(loss () float32, priorities (B,) float32)``; only the loss carries a gradient; the
        priorities as `sample_losses` returns them.

    Raises:
        ValueError: networks with different numbers of atoms or actions, or a batch field of the
            wrong shape or dtype.
    """
    if (online.atoms, online.n_actions) != (target.atoms, target.n_actions):
        raise ValueError(f"rainbow_loss: the online network has {online.atoms} atoms and {online.n_actions} actions, "
                         f"the target {target.atoms} and {target.n_actions}; build both with the same arguments")
    b = batch.obs.shape[0]
    if batch.weights.shape != (b,):
        raise ValueError(f"rainbow_loss: weights has shape {tuple(batch.weights.shape)}; it must be ({b},), "
                         f"one per transition")
    logits = online.logits(online.scale(batch.obs))
    with torch.no_grad():
        next_logits_target = target.logits(target.scale(batch.next_obs))
        next_q_online = online.expected_q(online.logits(online.scale(batch.next_obs))) if double else None
    losses, priorities = sample_losses(logits, batch.actions, batch.rewards, batch.discounts, next_q_online,
                                       next_logits_target, online.support, double)
    return (batch.weights * losses).mean(), priorities
