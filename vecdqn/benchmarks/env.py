"""``--env``: agent steps/s of three env pipelines with the same preprocessing, and the
emulator's ceiling.

Impls: ``gymnasium`` (the anchor: `AsyncVectorEnv` over gymnasium's own `AtariPreprocessing` and
`FrameStackObservation`), ``vecdqn`` (`vecdqn.envs.make_vector_env`) and ``ale_vector``
(ale-py's C++ `AtariVectorEnv`), each under uniformly random actions on Breakout; then
``emulator_ceiling``: raw frames/s of one emulator times the cores, over 4 frames per agent step.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from vecdqn.benchmarks.harness import ENV_ID, Row, interleaved

__all__ = ["QUICK", "add_arguments", "emulator_ceiling", "env_steps_per_second", "make_env_impls", "run"]

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"env_nums": [2], "env_steps": 64}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--env section")
    group.add_argument("--env", action="store_true", help="benchmark the env pipelines (Breakout, random actions)")
    group.add_argument("--env-nums", type=int, nargs="+", default=[2, 4, 8], help="numbers of envs (default 2 4 8)")
    group.add_argument("--env-steps", type=int, default=4000,
                       help="agent steps (summed over envs) per timed block (default 4000)")


def _gymnasium_reference_env():
    """The reference pipeline: gymnasium's own preprocessing wrappers."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84,
                                          terminal_on_life_loss=False, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


def make_env_impls(num_envs: int) -> dict[str, object]:
    """The three pipelines with the same preprocessing: 30 no-op starts, skip 4 with the max of the
    last two frames, 84×84 grayscale, 4 stacked, no life-loss termination, raw rewards."""
    import ale_py
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from vecdqn.envs import make_vector_env

    return {
        "gymnasium": gym.vector.AsyncVectorEnv([_gymnasium_reference_env] * num_envs, shared_memory=True,
                                               autoreset_mode=AutoresetMode.SAME_STEP),
        "vecdqn": make_vector_env(ENV_ID, num_envs, episodic_life=False, fire_reset=False),
        "ale_vector": ale_py.AtariVectorEnv(
            "breakout", num_envs, noop_max=30, frameskip=4, stack_num=4, img_height=84, img_width=84,
            grayscale=True, maxpool=True, episodic_life=False, reward_clipping=False, use_fire_reset=False,
            repeat_action_probability=0.0, autoreset_mode=AutoresetMode.SAME_STEP),
    }


def env_steps_per_second(env, num_envs: int, agent_steps: int, rng: np.random.Generator) -> float:
    """Agent steps per second of ``env`` under uniformly random actions (after a warm-up)."""
    n_actions = 4
    vector_steps = max(1, agent_steps // num_envs)
    actions = rng.integers(n_actions, size=(vector_steps + 10, num_envs))
    for a in actions[:10]:
        env.step(a)
    start = time.perf_counter()
    for a in actions[10:]:
        env.step(a)
    return vector_steps * num_envs / (time.perf_counter() - start)


def emulator_ceiling(frames: int = 20_000) -> tuple[float, int]:
    """Raw ALE frames/s of one emulator in this process (random actions, no screen read) and the
    core count: the ceiling of any pipeline is frames/s × cores / 4 agent steps/s."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.0)
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



def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: one per pipeline and number of envs, then the emulator ceiling."""
    rows: list[Row] = []
    rng = np.random.default_rng(0)
    for num_envs in args.env_nums:
        print(f"timing env pipelines with {num_envs} envs ...", flush=True)
        impls = make_env_impls(num_envs)
        try:
            for impl in impls.values():
                impl.reset(seed=0)
            candidates = {name: (lambda impl=impl, n=num_envs: env_steps_per_second(impl, n, args.env_steps, rng))
                          for name, impl in impls.items()}
            result = interleaved(args.repeats, candidates, anchor="gymnasium")
        finally:
            for impl in impls.values():
                impl.close()
        for name, (value, ratio) in result.items():
            rows.append({"bench": "env", "impl": name, "num_envs": num_envs, "value": value, "unit": "steps/s",
                         "ratio": ratio, "anchor": "gymnasium"})
    frames_per_second, cores = emulator_ceiling(2_000 if args.quick else 20_000)
    rows.append({"bench": "env", "impl": "emulator_ceiling", "num_envs": cores, "value": frames_per_second * cores / 4,
                 "unit": "steps/s", "ratio": None, "anchor": None,
                 "note": f"{frames_per_second:,.0f} raw frames/s x {cores} cores / 4"})
    print()
    return rows
