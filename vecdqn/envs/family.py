"""Env families: what the rest of vecdqn asks of an env id, answered in one record per family.

A family is a set of registered gymnasium ids built the same way: the ALE's games, Catch, or any
other gymnasium id. Its `EnvFamily` record says which `EnvOptions` apply, the unit of a game's
length, the real-time frame rate of its screens, whether it has FIRE and no-op starts, and how
to build its base env (the wrappers under `GrayscaleResize` and `FrameStack`). Nothing outside
`vecdqn.envs` tests for a family: it reads the record. A new family is one record (and its maker)
added to `FAMILIES` before the catch-all.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import ale_py
import gymnasium as gym

from vecdqn.envs.catch import CATCH_ID
from vecdqn.envs.options import EnvOptions
from vecdqn.envs.wrappers import EpisodicLife, FireReset, MaxAndSkip, NoopReset, action_meanings

__all__ = ["ALE_FPS", "EnvFamily", "FAMILIES", "check_env_id", "check_family_options", "close_env_ids", "env_family",
           "register_envs"]

# The ALE's emulator runs at 60 frames per second (the NTSC Atari 2600's rate).
ALE_FPS = 60.0

# The ALE's own entry point: envs registered with it are Atari games.
ALE_ENTRY_POINT = "ale_py.env:AtariEnv"

BaseWrapper = Callable[[gym.Env], gym.Env] | None


def register_envs() -> None:
    """Register the ALE's and vecdqn's env ids (idempotent, cheap after the first call).

    Also keeps only the ALE's errors on stderr: its banner, printed by every emulator that
    loads a ROM, would otherwise precede each one-line error message and repeat once per worker.
    """
    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    import vecdqn.envs.catch  # noqa: F401  (registers vecdqn/Catch-v0)


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` unless ``env_id`` is registered, naming the ids vecdqn trains on that
    are close to it (`close_env_ids`).

    >>> check_env_id("Seaquest")
    Traceback (most recent call last):
    ...
    ValueError: unknown env id 'Seaquest'; did you mean SeaquestNoFrameskip-v4?
    """
    if not isinstance(env_id, str):
        raise ValueError(f"env_id={env_id!r} is invalid; use a registered id such as 'BreakoutNoFrameskip-v4'")
    register_envs()
    if env_id not in gym.registry:
        close = close_env_ids(env_id)
        hint = (f"did you mean {close[0]}?" if len(close) == 1 else f"did you mean one of {close}?" if close else
                "no id vecdqn trains on is close: use an ALE game's <Game>NoFrameskip-v4 (e.g. "
                f"BreakoutNoFrameskip-v4), {CATCH_ID}, or a registered gymnasium id with image observations")
        raise ValueError(f"unknown env id {env_id!r}; {hint}")


def _game_key(env_id: str) -> str:
    """The game an id names, as a lowercase word: namespace, version, ``NoFrameskip`` and
    punctuation dropped (``"ALE/Space_Invaders-v6"`` -> ``"spaceinvaders"``)."""
    name = re.sub(r"-v\d+$", "", env_id.rsplit("/", 1)[-1])
    name = re.sub(r"(NoFrameskip|Deterministic)$", "", name, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]", "", name.lower())


def close_env_ids(env_id: str) -> list[str]:
    """The ids vecdqn trains on whose game is ``env_id``'s (``"Seaquest"``,
    ``"SeaquestNoFrameskip-v5"``: ``["SeaquestNoFrameskip-v4"]``), else up to 5 whose games' names are
    close to it (difflib, cutoff 0.6): the ALE's games as ``<Game>NoFrameskip-v4``, the ids the
    presets use (also as ``ALE/<Game>-v5`` for an id written ``ALE/...``), and Catch."""
    register_envs()
    ids: dict[str, list[str]] = {_game_key(CATCH_ID): [CATCH_ID]}
    for spec in gym.registry.values():
        if spec.entry_point != ALE_ENTRY_POINT:
            continue
        if spec.namespace is None and spec.name.endswith("NoFrameskip") and spec.version == 4:
            ids.setdefault(_game_key(spec.id), []).insert(0, spec.id)
        elif spec.namespace == "ALE" and spec.version == 5 and env_id.startswith("ALE/"):
            ids.setdefault(_game_key(spec.id), []).append(spec.id)
    key = _game_key(env_id)
    games = [key] if key in ids else difflib.get_close_matches(key, list(ids), n=5, cutoff=0.6)
    return [one for game in games for one in ids[game]]


