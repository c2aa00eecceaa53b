"""The Q-network: Nature-DQN convolutional torso with a dueling head.

Shape legend: ``B`` batch, ``S`` stacked frames (4), ``A`` actions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from vecdqn.config import NETWORK_INITS

if TYPE_CHECKING:
    from vecdqn.config import Config

__all__ = ["QNetwork"]


class QNetwork(nn.Module):
    """Q-values of every action for a batch of stacked frames.

    Torso of Mnih et al. 2015 (Nature, Methods "Model architecture"): conv 32×8×8 stride 4,
    conv 64×4×4 stride 2, conv 64×3×3 stride 1, each ReLU, then a fully connected layer of
    ``hidden_size`` (512) units. Head (Wang et al. 2016, eq. 9):
    ``Q(s, a) = V(s) + A(s, a) − mean_a' A(s, a')``, each stream with its own hidden layer;
    ``dueling=False`` gives the plain Nature head.

    ``layer_norm=True`` puts a LayerNorm (learned elementwise affine, ε = 1e-5) between every
    convolution or hidden linear layer and its ReLU, as PQN does (Gallici et al. 2025, "Simplifying Deep
    Temporal Difference Learning": LayerNorm is what keeps TD learning stable without a target
    network). Each conv's
    output is normalized over its whole feature map ``(C, H', W')`` (for an 84×84 screen
    ``(32, 20, 20)``, ``(64, 9, 9)``, ``(64, 7, 7)``), the variant of CleanRL's
    ``pqn_atari_envpool.py``; each hidden linear layer over its ``hidden_size`` units. The output
    layers are not normalized. Off (the default), the module, its parameters and its
    ``state_dict`` keys are those of the plain network.

    Args:
        n_actions: number of discrete actions ``A`` (>= 1).
        in_channels: stacked frames ``S``.
        screen_size: height and width of a frame; the torso is sized for it.
        dueling: use the dueling head.
        hidden_size: units of the fully connected layer(s).
        layer_norm: LayerNorm before every hidden ReLU (see above).
        init: the initial weights: ``"torch"`` (PyTorch's defaults: Kaiming-uniform weights,
            uniform biases) or ``"orthogonal"`` (every convolution and linear layer, the output
            layers included, orthogonal with gain √2 (Saxe et al. 2014), zero biases: CleanRL's
            ``pqn_atari_envpool.py`` ``layer_init``). LayerNorm starts at weight 1, bias 0.

    ``forward(obs)``: ``obs (B, S, H, W) uint8`` (raw pixels; scaled to [0, 1] here, on the
    module's device) -> ``(B, A) float32``.

    Raises:
        ValueError: ``n_actions < 1``, or an unknown ``init``.
    """

    def __init__(self, n_actions: int, in_channels: int = 4, screen_size: int = 84, *,
                 dueling: bool = True, hidden_size: int = 512, layer_norm: bool = False, init: str = "torch"):
        super().__init__()
        if n_actions < 1:
            raise ValueError(f"n_actions={n_actions} must be >= 1")
        if init not in NETWORK_INITS:
            raise ValueError(f"init={init!r} is not one of {', '.join(NETWORK_INITS)}")
        self.n_actions = n_actions
        self.dueling = dueling
        self.layer_norm = layer_norm
        self._channels_last = False
        # (out channels, kernel, stride) of the Nature torso's convolutions
        convs = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
        torso: list[nn.Module] = []
        channels, side = in_channels, screen_size
        for out_channels, kernel, stride in convs:
            side = (side - kernel) // stride + 1  # no padding
            torso.append(nn.Conv2d(channels, out_channels, kernel_size=kernel, stride=stride))
            if layer_norm:
                torso.append(nn.LayerNorm([out_channels, side, side]))
            torso.append(nn.ReLU())
            channels = out_channels
        torso.append(nn.Flatten())
        self.torso = nn.Sequential(*torso)
        with torch.no_grad():
            n_flat = self.torso(torch.zeros(1, in_channels, screen_size, screen_size)).shape[1]
        if dueling:
            self.value = self._head(n_flat, hidden_size, 1)
            self.advantage = self._head(n_flat, hidden_size, n_actions)
        else:
            self.head = self._head(n_flat, hidden_size, n_actions)
        if init == "orthogonal":
            for module in self.modules():
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    nn.init.orthogonal_(module.weight, gain=math.sqrt(2))
                    nn.init.zeros_(module.bias)

    @classmethod
    def from_config(cls, config: Config, n_actions: int, obs_shape: Sequence[int] | None = None) -> QNetwork:
        """The run's Q-network: the one place a network is built from a `Config` (both learners,
        the Ape-X actors, the checkpoint loader and the start-up estimates use it), so training and
        loading cannot disagree on its shape.

        Args:
            config: its ``frame_stack``, ``screen_size``, ``dueling``, ``hidden_size``,
                ``uses_layer_norm`` and ``init``.
            n_actions: ``A``.
            obs_shape: ``(S, H, H)`` of one observation (e.g. a checkpoint's), instead of
                ``(frame_stack, screen_size, screen_size)``.

        Raises:
            ValueError: ``obs_shape`` is not ``(S, H, H)``, or ``n_actions < 1``.
        """
        shape = tuple(int(x) for x in obs_shape) if obs_shape is not None else (
            config.frame_stack, config.screen_size, config.screen_size)
        if len(shape) != 3 or shape[1] != shape[2]:
            raise ValueError(f"obs_shape {shape} is not (S, H, H)")
        return cls(n_actions, shape[0], shape[1], dueling=config.dueling, hidden_size=config.hidden_size,
                   layer_norm=config.uses_layer_norm, init=config.init)

    def _head(self, n_in: int, hidden_size: int, n_out: int) -> nn.Sequential:
        """Linear → (LayerNorm) → ReLU → Linear."""
        norm = [nn.LayerNorm(hidden_size)] if self.layer_norm else []
        return nn.Sequential(nn.Linear(n_in, hidden_size), *norm, nn.ReLU(), nn.Linear(hidden_size, n_out))

    def channels_last(self) -> QNetwork:
        """Store the convolution weights, and feed the convolutions, in NHWC order; returns self.

        Same arithmetic, different memory order: oneDNN's CPU convolutions run faster on it.
        """
        self.to(memory_format=torch.channels_last)
        self._channels_last = True
        return self

    def scale(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, S, H, W) uint8`` pixels -> ``(B, S, H, W) float32`` in ``[0, 1]``, in the memory order
        the convolutions read (NHWC after `channels_last`).

        The reorder is done on the ``uint8`` tensor (a quarter of the bytes) and the division in
        place: one float32 tensor is made, not three.
        """
        if self._channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        return obs.float().div_(255.0)

    def q_values(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values ``(B, A) float32`` of frames already put through `scale`."""
        x = self.torso(x)
        if not self.dueling:
            return self.head(x)
        value = self.value(x)
        advantage = self.advantage(x)
        # Subtracting the mean advantage makes V and A identifiable (Wang et al. 2016, eq. 9).
        return value + advantage - advantage.mean(dim=1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(self.scale(obs))
