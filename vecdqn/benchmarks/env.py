"""``--env``: agent steps/s of the env pipelines with the same preprocessing, against ALE's own
C++ vector env, and two ceilings.

Impls, each under uniformly random actions (one sequence for all) at each ``--env-nums`` N:

- ``ale_vector`` (the anchor): ale-py's C++ `AtariVectorEnv`, one thread per core;
- ``vecdqn``: `vecdqn.envs.make_vector_env` with a process per env (``envs_per_worker=1``);
- ``vecdqn_batched``: the same with K envs per worker process, the K of ``--env-ks`` with the
  best ratio
  (default: `vecdqn.config.Config.envs_per_worker_on`'s K and half of it), K in the note;
- ``gymnasium``: `AsyncVectorEnv` over gymnasium's own `AtariPreprocessing` and
  `FrameStackObservation`, a process per env;
- ``plain_loop``: the same preprocessed games (`vecdqn.envs.make_env`) stepped in a plain loop
  in this process, N / cores of them, times the cores: what Python wrappers could give with no
  process, pipe or copy overhead at all;

then ``emulator_ceiling``: raw frames/s of one emulator times the cores, over 4 frames per agent
step. Each impl starts its envs before, and closes them after, its own timed block (so that 128
envs of one impl never share the memory with another's).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable

import numpy as np

from vecdqn.benchmarks.harness import ENV_ID, Row, check_counts, interleaved
from vecdqn.cli import whole_number

__all__ = ["QUICK", "add_arguments", "ale_game", "check_arguments", "emulator_ceiling", "env_steps_per_second",
           "make_env_impl", "run"]

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"env_nums": [2], "env_steps": 64}

IMPLS = ("ale_vector", "vecdqn", "vecdqn_batched", "gymnasium", "plain_loop")

# Vector steps of random actions drawn at a time (4096 x 128 envs x 8 bytes = 4 MiB).
ACTION_BLOCK = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--env section")
    group.add_argument("--env", action="store_true", help="benchmark the env pipelines (random actions)")
    group.add_argument("--env-nums", type=whole_number, nargs="+", default=[8, 16, 32, 64, 128],
                       help="numbers of envs (default 8 16 32 64 128)")
    group.add_argument("--env-steps", type=whole_number, default=8000,
                       help="agent steps (summed over envs) per timed block (default 8000)")
    group.add_argument("--env-id", default=None,
                       help=f"the game (default {ENV_ID}); with --estimate also the game its preset runs, in place "
                            "of the preset's own (e.g. --preset atari-pqn --env-id SeaquestNoFrameskip-v4; a preset "
                            "whose published result is on its own game then gets no minutes to it)")
    group.add_argument("--env-screen-size", type=whole_number, default=84,
                       help="observation side in pixels (default 84)")
    group.add_argument("--env-ks", type=whole_number, nargs="+", default=None,
                       help="envs per worker tried for vecdqn_batched, the best ratio reported (default: the "
                            "default rule's K and half of it; values that do not divide N are skipped)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line, naming the flag) for sizes below 1, a screen side
    `vecdqn.envs.EnvOptions` refuses, an ale-py without its vector env (before 0.11), or an
    ``--env-id`` that is not one of the ALE's games (ALE's vector env, the anchor, plays ALE games
    only)."""
    import warnings

    import ale_py.roms

    from vecdqn.envs import EnvOptions
    from vecdqn.envs.family import check_env_id

    check_counts(args, "env_nums", "env_steps", "env_ks")
    EnvOptions(screen_size=args.env_screen_size).validate(lambda option: "--env-" + option.replace("_", "-"))
    if not hasattr(ale_py, "AtariVectorEnv"):
        raise ValueError(f"--env needs ale-py >= 0.11, whose AtariVectorEnv is the section's anchor; this ale-py is "
                         f"{getattr(ale_py, '__version__', 'older')}: pip install 'ale-py>=0.11'")
    env_id = game(args)
    check_env_id(env_id)
    with warnings.catch_warnings():  # ale-py warns "Rom ... not supported" before returning None
        warnings.simplefilter("ignore")
        rom = ale_py.roms.get_rom_path(ale_game(env_id))
    if rom is None:
        raise ValueError(f"--env-id {env_id} is not an ALE game; the --env section plays ALE games only "
                         f"(its anchor is ALE's vector env), e.g. {ENV_ID} or ALE/Pong-v5")


