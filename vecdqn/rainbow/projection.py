"""C51's categorical projection: the distributional Bellman target on a fixed support.

Shape legend: ``B`` batch, ``K`` atoms. The support is ``K >= 2`` evenly spaced atoms
``z_i = v_min + i·Δz``, ``Δz = (v_max − v_min) / (K − 1)``, ``i = 0 … K−1``.
"""

from __future__ import annotations

import torch

__all__ = ["categorical_projection", "categorical_support"]


def categorical_support(atoms: int, v_min: float, v_max: float) -> torch.Tensor:
    """The atoms ``z_i = v_min + i·(v_max − v_min)/(K − 1)``, ``i = 0 … K−1`` (Bellemare, Dabney, Munos
    2017, "A Distributional Perspective on Reinforcement Learning", Sec. 4: ``K`` = 51 atoms on
    ``[−10, 10]`` for C51).

    Args:
        atoms: ``K >= 2``.
        v_min, v_max: the first and last atom, in (clipped) reward units, ``v_min < v_max``.

    Returns:
        ``(K,) float32`` on the CPU.

    Raises:
        ValueError: ``atoms < 2`` or ``v_min >= v_max``.
    """
    if atoms < 2:
        raise ValueError(f"categorical_support: atoms={atoms}; a categorical support needs at least 2 atoms, e.g. 51")
    if not v_min < v_max:
        raise ValueError(f"categorical_support: v_min={v_min} is not below v_max={v_max}; use e.g. -10 and 10")
    return torch.linspace(v_min, v_max, atoms, dtype=torch.float32)


def _check(name: str, tensor: object, dim: int) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"categorical_projection: {name} is a {type(tensor).__name__}, not a torch.Tensor")
    if tensor.dtype != torch.float32:
        raise ValueError(f"categorical_projection: {name} has dtype {tensor.dtype}; it must be torch.float32")
    if tensor.dim() != dim:
        raise ValueError(f"categorical_projection: {name} has shape {tuple(tensor.shape)}; it must have {dim} "
                         f"dimension{'s' if dim > 1 else ''}")
    return tensor


def categorical_projection(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """The projected distributional Bellman target ``m = Φ T̂ Z`` of C51 (Bellemare, Dabney, Munos
    2017, Algorithm 1; the projection ``Φ`` of Eq. 7), with Rainbow's n-step return
    (Hessel et al. 2018, Sec. "The Integrated Agent": ``R`` an n-step return, ``discount``
    ``γ^n`` or 0):

    - each atom moves to ``T̂z_j = clamp(R + discount · z_j, v_min, v_max)`` (mass beyond the
      support lands on its bounds);
    - its probability ``p_j`` is split between the two atoms around it, linearly in the distance:
      with ``b_j = (T̂z_j − v_min) / Δz``, ``l = ⌊b_j⌋``, ``u = l + 1``, atom ``l`` gets
      ``p_j · (u − b_j)`` and atom ``u`` gets ``p_j · (b_j − l)``, which is Eq. 7's
      ``m_i = Σ_j [1 − |T̂z_j − z_i| / Δz]_0^1 · p_j``.

    Where ``b_j`` is a whole number (``T̂z_j`` lands on an atom, the bounds included) the whole of
    ``p_j`` goes to that atom: ``u`` is taken as ``l + 1``, never ``⌈b_j⌉``, so the ``l == u`` case
    of Algorithm 1, which would give both shares ``0`` and lose the mass, cannot arise. Each row
    of the result sums to the row of ``next_probs`` (1) up to float rounding, and (where no atom
    is clamped) keeps its mean: ``Σ_i m_i z_i = R + discount · Σ_j p_j z_j``.

    Vectorized: two ``scatter_add_`` calls over the ``(B, K)`` tensor, no loop over rows or atoms.
    On CUDA the adds into one atom run in no fixed order, so results can differ in the last bit
    from run to run.

    Args:
        next_probs: ``(B, K) float32`` probabilities ``p_j`` of the bootstrap distribution (the
            target network's, at the chosen next action); rows sum to 1 (not checked).
        rewards: ``(B,) float32`` n-step returns ``R = Σ_{k<n} γ^k r_{t+k}`` of clipped rewards.
        discounts: ``(B,) float32`` ``γ^h · (1 − terminated)`` with ``h <= n`` the steps in the
            return: 0 after a termination (all the mass goes to the atoms around ``R``), ``γ^h``
            after a truncation (it bootstraps).
        support: ``(K,) float32`` evenly spaced increasing atoms, ``K >= 2``
            (`categorical_support`; the spacing is not checked, which would cost a device sync).

    Returns:
        ``(B, K) float32`` target probabilities ``m``, on the inputs' device, without gradient.

    Raises:
        ValueError: an input that is not a float32 tensor of its shape (``B >= 1``, ``K >= 2``,
            one ``B`` and one ``K`` throughout), or inputs on different devices.

    A terminal transition with ``R = 0.5`` on five atoms ``−2 … 2``: ``b = 2.5``, half the mass to
    the atom 0, half to the atom 1, whatever the next distribution:

    >>> support = categorical_support(5, -2.0, 2.0)
    >>> categorical_projection(torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]), torch.tensor([0.5]),
    ...                        torch.tensor([0.0]), support)
    tensor([[0.0000, 0.0000, 0.5000, 0.5000, 0.0000]])
    """
    _check("next_probs", next_probs, 2)
    _check("rewards", rewards, 1)
    _check("discounts", discounts, 1)
    _check("support", support, 1)
    batch, atoms = next_probs.shape
    if batch < 1 or atoms < 2:
        raise ValueError(f"categorical_projection: next_probs has shape {tuple(next_probs.shape)}; it must be (B, K) "
                         f"with B >= 1 and K >= 2 atoms")
    if support.shape != (atoms,):
        raise ValueError(f"categorical_projection: support has shape {tuple(support.shape)} but next_probs has "
                         f"{atoms} atoms; pass the support of the distribution, ({atoms},)")
    for name, tensor in (("rewards", rewards), ("discounts", discounts)):
        if tensor.shape != (batch,):
            raise ValueError(f"categorical_projection: {name} has shape {tuple(tensor.shape)} but next_probs has "
                             f"{batch} rows; pass one value per row, ({batch},)")
    for name, tensor in (("rewards", rewards), ("discounts", discounts), ("support", support)):
        if tensor.device != next_probs.device:
            raise ValueError(f"categorical_projection: {name} is on {tensor.device}, next_probs on "
                             f"{next_probs.device}; put them on one device")

    with torch.no_grad():
        v_min, v_max = support[0], support[-1]
        delta_z = (v_max - v_min) / (atoms - 1)
        # T̂z_j = R + discount · z_j, clamped onto [v_min, v_max] (Algorithm 1, line "T̂z_j ← [r + γ z_j]")
        tz = torch.clamp(rewards.unsqueeze(1) + discounts.unsqueeze(1) * support.unsqueeze(0), v_min, v_max)
        # b_j in [0, K − 1]; the clamp guards against one ulp of rounding past the last atom
        b = ((tz - v_min) / delta_z).clamp_(0.0, atoms - 1)
        lower = b.floor().long()
        upper_share = b - lower  # b_j − l, in [0, 1): the share of atom l + 1
        upper = (lower + 1).clamp_(max=atoms - 1)  # at b_j = K − 1 its share is 0: nothing is added past the end
        target = torch.zeros_like(next_probs)
        target.scatter_add_(1, lower, next_probs * (1.0 - upper_share))
        target.scatter_add_(1, upper, next_probs * upper_share)
    return target
