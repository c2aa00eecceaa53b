"""Catch (bsuite), rendered as an Atari-sized RGB frame: ``vecdqn/Catch-v0``.

A ball falls one row per agent step from a random column of the top row of a 10 x 5 board;
the paddle on the bottom row moves left (action 0), stays (1) or moves right (2). When the ball
reaches the bottom row (after 9 steps) the episode terminates with reward +1 if the paddle is
under it and -1 otherwise; every other reward is 0 (Osband et al. 2020, "Behaviour Suite for
Reinforcement Learning", bsuite ``catch``).

The board is drawn on a ``(210, 160, 3) uint8`` frame, the ALE's screen size, one cell =
21 x 32 pixels, so ``GrayscaleResize`` and ``FrameStack`` apply unchanged; after the 84 x 84
``INTER_AREA`` resize a cell is about 8 x 17 pixels. It learns in minutes on a CPU, which makes
it the smoke test of the whole trainer.

Registered on ``import vecdqn``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["Catch", "CATCH_ID"]

CATCH_ID = "vecdqn/Catch-v0"

ROWS, COLUMNS = 10, 5
SCREEN_HEIGHT, SCREEN_WIDTH = 210, 160
CELL_HEIGHT, CELL_WIDTH = SCREEN_HEIGHT // ROWS, SCREEN_WIDTH // COLUMNS  # 21, 32 pixels
# Distinct bright colours; their luminance (ITU-R 601, cv2.COLOR_RGB2GRAY) is 255 and 226.
BALL_RGB = (255, 255, 255)
PADDLE_RGB = (255, 255, 0)


class Catch(gym.Env):
    """bsuite Catch on a 10 rows x 5 columns board, observed as ``(210, 160, 3) uint8`` RGB.

    Actions ``Discrete(3)``: 0 left, 1 stay, 2 right (the paddle stops at the walls).
    Rewards: +1 catch, -1 miss, on the 9th (terminating) step; 0 before. Never truncates.
    The paddle starts in the middle column; the ball's column is drawn from ``self.np_random``,
    so ``reset(seed=s)`` fixes the episode sequence. ``render_mode="rgb_array"`` returns the
    same frame as the observation. The ball is drawn over the paddle when caught.

    Raises:
        ValueError: an unsupported ``render_mode``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; use 'rgb_array' or None"
            )
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Box(
            0, 255, (SCREEN_HEIGHT, SCREEN_WIDTH, 3), dtype=np.uint8
        )
        self.ball_row = 0
        self.ball_column = 0
        self.paddle_column = COLUMNS // 2
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.ball_row = 0
        self.ball_column = int(self.np_random.integers(COLUMNS))
        self.paddle_column = COLUMNS // 2
        self._done = False
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("Catch.step() called after the episode ended; call reset() first")
        if not self.action_space.contains(int(action)):
            raise ValueError(f"action={action!r} is invalid; use 0 (left), 1 (stay), 2 (right)")
        # bsuite order: the paddle moves, then the ball falls one row.
        self.paddle_column = min(max(self.paddle_column + int(action) - 1, 0), COLUMNS - 1)
        self.ball_row += 1
        terminated = self.ball_row == ROWS - 1
        reward = 0.0
        if terminated:
            reward = 1.0 if self.ball_column == self.paddle_column else -1.0
            self._done = True
        return self._frame(), reward, terminated, False, {}

    def render(self) -> np.ndarray | None:
        """``(210, 160, 3) uint8`` with ``render_mode="rgb_array"``, else None."""
        return self._frame() if self.render_mode == "rgb_array" else None

    def board(self) -> np.ndarray:
        """The board as ``(10, 5) uint8``: 0 empty, 1 ball, 2 paddle (ball over paddle)."""
        board = np.zeros((ROWS, COLUMNS), dtype=np.uint8)
        board[ROWS - 1, self.paddle_column] = 2
        board[self.ball_row, self.ball_column] = 1
        return board

    def _frame(self) -> np.ndarray:
        frame = np.zeros((SCREEN_HEIGHT, SCREEN_WIDTH, 3), dtype=np.uint8)
        for (row, column), rgb in (
            ((ROWS - 1, self.paddle_column), PADDLE_RGB),
            ((self.ball_row, self.ball_column), BALL_RGB),
        ):
            top, left = row * CELL_HEIGHT, column * CELL_WIDTH
            frame[top : top + CELL_HEIGHT, left : left + CELL_WIDTH] = rgb
        return frame


if CATCH_ID not in gym.registry:
    gym.register(id=CATCH_ID, entry_point="vecdqn.envs.catch:Catch")
