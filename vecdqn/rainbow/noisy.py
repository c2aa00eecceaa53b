"""`NoisyLinear`: the factorised Gaussian noisy linear layer of NoisyNets.

Shape legend: ``B`` batch, ``p`` input features, ``q`` output features.

Fortunato et al. 2018, "Noisy Networks for Exploration" (ICLR), Sec. 3: a linear layer whose
weights are ``μ + σ ⊙ ε`` with learned ``μ, σ`` and noise ``ε``; the agent explores by acting
greedily on the noisy network, no ε-greedy (Hessel et al. 2018, "Rainbow", Table 1:
exploration ε 0 with noisy nets).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["NoisyLinear", "scaled_noise"]


def scaled_noise(size: int, generator: torch.Generator | None = None,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """``f(ε)`` for ``ε ~ N(0, 1)``, with ``f(x) = sgn(x) · √|x|`` (Fortunato et al. 2018, Sec. 3,
    below Eq. 11): the factors of factorised noise.

    Args:
        size: how many values, ``>= 1``.
        generator: draws ``ε`` (on the generator's device); None: torch's global generator of
            ``device``.
        device: where ``ε`` is drawn when ``generator`` is None (None: the CPU).

    Returns:
        ``(size,) float32``.
    """
    if generator is not None:
        device = generator.device
    eps = torch.randn(size, generator=generator, device=device, dtype=torch.float32)
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise on its weights and bias (Fortunato et al.
    2018, Sec. 3):

    - Eq. 9: ``y = (μ^w + σ^w ⊙ ε^w) x + μ^b + σ^b ⊙ ε^b``;
    - Eq. 10–11 (factorised noise): ``ε^w_{j,i} = f(ε_i) f(ε_j)``, ``ε^b_j = f(ε_j)``, one
      ``ε_i`` per input and one ``ε_j`` per output, ``f(x) = sgn(x) √|x|`` (`scaled_noise`);
    - Sec. 3.2 (initialisation for factorised noise): every ``μ`` drawn from
      ``U[−1/√p, 1/√p]``, every ``σ`` set to ``σ_0 / √p``.

    The noise is held in two buffers, ``epsilon_in (p,)`` = ``f(ε_i)`` and ``epsilon_out (q,)`` =
    ``f(ε_j)`` (``ε^w`` is their outer product, formed in each forward pass), so a checkpoint
    holds the noise and a reload computes the same outputs. The noise stays fixed until
    `reset_noise` draws a new sample: every row of a batch, and every forward pass in between,
    sees the same weights (NoisyNet-DQN holds one noise sample fixed across a replayed batch and
    draws a new one for the next: Fortunato et al. 2018, Sec. 3.1).

    Train mode (``.train()``, the default) uses the noisy weights; eval mode (``.eval()``) the
    mean weights ``μ`` only, ``y = μ^w x + μ^b``: the usual evaluation of a noisy agent (Dopamine's
    ``dopamine/jax/networks.py``: ``NoisyNetwork`` with ``eval_mode=True`` turns the noise off
    during evaluation). An evaluation that wants the noise keeps the network in train mode.

    When to resample is the caller's choice; `RainbowNetwork.reset_noise` states what this
    project's learner is to do.

    Args:
        in_features: ``p >= 1``.
        out_features: ``q >= 1``.
        sigma_0: ``σ_0 >= 0`` (0.5: Fortunato et al. 2018, Sec. 3.2; Hessel et al. 2018, Table 1).
        generator: draws the first noise sample (see `reset_noise`); the ``μ`` are drawn from
            torch's global generator, as ``nn.Linear`` draws its weights.

    ``forward(x)``: ``x (..., p) float32 -> (..., q) float32``.

    Raises:
        ValueError: ``in_features`` or ``out_features`` below 1, or ``sigma_0 < 0``.
    """

    def __init__(self, in_features: int, out_features: int, sigma_0: float = 0.5, *,
                 generator: torch.Generator | None = None):
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"NoisyLinear: in_features={in_features}, out_features={out_features}; both must be >= 1")
        if not sigma_0 >= 0:
            raise ValueError(f"NoisyLinear: sigma_0={sigma_0} must be >= 0, e.g. 0.5 (Fortunato et al. 2018)")
        self.in_features = in_features
        self.out_features = out_features
        self.sigma_0 = float(sigma_0)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("epsilon_in", torch.zeros(in_features))
        self.register_buffer("epsilon_out", torch.zeros(out_features))
        self.reset_parameters()
        self.reset_noise(generator)

    def reset_parameters(self) -> None:
        """``μ ~ U[−1/√p, 1/√p]``, ``σ = σ_0/√p`` (Fortunato et al. 2018, Sec. 3.2, factorised case)."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.bias_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.sigma_0 * bound)
            self.bias_sigma.fill_(self.sigma_0 * bound)

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise: ``epsilon_in`` first (``p`` normals), then ``epsilon_out`` (``q``
        normals), each through ``f`` (`scaled_noise`).

        Args:
            generator: the source of the normals (a run passes one it seeded, so the noise is
                reproducible); on another device than the layer the ``p + q`` values are copied
                over. None: torch's global generator of the layer's device.
        """
        device = self.epsilon_in.device
        self.epsilon_in.copy_(scaled_noise(self.in_features, generator, device))
        self.epsilon_out.copy_(scaled_noise(self.out_features, generator, device))

    def weight_epsilon(self) -> torch.Tensor:
        """``ε^w = f(ε_j) f(ε_i)``: ``(q, p) float32``, the outer product of the noise buffers."""
        return torch.outer(self.epsilon_out, self.epsilon_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * self.weight_epsilon()
        bias = self.bias_mu + self.bias_sigma * self.epsilon_out
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, sigma_0={self.sigma_0}"