def game(args: argparse.Namespace) -> str:
    """The --env section's game: ``--env-id``, else `ENV_ID`."""
    return args.env_id or ENV_ID


def ale_game(env_id: str) -> str:
    """The ALE's ROM name of a gymnasium id: ``"ALE/Pong-v5"``, ``"PongNoFrameskip-v4"`` -> ``"pong"``.

    >>> ale_game("ALE/MontezumaRevenge-v5"), ale_game("BreakoutNoFrameskip-v4")
    ('montezuma_revenge', 'breakout')
    """
    name = re.sub(r"(NoFrameskip)?-v\d+$", "", env_id.removeprefix("ALE/"))
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _gymnasium_reference_env(env_id: str, screen_size: int):
    """The reference pipeline: gymnasium's own preprocessing wrappers."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=screen_size,
                                          terminal_on_life_loss=False, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


# The preprocessing every impl shares: 30 no-op starts, skip 4 with the max of the last two frames,
# grayscale, INTER_AREA resize, 4 stacked, no life-loss termination, no FIRE, raw rewards, no sticky
# actions.
_VECDQN_OPTIONS = dict(episodic_life=False, fire_reset=False, repeat_action_probability=0.0)


class PlainLoop:
    """N / cores preprocessed games stepped one after another in this process (a
    `vecdqn.envs.batched.GameBatch`: the work of one batched worker, without its process, pipe or
    copies), as a vector env: `env_steps_per_second` multiplies its rate by `cores`."""

    def __init__(self, env_id: str, num_envs: int, screen_size: int, cores: int):
        import functools

        from vecdqn.envs import make_env
        from vecdqn.envs.batched import TRAINER_INFO_KEYS, GameBatch

        self.cores, count = cores, max(1, num_envs // cores)
        make_game = functools.partial(make_env, env_id, screen_size=screen_size, **_VECDQN_OPTIONS)
        self.games = GameBatch(make_game, 0, count, 1, TRAINER_INFO_KEYS)
        self.games.start()
        self.rows = np.zeros(self.games.observation_space.shape, dtype=np.uint8)
        self.single_action_space = self.games.games[0].action_space

    def reset(self, seed: int) -> None:
        self.games.reset([seed + j for j in range(self.games.count)], None, self.rows)

    def step(self, actions: np.ndarray) -> None:
        self.games.step(actions[:self.games.count], self.rows)

    def close(self) -> None:
        self.games.close()


def make_env_impl(name: str, env_id: str, num_envs: int, screen_size: int, envs_per_worker: int = 1,
                  cores: int = 1):
    """One impl of `IMPLS` with ``num_envs`` envs (started; ``close()`` it)."""
    import functools

    import ale_py
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from vecdqn.envs import make_vector_env

    if name == "ale_vector":
        return ale_py.AtariVectorEnv(
            ale_game(env_id), num_envs, noop_max=30, frameskip=4, stack_num=4, img_height=screen_size,
            img_width=screen_size, grayscale=True, maxpool=True, episodic_life=False, reward_clipping=False,
            use_fire_reset=False, repeat_action_probability=0.0, autoreset_mode=AutoresetMode.SAME_STEP,
            num_threads=cores)
    if name in ("vecdqn", "vecdqn_batched"):
        return make_vector_env(env_id, num_envs, screen_size=screen_size, envs_per_worker=envs_per_worker,
                               **_VECDQN_OPTIONS)
    if name == "gymnasium":
        thunk = functools.partial(_gymnasium_reference_env, env_id, screen_size)
        return gym.vector.AsyncVectorEnv([thunk] * num_envs, shared_memory=True,
                                         autoreset_mode=AutoresetMode.SAME_STEP)
    if name == "plain_loop":
        return PlainLoop(env_id, num_envs, screen_size, cores)
    raise ValueError(f"unknown env impl {name!r}; use one of {list(IMPLS)}")


def env_steps_per_second(env, num_envs: int, agent_steps: int, rng: np.random.Generator) -> float:
    """Agent steps per second of ``env`` (reset first) under uniformly random actions drawn from
    ``rng``, after 10 untimed vector steps; ``agent_steps`` summed over envs."""
    vector_steps = max(1, agent_steps // num_envs)
    n_actions = int(env.single_action_space.n)
    env.reset(seed=0)
    for a in rng.integers(n_actions, size=(10, num_envs)):
        env.step(a)
    seconds, left = 0.0, vector_steps
    while left:  # actions drawn in blocks, outside the timing: memory stays small for any --env-steps
        block = rng.integers(n_actions, size=(min(left, ACTION_BLOCK), num_envs))
        start = time.perf_counter()
        for a in block:
            env.step(a)
        seconds += time.perf_counter() - start
        left -= len(block)
    if isinstance(env, PlainLoop):  # its games on one core, times the cores
        return vector_steps * env.games.count * env.cores / seconds
    return vector_steps * num_envs / seconds


def emulator_ceiling(frames: int = 20_000, env_id: str = ENV_ID) -> tuple[float, int]:
    """Raw ALE frames/s of one emulator in this process (random actions, no screen read) and the
    core count: the ceiling of any pipeline is frames/s × cores / 4 agent steps/s."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0)
    env.reset(seed=0)
    ale, action_set = env.unwrapped.ale, env.unwrapped._action_set
    actions = np.random.default_rng(0).integers(len(action_set), size=frames)
    start = time.perf_counter()
    for a in actions:
        ale.act(action_set[a], 1.0)
        if ale.game_over():
            ale.reset_game()
    rate = frames / (time.perf_counter() - start)
    env.close()
    return rate, os.cpu_count() or 1


