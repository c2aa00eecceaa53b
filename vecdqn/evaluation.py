"""Evaluation the way papers report it: whole games, raw scores, human-normalized scores.

Protocol (what `evaluate` plays):

* **Whole games.** ``episodic_life=False``: a lost life does not end the episode, so a score is
  the game's score, as in every results table (Mnih et al. 2015, Methods, "Evaluation
  procedure"; Machado et al. 2018, Sec. 5).
* **Raw rewards.** The env never clips; the sign clipping is the learner's, and scores here are
  the game's own points.
* **No-op starts** of 1..``noop_max`` frames and FIRE after each reset, as in training, so the
  policy sees the start states it learned from (Mnih et al. 2015, Extended Data Table 1).
* **FIRE after a lost life** when training did that too (``fire_reset`` with ``episodic_life``):
  the policy then never learned to serve a new ball itself (see `evaluate`'s
  ``fire_on_life_loss``; off for the papers' protocol, in which the agent presses FIRE).
* **Epsilon-greedy with a small epsilon** (0.001 by default, the evaluation epsilon of
  van Hasselt et al. 2016's tuned Double DQN; Mnih et al. 2015 used 0.05): a little randomness
  keeps a deterministic emulator from replaying one identical game, and stops a greedy policy
  from standing still forever.
* **A frame cap** per game: 108,000 frames (30 minutes at 60 Hz) as in the 57-game reference
  scores of `vecdqn.scores` (Machado et al. 2018, Sec. 5).

Shape legend: ``E`` episodes, ``T`` recorded frames, ``H×W`` raw screen (210×160 for the ALE),
``S`` stacked frames, ``A`` actions. Units: lengths and caps are emulator **frames** (one
``ale.act``; env steps for non-ALE envs such as Catch), not agent steps.

Recording: every raw frame of the real game, in colour and at the screen's native size, is
seen by `FrameTap`, a wrapper placed directly around the base env through ``make_env``'s
``base_wrapper`` hook; ``MaxAndSkip`` steps its inner env once per frame, so the tap sees each
one. The frames of the best episode (highest score, first one on ties) are kept.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import gymnasium as gym
import numpy as np
import torch

from vecdqn import checkpoint
from vecdqn.config import Config
from vecdqn.model import QNetwork
from vecdqn.scores import HUMAN_RANDOM_SCORES, SCORE_SOURCE, game_name, human_normalized_score
from vecdqn.wrappers import make_env

__all__ = [
    "EvalResult",
    "FrameTap",
    "Policy",
    "evaluate",
    "load_policy",
    "read_policy",
    "resolve_checkpoint",
    "video_for_tensorboard",
    "write_video",
]

#: Frames per second of the Atari 2600's NTSC display: the playback rate of a raw-frame video.
ATARI_FPS = 60

# ------------------------------------------------------------------------------------------------
# Loading a trained policy


@dataclass
class Policy:
    """A Q-network loaded from a checkpoint, with what came with it.

    ``network`` maps ``(B, S, 84, 84) uint8 -> (B, A) float32`` on ``device``; ``config`` is the
    training run's `Config` (env id and preprocessing); ``step`` the agent step of the checkpoint.
    """

    network: QNetwork
    config: Config
    path: Path
    step: int | None
    device: torch.device


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """A checkpoint file; for a run folder ``checkpoints/latest.pt`` if present, else ``final.pt``.

    Raises:
        checkpoint.CheckpointError: if the path does not exist or the folder holds neither file.
    """
    path = Path(path)
    if path.is_dir():
        for name in ("latest.pt", "final.pt"):
            candidate = path / "checkpoints" / name
            if candidate.is_file():
                return candidate
        raise checkpoint.CheckpointError(
            f"run folder {path} has no checkpoints/latest.pt or checkpoints/final.pt; pass a "
            "checkpoint file or a run folder that finished or saved a checkpoint"
        )
    if not path.exists():
        raise checkpoint.CheckpointError(f"checkpoint {path} does not exist")
    return path


def read_policy(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> Policy:
    """Load the online Q-network of a vecdqn checkpoint (file or run folder) onto ``device``.

    The network is rebuilt from the saved ``n_actions``, ``obs_shape`` and the config's
    ``dueling`` and ``hidden_size``, then given the weights ``agent["online"]``; it is in eval mode.

    Raises:
        checkpoint.CheckpointError: missing, corrupt or foreign checkpoint, or weights that do not
            fit the network the checkpoint describes.
    """
    file = resolve_checkpoint(path)
    state = checkpoint.load(file, required=("config", "agent", "n_actions", "obs_shape"))
    try:
        config = Config.from_dict(state["config"])
        obs_shape = tuple(int(x) for x in state["obs_shape"])
        if len(obs_shape) != 3 or obs_shape[1] != obs_shape[2]:
            raise ValueError(f"obs_shape {obs_shape} is not (S, size, size)")
        network = QNetwork(
            int(state["n_actions"]),
            in_channels=obs_shape[0],
            screen_size=obs_shape[1],
            dueling=config.dueling,
            hidden_size=config.hidden_size,
        )
        network.load_state_dict(state["agent"]["online"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        # RuntimeError: load_state_dict's missing/unexpected keys or size mismatches.
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise checkpoint.CheckpointError(
            f"checkpoint {file} does not hold a loadable Q-network "
            f"({type(err).__name__}: {first_line})"
        ) from None
    device = torch.device(device)
    network.to(device).eval()
    step = state.get("step")
    return Policy(network, config, file, int(step) if step is not None else None, device)


def load_policy(
    path: str | os.PathLike[str], device: torch.device | str = "cpu"
) -> tuple[QNetwork, Config]:
    """``(q_network, config)`` of a checkpoint file or run folder; see `read_policy`."""
    policy = read_policy(path, device)
    return policy.network, policy.config


# ------------------------------------------------------------------------------------------------
# Seeing every raw frame


class FrameTap(gym.Wrapper):
    """Sits directly around the base env: counts frames, sums raw rewards, captures RGB screens.

    Installed through ``make_env(..., base_wrapper=...)``, below RecordEpisodeStatistics and the
    no-op/skip/FIRE wrappers, so it sees each emulator frame, including the no-ops and the FIRE
    of a reset. A reset of the base env starts a new count (a reset-time step that ended a game
    discards that game, and so does the count).

    Attributes:
        frames: emulator frames (base-env steps) since the last base reset.
        score: sum of the raw rewards of those frames: the game's score.
        is_ale: whether the base env is an ALE game (else ``frames`` counts env steps).
        fps: real-time playback rate of the frames: 60 for the ALE, else the env's
            ``metadata["render_fps"]`` (60 if it has none).

    Args:
        env: the base env (``gym.make`` result).
        on_frame: if given, called with ``(H, W, 3) uint8`` RGB for the reset screen and after each
            frame, and with ``None`` first on each reset (a new episode starts). The RGB comes from
            ``ale.getScreenRGB()`` for ALE games (the env's observations are grayscale),
            else from ``render()`` if the env renders ``rgb_array``, else from the observation if it
            is an RGB frame (Catch's observation is its rendering).

    Raises:
        ValueError: ``on_frame`` is given but the env offers no RGB frame.
    """

    def __init__(self, env: gym.Env, on_frame: Callable[[np.ndarray | None], None] | None = None):
        super().__init__(env)
        self.frames = 0
        self.score = 0.0
        self.on_frame = on_frame
        self._screen = _rgb_source(env) if on_frame is not None else None
        self.is_ale = getattr(env.unwrapped, "ale", None) is not None
        # Real-time playback: the ALE runs at 60 frames/s; other envs say so in their metadata.
        self.fps = float(ATARI_FPS if self.is_ale else env.metadata.get("render_fps") or ATARI_FPS)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.frames = 0
        self.score = 0.0
        if self.on_frame is not None:
            self.on_frame(None)
            self.on_frame(self._screen(obs))
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames += 1
        self.score += float(reward)
        if self.on_frame is not None:
            self.on_frame(self._screen(obs))
        return obs, reward, terminated, truncated, info


def _rgb_source(env: gym.Env) -> Callable[[Any], np.ndarray]:
    """A function ``obs -> (H, W, 3) uint8`` giving the env's current screen in colour."""
    ale = getattr(env.unwrapped, "ale", None)
    if ale is not None:
        return lambda obs: ale.getScreenRGB()
    if getattr(env, "render_mode", None) == "rgb_array":
        return lambda obs: np.asarray(env.render(), dtype=np.uint8)
    space = env.observation_space
    if (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[2] == 3
    ):
        return lambda obs: np.array(obs, dtype=np.uint8, copy=True)
    raise ValueError(
        f"cannot record {env.spec.id if env.spec else env}: it is not an ALE game, does not render "
        "rgb_array and its observations are not RGB frames; evaluate without a video"
    )


class _BestEpisode:
    """Keeps the frames of the best-scoring episode: a prefix in memory and/or the whole as mp4.

    In memory at most ``max_frames`` frames of each episode are kept (about 100 kB each for the
    ALE; a 108,000-frame game would take 11 GB). The video is streamed to a temporary file per
    episode and kept or deleted when the episode ends, so memory stays constant.
    """

    def __init__(
        self, keep_in_memory: bool, max_frames: int | None, video_path: Path | None, fps: float
    ):
        self.keep_in_memory = keep_in_memory
        self.max_frames = max_frames
        self.video_path = video_path
        self.fps = fps
        self.current: list[np.ndarray] = []
        self.best: list[np.ndarray] | None = None
        self.best_score = -math.inf
        self._writer: _VideoFile | None = None
        self._best_file: Path | None = None

    def __call__(self, frame: np.ndarray | None) -> None:
        if frame is None:  # a reset: whatever was captured belongs to a discarded game
            self.current = []
            if self._writer is not None:
                self._writer.discard()
                self._writer = None
            return
        if self.keep_in_memory and (self.max_frames is None or len(self.current) < self.max_frames):
            self.current.append(frame)
        if self.video_path is not None:
            if self._writer is None:
                self._writer = _VideoFile(_temporary_beside(self.video_path), frame.shape, self.fps)
            self._writer.write(frame)

    def end_episode(self, score: float) -> None:
        """Keep this episode's frames if it scored more than every earlier one."""
        better = score > self.best_score
        if better:
            self.best_score = score
            if self.keep_in_memory:
                self.best = self.current
        self.current = []
        if self._writer is not None:
            self._writer.close()
            if better:
                if self._best_file is not None:
                    self._best_file.unlink(missing_ok=True)
                self._best_file = self._writer.path
            else:
                self._writer.path.unlink(missing_ok=True)
            self._writer = None

    def finish(self) -> None:
        """Move the best episode's video to ``video_path``."""
        if self.video_path is not None and self._best_file is not None:
            os.replace(self._best_file, self.video_path)
            self._best_file = None

    def cleanup(self) -> None:
        """Delete temporary files (after an error, or what `finish` did not move)."""
        if self._writer is not None:
            self._writer.discard()
            self._writer = None
        if self._best_file is not None:
            self._best_file.unlink(missing_ok=True)
            self._best_file = None


def _temporary_beside(path: Path) -> Path:
    """A fresh ``.mp4`` path in ``path``'s folder, so the final rename stays on one file system.

    Not made by ``tempfile.mkstemp``: OpenCV creates the file, with the usual permissions
    (mkstemp's 0600 would survive the rename).
    """
    return path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}.tmp.mp4")


class _VideoFile:
    """An OpenCV mp4v writer for RGB frames of one fixed size."""

    def __init__(self, path: Path, shape: tuple[int, ...], fps: float):
        if len(shape) != 3 or shape[2] != 3:
            raise ValueError(f"video frames must be (H, W, 3) uint8 RGB, got shape {shape}")
        self.path = path
        self.shape = tuple(shape)
        height, width = shape[0], shape[1]
        self._writer = cv2.VideoWriter(
            str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (width, height)
        )
        if not self._writer.isOpened():
            self._writer.release()
            path.unlink(missing_ok=True)
            raise OSError(
                f"cannot write video {path}: OpenCV's mp4v VideoWriter did not open; "
                "use a .mp4 path in a writable folder"
            )

    def write(self, frame: np.ndarray) -> None:
        if frame.shape != self.shape:
            raise ValueError(
                f"video frame of shape {frame.shape} in a video of {self.shape} frames"
            )
        # OpenCV writes BGR.
        self._writer.write(
            cv2.cvtColor(np.ascontiguousarray(frame, dtype=np.uint8), cv2.COLOR_RGB2BGR)
        )

    def close(self) -> None:
        self._writer.release()

    def discard(self) -> None:
        self._writer.release()
        self.path.unlink(missing_ok=True)


def write_video(
    path: str | os.PathLike[str], frames: np.ndarray | list[np.ndarray], fps: float = ATARI_FPS
) -> Path:
    """Write RGB frames to an mp4 file (OpenCV ``VideoWriter``, codec mp4v), atomically.

    Args:
        path: the ``.mp4`` file to write; its folder must exist.
        frames: ``(T, H, W, 3) uint8`` RGB, ``T >= 1``.
        fps: playback rate; 60 plays raw Atari frames in real time.

    Returns:
        the path written.

    Raises:
        ValueError: no frames, or frames that are not ``(H, W, 3)`` of one size.
        OSError: the file cannot be written.
    """
    path = Path(path)
    if len(frames) == 0:
        raise ValueError(f"no frames to write to {path}")
    tmp = _temporary_beside(path)
    video = _VideoFile(tmp, np.shape(frames[0]), fps)
    try:
        for frame in frames:
            video.write(np.asarray(frame))
        video.close()
        os.replace(tmp, path)
    except BaseException:
        video.discard()
        raise
    return path


def video_for_tensorboard(
    frames: np.ndarray | list[np.ndarray],
    max_frames: int = 300,
    scale: float = 0.5,
    *,
    stride: int = 4,
) -> np.ndarray:
    """RGB frames as a small clip for ``SummaryWriter.add_video``.

    Every ``stride``-th frame from the start, at most ``max_frames`` of them, each resized by
    ``scale`` (``cv2.INTER_AREA``). With raw Atari frames and ``stride=4`` (one frame per agent
    step) 300 frames cover the first 20 s of the game; play them at ``fps = 60 / stride``.

    Args:
        frames: ``(T, H, W, 3) uint8`` RGB.

    Returns:
        ``(1, T', 3, round(H·scale), round(W·scale)) uint8``,
        ``T' = min(max_frames, ceil(T / stride))``.

    Raises:
        ValueError: no frames, or a non-positive ``max_frames``, ``scale`` or ``stride``.
    """
    if len(frames) == 0:
        raise ValueError("no frames to make a video of")
    if max_frames < 1 or stride < 1 or not scale > 0:
        raise ValueError(
            f"max_frames={max_frames} and stride={stride} must be >= 1 and scale={scale} > 0"
        )
    chosen = [np.asarray(f, dtype=np.uint8) for f in frames[::stride][:max_frames]]
    height, width = chosen[0].shape[:2]
    size = (
        max(1, round(width * scale)),
        max(1, round(height * scale)),
    )  # cv2 wants (width, height)
    small = np.stack([cv2.resize(f, size, interpolation=cv2.INTER_AREA) for f in chosen])
    return np.ascontiguousarray(small.transpose(0, 3, 1, 2)[None])


# ------------------------------------------------------------------------------------------------
# Evaluation


@dataclass
class EvalResult:
    """Scores of an evaluation.

    Attributes:
        env_id: the game played.
        returns: ``(E,) float64`` raw game scores, one per whole game.
        lengths: ``(E,) int64`` game lengths in emulator frames (no-op and FIRE frames included;
            env steps for non-ALE envs, see ``length_unit``).
        truncated: ``(E,) bool`` whether a game hit the frame cap instead of ending.
        epsilon, seed, noop_max, max_episode_frames: the protocol used.
        best_episode: index of the highest score (first on ties).
        fire_on_life_loss: whether FIRE was pressed for the agent after each lost life.
        length_unit: ``"frames"`` (ALE games) or ``"env steps"`` (other envs).
        frames: with ``record=True``, ``(T, H, W, 3) uint8`` RGB frames of the best episode (its
            reset screen, then one per emulator frame; at most ``record_max_frames``), else None.
        video_path: the mp4 of the best episode, if one was written.
    """

    env_id: str
    returns: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray
    epsilon: float
    seed: int | None
    noop_max: int
    max_episode_frames: int
    best_episode: int
    fire_on_life_loss: bool = False
    length_unit: str = "frames"
    frames: np.ndarray | None = field(default=None, repr=False)
    video_path: str | None = None

    @property
    def game(self) -> str | None:
        return game_name(self.env_id)

    @property
    def stats(self) -> dict[str, float]:
        """``episodes``, ``mean``, ``std`` (population, ddof=0), ``median``, ``min``, ``max`` of the
        raw scores and ``mean_length`` (frames)."""
        r = self.returns
        return {
            "episodes": int(r.size),
            "mean": float(np.mean(r)),
            "std": float(np.std(r)),
            "median": float(np.median(r)),
            "min": float(np.min(r)),
            "max": float(np.max(r)),
            "mean_length": float(np.mean(self.lengths)),
        }

    @property
    def hns(self) -> float | None:
        """Human-normalized score of the mean score (the per-game number papers average); None
        for games without reference scores."""
        return human_normalized_score(self.env_id, float(np.mean(self.returns)))

    def to_dict(self) -> dict[str, Any]:
        """Everything but the frames, as JSON-ready values (None where there is no reference)."""
        game = self.game
        random_score, human_score = HUMAN_RANDOM_SCORES[game] if game else (None, None)
        return {
            "env_id": self.env_id,
            "game": game,
            **self.stats,
            "hns": self.hns,
            "random_score": random_score,
            "human_score": human_score,
            "score_source": SCORE_SOURCE if game else None,
            "returns": [float(x) for x in self.returns],
            "lengths": [int(x) for x in self.lengths],
            "truncated": [bool(x) for x in self.truncated],
            "best_episode": self.best_episode,
            "epsilon": self.epsilon,
            "seed": self.seed,
            "noop_max": self.noop_max,
            "max_episode_frames": self.max_episode_frames,
            "fire_on_life_loss": self.fire_on_life_loss,
            "length_unit": self.length_unit,
            "video": self.video_path,
        }


def evaluate(
    q_network: Callable[[torch.Tensor], torch.Tensor],
    config: Config,
    *,
    episodes: int,
    epsilon: float,
    seed: int | None,
    device: torch.device | str,
    noop_max: int | None = None,
    max_episode_frames: int | None = None,
    record: bool = False,
    record_max_frames: int | None = 1_200,
    video_path: str | os.PathLike[str] | None = None,
    video_fps: float | None = None,
    fire_on_life_loss: bool | None = None,
) -> EvalResult:
    """Play ``episodes`` whole games with an epsilon-greedy policy and report raw scores.

    The env is a fresh, single (non-vectorized) ``make_env(config.env_id, ...)`` with the run's
    preprocessing (frame skip, stack, screen size, FIRE reset, sticky actions) but
    ``episodic_life=False``; it is closed before returning. Each step takes a uniform random
    action with probability ``epsilon``, else ``argmax_a Q(obs, a)``.

    Args:
        q_network: ``(1, S, 84, 84) uint8 -> (1, A) float32``, already on ``device`` (e.g. the
            trainer's online network, or `load_policy`'s).
        config: the training run's config (env id and preprocessing).
        episodes: whole games to play, ``>= 1``.
        epsilon: probability of a random action per agent step, in [0, 1].
        seed: seeds the env's first reset (no-op counts, sticky actions) and the action choice;
            None draws fresh entropy.
        device: where observations go for the forward pass.
        noop_max: at most this many no-op frames at the start of each game; None: the config's.
        max_episode_frames: cap per game in frames; None: the config's.
        record: keep the best episode's RGB frames in `EvalResult.frames`.
        record_max_frames: keep at most this many frames from the start of each episode in
            memory (None: all; ~100 kB per frame).
        video_path: also write the best episode, every frame, to this mp4 (streamed: constant
            memory). Its folder must exist.
        video_fps: playback rate of that video; None: real time (60 for the ALE, else the env's
            ``metadata["render_fps"]``).
        fire_on_life_loss: after a lost life (game not over) take FIRE as the next action, for
            games that have FIRE. None: as in training, i.e. when the config has both
            ``fire_reset`` and ``episodic_life`` (training then pressed FIRE after every life
            loss, so the policy never had to learn that FIRE serves a new ball in Breakout; left
            to itself it may wait for an epsilon-random FIRE, thousands of frames). False gives
            the papers' protocol, where the agent presses FIRE itself.

    Returns:
        an `EvalResult`.

    Raises:
        ValueError: a bad argument, or a network whose input/output does not fit the env.
        OSError: the video cannot be written.
    """
    if isinstance(episodes, bool) or int(episodes) != episodes or episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be a positive integer")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon={epsilon!r} must be in [0, 1]")
    noop_max = config.noop_max if noop_max is None else int(noop_max)
    max_episode_frames = (
        config.max_episode_frames if max_episode_frames is None else int(max_episode_frames)
    )
    if noop_max < 0 or max_episode_frames < 1:
        raise ValueError(
            f"noop_max={noop_max} must be >= 0 and max_episode_frames={max_episode_frames} >= 1"
        )
    if record_max_frames is not None and record_max_frames < 1:
        raise ValueError(f"record_max_frames={record_max_frames} must be >= 1 or None")
    device = torch.device(device)
    video = Path(video_path) if video_path is not None else None

    recorder = (
        _BestEpisode(record, record_max_frames, video, video_fps or ATARI_FPS)
        if (record or video)
        else None
    )
    taps: list[FrameTap] = []

    def tap(env: gym.Env) -> gym.Env:
        taps.append(FrameTap(env, on_frame=recorder))
        return taps[-1]

    env = make_env(
        config.env_id,
        noop_max=noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        frame_stack=config.frame_stack,
        episodic_life=False,  # whole games: the score papers report
        fire_reset=config.fire_reset,
        repeat_action_probability=config.repeat_action_probability,
        max_episode_frames=max_episode_frames,
        base_wrapper=tap,  # sees every raw frame: counts them, sums the score, records
    )
    try:
        frame_tap = taps[0]
        if recorder is not None and video_fps is None:
            recorder.fps = frame_tap.fps
        n_actions = int(env.action_space.n)
        obs_shape = env.observation_space.shape
        with torch.inference_mode():
            q = q_network(torch.zeros((1, *obs_shape), dtype=torch.uint8, device=device))
        if tuple(q.shape) != (1, n_actions):
            raise ValueError(
                f"the Q-network maps a {obs_shape} observation to {tuple(q.shape)} values, but "
                f"{config.env_id} has {n_actions} actions; evaluate with the config saved with "
                "the network"
            )
        if fire_on_life_loss is None:
            fire_on_life_loss = config.fire_reset and config.episodic_life
        meanings = getattr(env.unwrapped, "get_action_meanings", lambda: [])()
        fire_action = meanings.index("FIRE") if fire_on_life_loss and "FIRE" in meanings else None
        rng = np.random.default_rng(seed)
        returns, lengths, truncations = [], [], []
        for episode in range(episodes):
            # Seed only the first reset: later games continue the env's generator, so each one
            # starts after a different number of no-ops.
            obs, info = env.reset(seed=seed if episode == 0 else None)
            lives = info.get("lives")
            fire_next = False
            while True:
                if fire_next:
                    action = fire_action
                elif rng.random() < epsilon:
                    action = int(rng.integers(n_actions))
                else:
                    with torch.inference_mode():
                        obs_t = torch.from_numpy(np.ascontiguousarray(obs)[None]).to(device)
                        action = int(q_network(obs_t).argmax(dim=1).item())
                obs, _, terminated, truncated, info = env.step(action)
                new_lives = info.get("lives")
                fire_next = (
                    fire_action is not None
                    and new_lives is not None
                    and lives is not None
                    and new_lives < lives
                )
                lives = new_lives
                # The ALE truncates at the cap itself; counting here covers envs that do not.
                capped = frame_tap.frames >= max_episode_frames
                if terminated or truncated or capped:
                    break
            returns.append(frame_tap.score)
            lengths.append(frame_tap.frames)
            truncations.append(not terminated)
            if recorder is not None:
                recorder.end_episode(frame_tap.score)
        if recorder is not None:
            recorder.finish()
    finally:
        env.close()
        if recorder is not None:
            recorder.cleanup()

    returns_arr = np.asarray(returns, dtype=np.float64)
    frames = None
    if record and recorder.best:
        frames = np.stack(recorder.best)
    return EvalResult(
        env_id=config.env_id,
        returns=returns_arr,
        lengths=np.asarray(lengths, dtype=np.int64),
        truncated=np.asarray(truncations, dtype=bool),
        epsilon=float(epsilon),
        seed=seed,
        noop_max=noop_max if frame_tap.is_ale else 0,  # non-ALE envs get no no-op starts
        max_episode_frames=max_episode_frames,
        best_episode=int(np.argmax(returns_arr)),
        fire_on_life_loss=fire_action is not None,
        length_unit="frames" if frame_tap.is_ale else "env steps",
        frames=frames,
        video_path=str(video) if video is not None else None,
    )
