"""Evaluation on whole games with raw and human-normalized scores, as papers report them (FIRE
after a lost life as in training unless ``fire_on_life_loss=False``, the papers' protocol; below).

Protocol (what `evaluate` plays):

* **Whole games.** ``episodic_life=False``: a lost life does not end the episode, so a score is
  the game's score, as in every results table (Mnih et al. 2015, Methods, "Evaluation
  procedure"; Machado et al. 2018, Sec. 5).
* **Raw rewards.** The env never clips; the sign clipping is the learner's, and scores here are
  the game's own points.
* **No-op starts** of 1..``noop_max`` frames and FIRE after each reset, as in training, so the
  policy sees the start states it learned from (Mnih et al. 2015, Extended Data Table 1).
* **FIRE after a lost life** when training did that too (``fire_reset`` with ``episodic_life``):
  the policy then never learned to serve a new ball itself, and left alone may wait thousands of
  frames for an epsilon-random FIRE (see `evaluate`'s ``fire_on_life_loss``; off for the papers'
  protocol, in which the agent presses FIRE).
* **Epsilon-greedy with a small epsilon** (0.001 by default, the evaluation epsilon of
  van Hasselt et al. 2016's tuned Double DQN; Mnih et al. 2015 used 0.05): a little randomness
  keeps a deterministic emulator from replaying one identical game, and stops a greedy policy
  from standing still forever.
* **A frame cap** per game: 108,000 frames (30 minutes at 60 Hz) as in the 57-game reference
  scores of `vecdqn.scores` (Machado et al. 2018, Sec. 5).

Shape legend: ``E`` episodes, ``T`` recorded frames, ``H×W`` raw screen (210×160 for the ALE),
``S`` stacked frames, ``A`` actions. Units: lengths and caps are emulator **frames** (one
``ale.act``; env steps for non-ALE envs such as Catch), not agent steps.

Counting and recording: every raw frame of the real game is seen by `FrameTap`, a wrapper
placed directly around the base env through ``make_env``'s ``base_wrapper`` hook; ``MaxAndSkip``
steps its inner env once per frame, so the tap sees each one. The tap counts the game's frames
and sums its raw score, and hands each screen, in colour and at its native size, to
`vecdqn.video.BestEpisodeRecorder`, which keeps the best episode (highest score, first one on
ties) in memory and/or as an mp4.

Scores and their normalization live in `vecdqn.scores`; the policy of a checkpoint comes from
`vecdqn.checkpoint.load_policy`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from vecdqn.acting import epsilon_greedy
from vecdqn.config import Config
from vecdqn.envs import env_family, make_env
from vecdqn.envs.frame_tap import FrameTap
from vecdqn.scores import HUMAN_RANDOM_SCORES, SCORE_SOURCE, game_name, human_normalized_score
from vecdqn.values import check_int
from vecdqn.video import BestEpisodeRecorder, video_for_tensorboard

__all__ = [
    "EVAL_SEED_OFFSET",
    "PROTOCOL_TAGS",
    "EvalResult",
    "evaluate",
    "evaluate_and_log",
    "periodic_eval_seed",
]


# Keeps the evaluation's seeds away from the training envs' (seed + agent step).
EVAL_SEED_OFFSET = 1_000_003
# `EvalResult.protocol`'s tags: games, epsilon, no-op starts, frame cap, FIRE after a lost life
PROTOCOL_TAGS = ("protocol/episodes", "protocol/epsilon", "protocol/noop_max", "protocol/max_episode_frames",
                 "protocol/fire_on_life_loss")


def periodic_eval_seed(run_seed: int, step: int) -> int:
    """The seed of a run's periodic evaluation at agent step ``step``: ``run_seed + 1_000_003 + step``.

    Every evaluation of a run plays other games, and `scripts/evaluate.py --every-checkpoint`
    uses the same seed for a kept checkpoint, so it plays exactly the games (and, from the same
    weights, gets exactly the scores) the run's own evaluation at that step would have.
    """
    return run_seed + EVAL_SEED_OFFSET + step


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
        frames_fps: frames per second that play ``frames`` (one per emulator frame) in real
            time (`vecdqn.envs.EnvFamily.playback_fps`), or None without frames.
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
    frames_fps: float | None = None

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

    @property
    def scalars(self) -> dict[str, float]:
        """What a run logs of this evaluation: ``eval/return_mean``, ``eval/return_std`` and, for
        games with reference scores, ``eval/hns``."""
        values = {"eval/return_mean": self.stats["mean"], "eval/return_std": self.stats["std"]}
        if self.hns is not None:
            values["eval/hns"] = self.hns
        return values

    @property
    def protocol(self) -> dict[str, float]:
        """How the games were played, as the scalars ``scripts/evaluate.py --every-checkpoint``
        logs beside the scores (``protocol/episodes``, ``protocol/epsilon``, ``protocol/noop_max``,
        ``protocol/max_episode_frames``, ``protocol/fire_on_life_loss`` 0 or 1), so that
        evaluations of one run made with other settings can be told apart."""
        values = (self.returns.size, self.epsilon, self.noop_max, self.max_episode_frames, self.fire_on_life_loss)
        return {tag: float(value) for tag, value in zip(PROTOCOL_TAGS, values, strict=True)}

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
    on_game: Callable[[float], None] | None = None,
) -> EvalResult:
    """Play ``episodes`` whole games with an epsilon-greedy policy and report raw scores.

    The env is a fresh, single (non-vectorized) ``make_env(config.env_id, ...)`` with the run's
    preprocessing (frame skip, stack, screen size, FIRE reset, sticky actions) but
    ``episodic_life=False``; it is closed before returning. Each agent step takes a uniform
    random action with probability ``epsilon``, else ``argmax_a Q(obs, a)``.

    Args:
        q_network: ``(1, S, 84, 84) uint8 -> (1, A) float32``, already on ``device`` (e.g. the
            trainer's online network, or ``vecdqn.checkpoint.load_policy(...).network``); a
            ``torch.nn.Module`` plays in eval mode and is returned to the mode it was in.
        config: the training run's config (env id and preprocessing).
        episodes: whole games to play, ``>= 1``.
        epsilon: probability of a random action per agent step, in [0, 1].
        seed: seeds the env's first reset (no-op counts, sticky actions) and the action choice;
            None draws fresh entropy.
        device: where observations go for the forward pass.
        noop_max: at most this many no-op frames at the start of each game; None: the config's.
        max_episode_frames: cap per game in emulator frames; None: the config's.
        record: keep the best episode's RGB frames in `EvalResult.frames`.
        record_max_frames: keep at most this many frames from the start of each episode in
            memory (None: all; ~100 kB per ALE frame).
        video_path: also write the best episode, every frame, to this mp4 (streamed: constant
            memory). Its folder must exist.
        video_fps: playback rate of that video in frames per second; None: real time (60 for
            the ALE, else the env's ``metadata["render_fps"]``).
        fire_on_life_loss: after a lost life (game not over) take FIRE as the next action, for
            games that have FIRE. None: as in training, i.e. when the config has both
            ``fire_reset`` and ``episodic_life`` (see the module docstring). False gives the
            papers' protocol, where the agent presses FIRE itself.
        on_game: called with each game's raw score as the game ends (e.g. to advance a
            progress bar).

    Returns:
        an `EvalResult`.

    Raises:
        ValueError: a bad argument, or a network whose input/output does not fit the env.
        OSError: the video cannot be written.
    """
    noop_max, max_episode_frames = _checked_protocol(
        config, episodes, epsilon, noop_max, max_episode_frames, record_max_frames
    )
    video = Path(video_path) if video_path is not None else None
    family = env_family(config.env_id)
    recorder = BestEpisodeRecorder(record, record_max_frames, video, video_fps or 60.0) if record or video else None
    env, tap = _tapped_env(config, recorder, noop_max=noop_max, max_episode_frames=max_episode_frames)
    real_time = family.playback_fps(env)  # the env's own frame rate
    # A module plays in eval mode (e.g. noisy layers at their mean weights), and is handed back in
    # the mode it came in.
    training = isinstance(q_network, torch.nn.Module) and q_network.training
    try:
        if recorder is not None and video_fps is None:
            recorder.fps = real_time
        if training:
            q_network.eval()
        actor = _make_actor(env, q_network, config, torch.device(device), epsilon, seed, fire_on_life_loss)
        returns, lengths, truncated = _play_games(env, tap, actor, recorder, episodes, seed, max_episode_frames,
                                                  on_game)
    finally:
        if training:
            q_network.train()
        env.close()
        if recorder is not None:
            recorder.cleanup()
    return EvalResult(
        config.env_id, returns, lengths, truncated, epsilon=float(epsilon), seed=seed,
        noop_max=noop_max if family.fire_and_noop else 0,
        max_episode_frames=max_episode_frames,
        best_episode=int(np.argmax(returns)),
        fire_on_life_loss=actor.fire_action is not None,
        length_unit=family.length_unit,
        frames=np.stack(recorder.best) if record and recorder.best else None,
        video_path=str(video) if video is not None else None,
        frames_fps=real_time if record and recorder.best else None,
    )


def evaluate_and_log(network: torch.nn.Module, c: Config, step: int, device: torch.device, logger: Any) -> None:
    """The periodic evaluation of a run at agent step ``step``: `evaluate` in a separate,
    non-vectorized env (the training envs untouched), then ``logger`` (a
    `vecdqn.metrics.MetricsLogger`) gets ``eval/return_mean``, ``eval/return_std``, ``eval/hns``,
    ``eval/video`` (the best game's first 300 agent steps at half size, played in real time:
    `vecdqn.envs.EnvFamily.playback_fps` over the frames per agent step) and one console line."""
    result = evaluate(network, c, episodes=c.eval_episodes, epsilon=c.eval_epsilon,
                      seed=periodic_eval_seed(c.seed, step), device=device, record=True, record_max_frames=1_200)
    stats = result.stats
    logger.scalars(step, result.scalars)
    if result.frames is not None and len(result.frames):
        stride = env_family(c.env_id).frames_per_step(c.env_options())  # one frame per agent step
        clip = video_for_tensorboard(result.frames, max_frames=300, scale=0.5, stride=stride)
        logger.video("eval/video", clip, step, fps=result.frames_fps / stride)
    logger.write(
        f"eval at agent step {step}: return {stats['mean']:.2f} ± {stats['std']:.2f} over {stats['episodes']} "
        "games" + (f", human-normalized {result.hns:.3f}" if result.hns is not None else "")
    )


def _checked_protocol(
    config: Config,
    episodes: int,
    epsilon: float,
    noop_max: int | None,
    max_episode_frames: int | None,
    record_max_frames: int | None,
) -> tuple[int, int]:
    """``(noop_max, max_episode_frames)`` in frames, the config's where None is given.

    Raises:
        ValueError: naming the argument, if ``episodes`` is not a positive integer, ``epsilon`` is
            outside [0, 1], ``noop_max < 0``, ``max_episode_frames < 1`` or
            ``record_max_frames < 1``.
    """
    check_int(f"episodes={episodes!r}", episodes, 1, "use a positive number of games")
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
    return noop_max, max_episode_frames


def _tapped_env(
    config: Config,
    recorder: BestEpisodeRecorder | None,
    *,
    noop_max: int,
    max_episode_frames: int,
) -> tuple[gym.Env, FrameTap]:
    """The evaluation env and the `FrameTap` around its base env, feeding ``recorder``."""
    taps: list[FrameTap] = []

    def tap(env: gym.Env) -> gym.Env:
        taps.append(FrameTap(env, on_frame=recorder))
        return taps[-1]

    # The run's preprocessing, with whole games (the score papers report) and the evaluation's
    # no-op and frame caps (frames), where the env's family has them.
    protocol = {"episodic_life": False, "noop_max": noop_max, "max_episode_frames": max_episode_frames}
    options = env_family(config.env_id).options
    env = make_env(
        config.env_id,
        dataclasses.replace(config.env_options(), **{k: v for k, v in protocol.items() if k in options}),
        base_wrapper=tap,  # sees every raw frame: counts them, sums the score, records
    )
    return env, taps[0]


@dataclass
class _Actor:
    """Epsilon-greedy over a Q-network; ``fire_action`` is pressed after a lost life, if set."""

    q_network: Callable[[torch.Tensor], torch.Tensor]
    device: torch.device
    n_actions: int
    epsilon: float
    rng: np.random.Generator
    fire_action: int | None

    def __call__(self, obs: np.ndarray) -> int:
        """The ε-greedy action (`vecdqn.acting.epsilon_greedy`) for one ``(S, 84, 84) uint8``
        observation."""
        return int(epsilon_greedy(self.rng, self.epsilon, self.n_actions, 1, lambda: self._greedy(obs))[0])

    def _greedy(self, obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            obs_t = torch.from_numpy(np.ascontiguousarray(obs)[None]).to(self.device)
            return self.q_network(obs_t).argmax(dim=1).cpu().numpy()


def _make_actor(
    env: gym.Env,
    q_network: Callable[[torch.Tensor], torch.Tensor],
    config: Config,
    device: torch.device,
    epsilon: float,
    seed: int | None,
    fire_on_life_loss: bool | None,
) -> _Actor:
    """An `_Actor` for ``env``, after checking that the network fits its spaces.

    Raises:
        ValueError: the network does not map one observation of ``env`` to ``(1, A)`` values.
    """
    n_actions = int(env.action_space.n)
    obs_shape = env.observation_space.shape
    try:
        with torch.inference_mode():
            q = q_network(torch.zeros((1, *obs_shape), dtype=torch.uint8, device=device))
    except RuntimeError as err:  # e.g. "mat1 and mat2 shapes cannot be multiplied": another screen size
        raise ValueError(
            f"the Q-network cannot take a {obs_shape} observation of {config.env_id} "
            f"({str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}); evaluate with the "
            "config saved with the network"
        ) from None
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
    return _Actor(q_network, device, n_actions, epsilon, np.random.default_rng(seed), fire_action)


def _play_games(
    env: gym.Env,
    tap: FrameTap,
    actor: _Actor,
    recorder: BestEpisodeRecorder | None,
    episodes: int,
    seed: int | None,
    max_episode_frames: int,
    on_game: Callable[[float], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Play ``episodes`` whole games; ``(E,) float64`` scores, ``(E,) int64`` lengths in frames,
    ``(E,) bool`` cut at the frame cap. The best game's frames end up where ``recorder`` puts them;
    ``on_game`` gets each game's raw score as it ends."""
    scores, lengths, truncations = [], [], []
    for episode in range(episodes):
        # Seed only the first reset: later games continue the env's generator, so each one
        # starts after a different number of no-ops.
        truncations.append(_play_game(env, actor, tap, seed if episode == 0 else None, max_episode_frames))
        scores.append(tap.score)
        lengths.append(tap.frames)
        if recorder is not None:
            recorder.end_episode(tap.score)
        if on_game is not None:
            on_game(tap.score)
    if recorder is not None:
        recorder.finish()
    return (
        np.asarray(scores, dtype=np.float64),
        np.asarray(lengths, dtype=np.int64),
        np.asarray(truncations, dtype=bool),
    )


def _play_game(
    env: gym.Env, actor: _Actor, tap: FrameTap, seed: int | None, max_episode_frames: int
) -> bool:
    """Play one whole game from a reset seeded with ``seed``; True if it was cut at the frame cap.

    Its score and length (frames) are then ``tap.score`` and ``tap.frames``.
    """
    obs, info = env.reset(seed=seed)
    lives = info.get("lives")
    fire_next = False
    while True:
        action = actor.fire_action if fire_next else actor(obs)
        obs, _, terminated, truncated, info = env.step(action)
        new_lives = info.get("lives")
        fire_next = (
            actor.fire_action is not None
            and new_lives is not None
            and lives is not None
            and new_lives < lives
        )
        lives = new_lives
        # The ALE truncates at the cap itself; counting here covers envs that do not.
        capped = tap.frames >= max_episode_frames
        if terminated or truncated or capped:
            return not terminated
