"""Fixtures shared by test modules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from vecdqn import checkpoint
from vecdqn.config import Config
from vecdqn.model import QNetwork


def _save_fresh_checkpoint(path: Path, env_id: str, n_actions: int, **config: object) -> Path:
    """A freshly initialised network saved in the trainer's checkpoint format, at agent step 1234."""
    cfg = Config(env_id=env_id, **config)
    torch.manual_seed(0)
    net = QNetwork(n_actions, dueling=cfg.dueling, hidden_size=cfg.hidden_size)
    state = {
        "format": checkpoint.CHECKPOINT_FORMAT,
        "config": cfg.to_dict(),
        "train_state": {"step": 1234, "updates": 0},
        "agent": {"online": net.state_dict()},
        "n_actions": n_actions,
        "obs_shape": (4, 84, 84),
    }
    return checkpoint.save_atomic(state, path)


@pytest.fixture(scope="session")
def save_fresh_checkpoint() -> Callable[..., Path]:
    """``save(path, env_id, n_actions, **config) -> path``: a fresh Q-network as a checkpoint."""
    return _save_fresh_checkpoint
