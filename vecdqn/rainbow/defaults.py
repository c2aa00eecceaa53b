"""Rainbow's hyperparameters, in this project's units, each with its source.

Hessel et al. 2018, "Rainbow: Combining Improvements in Deep Reinforcement Learning" (AAAI),
Table 1 gives its counts in Atari frames; here every count is in agent steps, one agent step
being ``FRAMES_PER_AGENT_STEP`` = 4 frames (the action repeat of Mnih et al. 2015, Methods;
``MaxAndSkip(4)``). Keys are `vecdqn.config.Config`'s field names where a field exists; ``atoms``,
``v_min``, ``v_max`` and ``sigma_0`` are Rainbow's own (`RainbowNetwork`'s arguments).
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["FRAMES_PER_AGENT_STEP", "RAINBOW_DEFAULTS"]

FRAMES_PER_AGENT_STEP = 4

RAINBOW_DEFAULTS: MappingProxyType[str, float | int] = MappingProxyType({
    # Table 1, "Distributional atoms": 51 (C51, Bellemare, Dabney, Munos 2017)
    "atoms": 51,
    # Table 1, "Distributional min/max values": [−10, 10], in clipped-reward units
    "v_min": -10.0,
    "v_max": 10.0,
    # Table 1, "Noisy Nets σ0": 0.5 (Fortunato et al. 2018, Sec. 3.2)
    "sigma_0": 0.5,
    # Table 1, "Exploration ε": 0 (noisy nets explore; the agent acts greedily on them)
    "epsilon_start": 0.0,
    "epsilon_end": 0.0,
    # Table 1, "Multi-step returns n": 3
    "n_step": 3,
    # Table 1, "Adam learning rate": 0.0000625 (DQN's 0.00025 / 4)
    "learning_rate": 6.25e-5,
    # Table 1, "Adam ε": 1.5 × 10^-4
    "adam_eps": 1.5e-4,
    # Table 1, "Prioritization exponent ω": 0.5 (proportional prioritization)
    "per_alpha": 0.5,
    # Table 1, "Prioritization importance sampling β": 0.4 → 1.0, annealed linearly over the
    # whole run (Hessel et al. 2018, "Hyper-parameter tuning"): per_beta_steps is the run's length
    "per_beta_start": 0.4,
    "per_beta_end": 1.0,
    # Table 1, "Target Network Period": 32K frames = 8K agent steps
    "target_update_frequency": 32_000 // FRAMES_PER_AGENT_STEP,
    # Table 1, "Min history to start learning": 80K frames = 20K agent steps
    "learning_starts": 80_000 // FRAMES_PER_AGENT_STEP,
    # Not in Table 1: Rainbow keeps DQN's discount factor, 0.99 (Mnih et al. 2015, Extended Data Table 1)
    "gamma": 0.99,
})
