"""Shared test helpers: a small, fast Catch configuration; a Catch that raises; a train.py
process signalled once its env workers run."""

import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil

from vecdqn.config import Config
from vecdqn.envs.catch import Catch
from vecdqn.presets import PRESETS


def catch_config(tmp_path: Path, **overrides) -> Config:
    """The Catch preset shrunk for tests: 2 envs, a 2,000-slot replay, learning from step 100."""
    values = {**PRESETS["catch"], "num_envs": 2, "buffer_size": 2_000, "learning_starts": 100,
              "target_update_frequency": 100, "log_every": 100, "hidden_size": 32, "log_dir": str(tmp_path),
              "seed": 7, "n_step": 3}
    values.update(overrides)
    return Config(**values)


class ReplayOnly:
    """What `vecdqn.distributed.blocks.BlockIngest` writes through (`vecdqn.learners.ReplayLearner`),
    without a learner: ``store`` is the replay's ``add``, ``set_priorities`` its
    ``update_priorities``."""

    def __init__(self, buffer):
        self.buffer = buffer
        self.n_step = buffer.n_step

    def start_envs(self, count):
        self.buffer.start_envs(count)

    def store(self, *transitions, envs=None):
        return self.buffer.add(*transitions, envs=envs)

    def set_priorities(self, slots, td_errors):
        self.buffer.update_priorities(slots, td_errors)


class RaisingCatch(Catch):
    """Catch whose env first seeded ``raise_seed`` raises on its ``raise_step``-th step (its
    process lives on): an emulator bug, as an env worker sees it."""

    def __init__(self, raise_seed: int = -1, raise_step: int = 50, **kwargs):
        super().__init__(**kwargs)
        self.raise_seed, self.raise_step = raise_seed, raise_step
        self.steps_taken, self.first_seed = 0, None

    def reset(self, *, seed=None, options=None):
        if seed is not None and self.first_seed is None:
            self.first_seed = seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps_taken += 1
        if self.steps_taken == self.raise_step and self.first_seed == self.raise_seed:
            raise RuntimeError(f"emulator exploded on step {self.raise_step}")
        return super().step(action)


RAISING_CATCH_ID = "vecdqn-test/RaisingCatch-v0"


def register_test_envs() -> None:
    """Register `RaisingCatch` (raising in the env seeded 10: with seed 7 and 2 envs per actor,
    actor 1's env 1) in this process; the Ray fixture runs it in every Ray worker too."""
    if RAISING_CATCH_ID not in gym.registry:
        gym.register(RAISING_CATCH_ID, entry_point="helpers:RaisingCatch", kwargs={"raise_seed": 10})


def forward_view_lambda_returns(rewards, terminated, truncated, next_q_max, gamma, lam):
    """Peng's Q(λ) return as the λ-weighted mix of n-step returns (the forward view), per env in
    float64 (torch tensors ``(T, N)`` in, ``(T, N) float64`` NumPy out):
    ``G^λ_t = (1 − λ) Σ_{n<h} λ^{n−1} G^(n)_t + λ^{h−1} G^(h)_t`` where ``h`` counts the
    steps from t to the rollout's end or the episode's, whichever comes first, and ``G^(h)``
    bootstraps with ``(1 − terminated)`` at that last step."""
    r, q = rewards.double().numpy(), next_q_max.double().numpy()
    ended = (terminated | truncated).numpy()
    term = terminated.numpy()
    t_len, n_envs = r.shape
    out = np.zeros((t_len, n_envs))
    for n in range(n_envs):
        for t in range(t_len):
            h = 1
            while t + h - 1 < t_len - 1 and not ended[t + h - 1, n]:
                h += 1
            total = 0.0
            for k in range(1, h + 1):
                last = t + k - 1
                boot = q[last, n] * (1.0 - term[last, n] if k == h else 1.0)
                g_k = sum(gamma**i * r[t + i, n] for i in range(k)) + gamma**k * boot
                total += (lam ** (h - 1) if k == h else (1 - lam) * lam ** (k - 1)) * g_k
            out[t, n] = total
    return out


TRAIN_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train.py"
TRAIN_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def signal_training(args: list[str], signum: int, workers: int, settle: float
                    ) -> tuple[int, str, list[psutil.Process]]:
    """Start ``scripts/train.py args``, wait (up to 60 s) for ``workers`` child processes, let it
    train ``settle`` seconds, send ``signum`` and wait for it to exit. Returns ``(exit code, its
    stderr, the children seen)``; a process still running on the way out is killed.

    Raises:
        AssertionError: the env workers did not start within 60 s.
    """
    proc = subprocess.Popen([sys.executable, str(TRAIN_SCRIPT), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=TRAIN_ENV)
    try:
        deadline, children = time.time() + 60, []
        while time.time() < deadline and len(children) < workers:
            time.sleep(0.5)
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
        assert len(children) >= workers, "env workers did not start"
        time.sleep(settle)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err, children