def _timed(name: str, args: argparse.Namespace, num_envs: int, cores: int,
           envs_per_worker: int = 1) -> Callable[[], float]:
    """A candidate for `interleaved`: start the impl, time it under the random actions every impl
    gets (one seed), close it."""
    def run() -> float:
        env = make_env_impl(name, game(args), num_envs, args.env_screen_size, envs_per_worker, cores)
        try:
            return env_steps_per_second(env, num_envs, args.env_steps, np.random.default_rng(0))
        finally:
            env.close()
    return run


def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: one per impl and number of envs, then the emulator ceiling."""
    from vecdqn.config import Config

    rows: list[Row] = []
    cores = os.cpu_count() or 1
    for num_envs in args.env_nums:
        print(f"timing env pipelines with {num_envs} envs ...", flush=True)
        default_k = Config(num_envs=num_envs).envs_per_worker_on(cores)
        ks = sorted({k for k in (args.env_ks or [default_k, default_k // 2]) if k > 1 and num_envs % k == 0}
                    or {num_envs})  # fewer envs than cores: one worker for all, to have a batched row
        candidates = {name: _timed(name, args, num_envs, cores) for name in IMPLS if name != "vecdqn_batched"}
        candidates |= {f"batched_k{k}": _timed("vecdqn_batched", args, num_envs, cores, k) for k in ks}
        result = interleaved(args.repeats, candidates, anchor="ale_vector")
        best = max((name for name in result if name.startswith("batched_k")), key=lambda n: result[n][1], default=None)
        for name in IMPLS:
            key = best if name == "vecdqn_batched" else name
            if key is None:
                continue
            value, ratio = result[key]
            note = None
            if name == "vecdqn_batched":
                tried = ", ".join(f"{n.removeprefix('batched_k')}: {result[n][0]:,.0f}" for n in result
                                  if n.startswith("batched_k"))
                note = f"K={key.removeprefix('batched_k')} envs per worker (tried K {tried})"
            elif name == "plain_loop":
                note = f"{max(1, num_envs // cores)} games in one process x {cores} cores"
            rows.append({"bench": "env", "impl": name, "num_envs": num_envs, "value": value, "unit": "steps/s",
                         "ratio": ratio, "anchor": "ale_vector", "note": note})
    frames_per_second, cores = emulator_ceiling(2_000 if args.quick else 20_000, game(args))
    rows.append({"bench": "env", "impl": "emulator_ceiling", "num_envs": cores, "value": frames_per_second * cores / 4,
                 "unit": "steps/s", "ratio": None, "anchor": None,
                 "note": f"{frames_per_second:,.0f} raw frames/s x {cores} cores / 4"})
    print()
    return rows

