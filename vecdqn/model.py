"""The Q-network: Nature-DQN convolutional torso with a dueling head.

Shape legend: ``B`` batch, ``S`` stacked frames (4), ``A`` actions.
"""

from __future__ import annotations

import torch
from torch import nn


class QNetwork(nn.Module):
    """Q-values of every action for a batch of stacked frames.

    Torso of Mnih et al. 2015 (Nature, Methods "Model architecture"): conv 32×8×8 stride 4,
    conv 64×4×4 stride 2, conv 64×3×3 stride 1, each ReLU, then a fully connected layer of
    ``hidden_size`` (512) units. Head (Wang et al. 2016, eq. 9):
    ``Q(s, a) = V(s) + A(s, a) − mean_a' A(s, a')``, each stream with its own hidden layer;
    ``dueling=False`` gives the plain Nature head.

    Args:
        n_actions: number of discrete actions ``A`` (>= 1).
        in_channels: stacked frames ``S``.
        screen_size: height and width of a frame; the torso is sized for it.
        dueling: use the dueling head.
        hidden_size: units of the fully connected layer(s).

    ``forward(obs)``: ``obs (B, S, H, W) uint8`` (raw pixels; scaled to [0, 1] here, on the
    module's device) -> ``(B, A) float32``.
    """

    def __init__(self, n_actions: int, in_channels: int = 4, screen_size: int = 84, *,
                 dueling: bool = True, hidden_size: int = 512):
        super().__init__()
        if n_actions < 1:
            raise ValueError(f"n_actions={n_actions} must be >= 1")
        self.n_actions = n_actions
        self.dueling = dueling
        self._channels_last = False
        self.torso = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.torso(torch.zeros(1, in_channels, screen_size, screen_size)).shape[1]
        if dueling:
            self.value = nn.Sequential(nn.Linear(n_flat, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1))
            self.advantage = nn.Sequential(
                nn.Linear(n_flat, hidden_size), nn.ReLU(), nn.Linear(hidden_size, n_actions)
            )
        else:
            self.head = nn.Sequential(nn.Linear(n_flat, hidden_size), nn.ReLU(), nn.Linear(hidden_size, n_actions))

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