def _make_ale(env_id: str, o: EnvOptions, base_wrapper: BaseWrapper) -> gym.Env:
    """An ALE game with DQN's preprocessing up to (not including) the resize, in the order of
    `vecdqn.envs.wrappers`' docstring: ``(210, 160) uint8`` grayscale frames, one agent step per
    step."""
    sticky = {} if o.repeat_action_probability is None else {
        "repeat_action_probability": float(o.repeat_action_probability)}
    env = gym.make(
        env_id,
        obs_type="grayscale",
        frameskip=1,
        # The ALE reads 0 as "no cap"; ALE/*-v5 ids would otherwise default to 108,000.
        max_num_frames_per_episode=0 if o.max_episode_frames is None else int(o.max_episode_frames),
        **sticky,
    )
    if base_wrapper is not None:
        env = base_wrapper(env)
    # Under the life-loss wrapper, and under the skip so its length counts frames.
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if o.noop_max > 0:
        env = NoopReset(env, noop_max=o.noop_max)
    env = MaxAndSkip(env, skip=o.frame_skip)
    if o.episodic_life:
        env = EpisodicLife(env)
    if o.fire_reset and "FIRE" in (action_meanings(env) or []):
        env = FireReset(env)
    return env


def _make_plain(env_id: str, o: EnvOptions, base_wrapper: BaseWrapper) -> gym.Env:
    """Any gymnasium env as registered, under RecordEpisodeStatistics (whole episodes)."""
    env = gym.make(env_id)
    if base_wrapper is not None:
        env = base_wrapper(env)
    return gym.wrappers.RecordEpisodeStatistics(env)


@dataclass(frozen=True)
class EnvFamily:
    """What vecdqn needs to know about one family of env ids.

    Attributes:
        name: how messages name the family (``"ALE"``).
        options: the `EnvOptions` fields its envs use; the others are refused for it.
        length_unit: unit of a game's length (``charts/episodic_length``, evaluation): ``"frames"``
            (emulator frames) or ``"env steps"``.
        fps: real-time playback rate of one base-env step (a frame for the ALE), for videos;
            None: the env's ``metadata["render_fps"]``.
        fire_and_noop: whether it has no-op starts and FIRE after resets and lost lives.
        matches: whether a registered ``gym.EnvSpec`` belongs to the family.
        make: ``(env_id, options, base_wrapper) -> env``: the base env and the family's wrappers
            under the resize and the stack (see `vecdqn.envs.make_env`).
    """

    name: str
    options: frozenset[str]
    length_unit: str
    fps: float | None
    fire_and_noop: bool
    matches: Callable[[gym.envs.registration.EnvSpec], bool]
    make: Callable[[str, EnvOptions, BaseWrapper], gym.Env]

    def playback_fps(self, env: gym.Env) -> float:
        """Frames per second that play ``env``'s base-env steps in real time: the family's
        ``fps``, else the env's ``metadata["render_fps"]``, else 60."""
        return float(self.fps or env.metadata.get("render_fps") or ALE_FPS)

    def frames_per_step(self, options: EnvOptions) -> int:
        """Base-env steps (frames) per agent step: ``frame_skip`` where it applies, else 1."""
        return options.frame_skip if "frame_skip" in self.options else 1

    def unused(self, names: Iterable[str]) -> list[str]:
        """The `EnvOptions` fields among ``names`` that this family does not use, in field order."""
        names = set(names)
        return [f.name for f in fields(EnvOptions) if f.name in names and f.name not in self.options]


_OBSERVATION_OPTIONS = frozenset({"screen_size", "frame_stack"})

FAMILIES: tuple[EnvFamily, ...] = (
    EnvFamily("ALE", frozenset(f.name for f in fields(EnvOptions)), "frames", ALE_FPS, True,
              lambda spec: spec.entry_point == ALE_ENTRY_POINT, _make_ale),
    EnvFamily("Catch", _OBSERVATION_OPTIONS, "env steps", 15.0, False, lambda spec: spec.id == CATCH_ID, _make_plain),
    # The catch-all, last: any other gymnasium id with image observations.
    EnvFamily("gymnasium", _OBSERVATION_OPTIONS, "env steps", None, False, lambda spec: True, _make_plain),
)


def env_family(env_id: str) -> EnvFamily:
    """The `EnvFamily` of a registered env id (the first of `FAMILIES` that matches).

    >>> env_family("PongNoFrameskip-v4").length_unit, env_family("vecdqn/Catch-v0").name
    ('frames', 'Catch')

    Raises:
        ValueError: ``env_id`` is not registered (naming close matches).
    """
    check_env_id(env_id)
    spec = gym.spec(env_id)
    return next(family for family in FAMILIES if family.matches(spec))


def check_family_options(given: Iterable[str], env_id: str) -> None:
    """Refuse env options named in ``given`` (option names, e.g. the ones given on a command
    line) that ``env_id``'s family does not use, e.g. ``frame_skip`` for ``vecdqn/Catch-v0``,
    which would ignore them. An unknown ``env_id`` passes (its own check names close matches).

    Raises:
        ValueError: one line naming the options (as flags), the env id and what it takes.
    """
    try:
        family = env_family(env_id)
    except ValueError:
        return
    unused = family.unused(given)
    if not unused:
        return
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    one = len(unused) == 1
    raise ValueError(f"{', '.join(map(flag, unused))} do{'es' if one else ''} not apply to --env-id {env_id}, an env "
                     f"of the {family.name} family, which takes only {', '.join(map(flag, sorted(family.options)))}: "
                     f"drop {'it' if one else 'them'}")
