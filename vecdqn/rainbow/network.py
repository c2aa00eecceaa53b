"""`RainbowNetwork`: the Nature torso, a dueling head over return distributions, noisy layers.

Shape legend: ``B`` batch, ``S`` stacked frames (4), ``H`` frame side (84), ``A`` actions, ``K``
atoms of the return distribution (``K == 1``: no distribution, one Q-value per action).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vecdqn.rainbow.noisy import NoisyLinear
from vecdqn.rainbow.projection import categorical_support

__all__ = ["RainbowNetwork"]


class RainbowNetwork(nn.Module):
    """Return distributions (or Q-values) of every action for a batch of stacked frames.

    - Torso: Mnih et al. 2015 (Nature, Methods "Model architecture"), the layers of
      `vecdqn.model.QNetwork`'s torso without LayerNorm (same ``torso.*`` names): conv 32×8×8
      stride 4, conv 64×4×4 stride 2, conv 64×3×3 stride 1, each ReLU, flattened.
    - Head (``dueling=True``): a value stream ``v (B, K)`` and an advantage stream ``a (B, A, K)``,
      each a hidden layer of ``hidden_size`` units, ReLU, and an output layer, combined per atom
      (Wang et al. 2016, Eq. 9; Hessel et al. 2018, Sec. "The Integrated Agent", the dueling
      architecture adapted to return distributions):
      ``logits_k(s, a) = v_k(s) + a_k(s, a) − mean_a' a_k(s, a')``; the distribution is
      ``p_k(s, a) = softmax_k logits(s, a)``. ``dueling=False``: one stream of ``A·K`` outputs.
    - ``noisy=True``: every linear layer of the head is a `NoisyLinear` with factorised noise
      (Hessel et al. 2018, Sec. "The Integrated Agent": all linear layers are replaced by their
      noisy equivalent); the convolutions stay plain. ``noisy=False``: ``nn.Linear`` layers, no noise
      buffers, and `reset_noise` does nothing.
    - ``atoms=K > 1``: C51's categorical distribution on ``K`` atoms evenly spaced on
      ``[v_min, v_max]`` (Bellemare, Dabney, Munos 2017), held in the non-persistent buffer
      ``support (K,) float32`` (a constant of the constructor's arguments, not in the
      ``state_dict``). ``atoms=1``: no distribution; the single "logit" of an action is its
      Q-value and ``support`` is None: a (noisy, dueling) Q-network.

    ``forward(obs)``: ``obs (B, S, H, H) uint8`` (raw pixels, scaled to ``[0, 1]`` here, on the
    module's device) -> ``(B, A) float32`` Q-values (`q_values`), the contract of every network a
    learner acts with (`vecdqn.learners.LearnerSpec.network`): evaluation and video take the
    argmax. Learning reads the distributions: ``logits(scale(obs)) -> (B, A, K) float32``
    (unnormalised log-probabilities over the last axis; ``F.log_softmax(logits, -1)`` gives
    ``log p``; for ``K == 1`` the Q-values ``(B, A, 1)``).

    Train mode uses the noise the layers hold (see `reset_noise`); eval mode the mean weights.

    Args:
        n_actions: ``A >= 1``.
        in_channels: ``S``.
        screen_size: ``H``; the torso is sized for it (at least 36).
        atoms: ``K >= 1`` (51: Bellemare, Dabney, Munos 2017; Hessel et al. 2018, Table 1).
        v_min, v_max: the support's bounds, in clipped-reward units, ``v_min < v_max`` when
            ``K > 1`` (−10 and 10: same sources); unused when ``K == 1``.
        dueling: the dueling head.
        noisy: noisy linear layers in the head.
        sigma_0: `NoisyLinear`'s ``σ_0`` (0.5: Hessel et al. 2018, Table 1).
        hidden_size: units of each stream's hidden layer (512).
        generator: draws the first noise sample of the noisy layers (torch's global generator
            when None; the weights always come from torch's global generator).

    Raises:
        ValueError: ``n_actions < 1``, ``atoms < 1``, ``v_min >= v_max`` with ``atoms > 1``, or
            ``sigma_0 < 0``.
    """

    def __init__(self, n_actions: int, in_channels: int = 4, screen_size: int = 84, *, atoms: int = 51,
                 v_min: float = -10.0, v_max: float = 10.0, dueling: bool = True, noisy: bool = True,
                 sigma_0: float = 0.5, hidden_size: int = 512, generator: torch.Generator | None = None):
        super().__init__()
        if n_actions < 1:
            raise ValueError(f"RainbowNetwork: n_actions={n_actions} must be >= 1")
        if atoms < 1:
            raise ValueError(f"RainbowNetwork: atoms={atoms} must be >= 1 (1: no distribution, a Q-value per action)")
        if not sigma_0 >= 0:
            raise ValueError(f"RainbowNetwork: sigma_0={sigma_0} must be >= 0, e.g. 0.5 (Hessel et al. 2018)")
        self.n_actions = n_actions
        self.atoms = atoms
        self.dueling = dueling
        self.noisy = noisy
        support = categorical_support(atoms, v_min, v_max) if atoms > 1 else None
        self.register_buffer("support", support, persistent=False)
        # (out channels, kernel, stride) of the Nature torso's convolutions, as in vecdqn.model
        convs = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
        torso: list[nn.Module] = []
        channels = in_channels
        for out_channels, kernel, stride in convs:
            torso += [nn.Conv2d(channels, out_channels, kernel_size=kernel, stride=stride), nn.ReLU()]
            channels = out_channels
        torso.append(nn.Flatten())
        self.torso = nn.Sequential(*torso)
        with torch.no_grad():
            n_flat = self.torso(torch.zeros(1, in_channels, screen_size, screen_size)).shape[1]

        def linear(n_in: int, n_out: int) -> nn.Module:
            return NoisyLinear(n_in, n_out, sigma_0, generator=generator) if noisy else nn.Linear(n_in, n_out)

        def stream(n_out: int) -> nn.Sequential:
            return nn.Sequential(linear(n_flat, hidden_size), nn.ReLU(), linear(hidden_size, n_out))

        if dueling:
            self.value = stream(atoms)
            self.advantage = stream(n_actions * atoms)
        else:
            self.head = stream(n_actions * atoms)

    @classmethod
    def from_config(cls, config: Any, n_actions: int, obs_shape: Sequence[int] | None = None) -> RainbowNetwork:
        """The run's network (`vecdqn.config.Config`'s ``atoms``, ``v_min``, ``v_max``, ``noisy``,
        ``noisy_sigma``, ``dueling``, ``hidden_size``, ``frame_stack``, ``screen_size``) for
        ``A = n_actions`` and observations ``obs_shape`` ``(S, H, H)`` (None: the config's), its
        first noise drawn from torch's global generator."""
        channels, side = (config.frame_stack, config.screen_size) if obs_shape is None else obs_shape[:2]
        return cls(n_actions, int(channels), int(side), atoms=config.atoms, v_min=config.v_min,
                   v_max=config.v_max, dueling=config.dueling, noisy=config.noisy, sigma_0=config.noisy_sigma,
                   hidden_size=config.hidden_size)

    def channels_last(self) -> RainbowNetwork:
        """Store the convolution weights, and feed the convolutions, in NHWC order (oneDNN's CPU
        convolutions run faster on it; the same arithmetic); returns self."""
        self.to(memory_format=torch.channels_last)
        self._channels_last = True
        return self

    def scale(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, S, H, H) uint8`` pixels -> ``(B, S, H, H) float32`` in ``[0, 1]`` (in NHWC memory
        order after `channels_last`)."""
        if getattr(self, "_channels_last", False):
            obs = obs.contiguous(memory_format=torch.channels_last)
        return obs.float().div_(255.0)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, A, K) float32`` logits (see the class) of frames already put through `scale`."""
        features = self.torso(x)
        b = features.shape[0]
        if not self.dueling:
            return self.head(features).view(b, self.n_actions, self.atoms)
        value = self.value(features).view(b, 1, self.atoms)
        advantage = self.advantage(features).view(b, self.n_actions, self.atoms)
        # The mean advantage over actions, per atom, makes V and A identifiable (Wang et al. 2016, Eq. 9)
        return value + advantage - advantage.mean(dim=1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(obs)

    def expected_q(self, logits: torch.Tensor) -> torch.Tensor:
        """Q-values of logits: ``(B, A, K) -> (B, A) float32``.

        ``K > 1``: ``Q(s, a) = Σ_k z_k p_k(s, a)`` with ``p = softmax_k logits`` (Bellemare, Dabney,
        Munos 2017, Sec. 4 / Algorithm 1, ``Q(x_{t+1}, a) := Σ_i z_i p_i(x_{t+1}, a)``).
        ``K == 1``: the logits are the Q-values.
        """
        if self.support is None:
            return logits.squeeze(-1).float()
        return (F.softmax(logits.float(), dim=-1) * self.support).sum(dim=-1)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs (B, S, H, H) uint8 -> (B, A) float32``: `expected_q` of the logits; what the
        greedy policy maximises (with the noise the layers hold, in train mode)."""
        return self.expected_q(self.logits(self.scale(obs)))

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Draw new noise for every `NoisyLinear` of the head, in module order (value stream, then
        advantage stream; hidden layer, then output layer), from ``generator`` (torch's global
        generator when None). Nothing to draw with ``noisy=False``.

        When a learner resamples (what this project's Rainbow learner is to do; Fortunato et al.
        2018, Appendix C, Algorithm 1, NoisyNet-DQN):

        - before each action selection, the online network: one sample per vector step, shared
          by the ``N`` actions that one forward pass chooses;
        - before each gradient update, the online and the target network, independently: the
          online network's sample serves its prediction at ``s`` and the double-DQN choice of
          ``a*`` at ``s'``, the target network's its distribution at ``s'``. Algorithm 1 draws a
          third, separate sample for the ``a*`` choice; one forward pass over ``s`` and ``s'`` with
          one sample is the simplification Kaixhin's Rainbow (``agent.py``, ``learn``) makes too.

        Evaluation puts the network in eval mode: the mean weights, no noise (`NoisyLinear`).
        """
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise(generator)
