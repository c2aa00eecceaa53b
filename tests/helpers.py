"""Shared test helpers: a small, fast Catch configuration."""

from pathlib import Path

from vecdqn.config import PRESETS, Config


def catch_config(tmp_path: Path, **overrides) -> Config:
    """The Catch preset shrunk for tests: 2 envs, a 2,000-slot replay, learning from step 100."""
    values = {**PRESETS["catch"], "num_envs": 2, "buffer_size": 2_000, "learning_starts": 100,
              "target_update_frequency": 100, "log_every": 100, "hidden_size": 32, "log_dir": str(tmp_path),
              "seed": 7, "n_step": 3}
    values.update(overrides)
    return Config(**values)
