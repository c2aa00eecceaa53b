"""`lambda_returns`: Peng's Q(λ) returns of one rollout, as PQN computes them.

Shape legend: ``T`` rollout steps, ``N`` envs. ``s_{t+1}`` is the observation after step ``t``:
the next row's observation inside the rollout, the observation after the last step at
``t = T − 1``, and the **final** observation (``info["final_obs"]``), never the next episode's
first, where step ``t`` ended an episode.
"""

from __future__ import annotations

import torch

__all__ = ["lambda_returns"]


def _check_unit_interval(name: str, value: float, example: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"lambda_returns: {name}={value} is outside [0, 1]; use a {name} in [0, 1], e.g. {example}")


def lambda_returns(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    next_q_max: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Peng's Q(λ) returns of one rollout, as PQN computes them (Gallici et al. 2025, Algorithm 1;
    Peng & Williams 1996), backwards over ``t``:

    - at the rollout's last step (``t = T − 1``), or where step t ended an episode
      (``terminated_t or truncated_t``): ``G_t = r_t + γ · (1 − terminated_t) · next_q_max_t``
    - otherwise: ``G_t = r_t + γ · (λ · G_{t+1} + (1 − λ) · next_q_max_t)``

    So a termination stops the recursion and bootstraps from nothing; a truncation stops it and
    bootstraps from the final observation's value; the next episode's steps never reach the
    earlier one. ``λ = 0`` gives one-step Q-learning targets, ``λ = 1`` Monte-Carlo returns within
    the rollout, bootstrapped at its end and at truncations.

    Args:
        rewards: ``(T, N) float32`` rewards ``r_t``.
        terminated: ``(T, N) bool``; step t ended its episode by termination (a life loss
            counts when life loss is an episode's end).
        truncated: ``(T, N) bool``; step t ended its episode by a time limit.
        next_q_max: ``(T, N) float32`` ``max_a Q(s_{t+1}, a)``, ``s_{t+1}`` as the module states
            (the final observation where step t ended an episode). Treated as a constant.
        gamma: discount ``γ`` in ``[0, 1]``.
        lam: ``λ`` in ``[0, 1]``.

    Returns:
        ``(T, N) float32`` returns ``G``, on the inputs' device, without gradient.

    Raises:
        ValueError: an input that is not a tensor of its shape and dtype (all ``(T, N)`` with
            ``T, N >= 1``, on one device), or ``gamma``/``lam`` outside ``[0, 1]``.
    """
    inputs = {"rewards": (rewards, torch.float32), "terminated": (terminated, torch.bool),
              "truncated": (truncated, torch.bool), "next_q_max": (next_q_max, torch.float32)}
    for name, (tensor, dtype) in inputs.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"lambda_returns: {name} is a {type(tensor).__name__}, not a torch.Tensor")
        if tensor.dtype != dtype:
            raise ValueError(f"lambda_returns: {name} has dtype {tensor.dtype}; it must be {dtype}")
    if rewards.dim() != 2 or 0 in rewards.shape:
        raise ValueError(f"lambda_returns: rewards has shape {tuple(rewards.shape)}; it must be (T, N) with T, N >= 1")
    for name, (tensor, _) in inputs.items():
        if tensor.shape != rewards.shape:
            raise ValueError(f"lambda_returns: {name} has shape {tuple(tensor.shape)}, rewards "
                             f"{tuple(rewards.shape)}; all four must be (T, N)")
        if tensor.device != rewards.device:
            raise ValueError(f"lambda_returns: {name} is on {tensor.device}, rewards on {rewards.device}")
    _check_unit_interval("gamma", gamma, 0.99)
    _check_unit_interval("lam", lam, 0.65)

    with torch.no_grad():
        bootstrap = gamma * (~terminated).float() * next_q_max  # γ (1 − terminated_t) next_q_max_t
        ended = terminated | truncated
        returns = torch.empty_like(rewards)
        returns[-1] = rewards[-1] + bootstrap[-1]
        for t in range(rewards.shape[0] - 2, -1, -1):
            mixed = rewards[t] + gamma * (lam * returns[t + 1] + (1.0 - lam) * next_q_max[t])
            returns[t] = torch.where(ended[t], rewards[t] + bootstrap[t], mixed)
    return returns
