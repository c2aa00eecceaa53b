"""One place for every knob of a training run.

`Config` is a dataclass: each field has a default, a unit and a one-line help text (its
``metadata["help"]``). The command line of ``scripts/train.py`` is generated from it by
`parse_args`, so there is no second list of options to keep in sync.

Units: every count is in **agent steps summed over all envs** (one vector step of N envs is N
agent steps = 4N emulator frames with the default frame skip), unless the name or help says
frames.

Defaults follow the usual Nature-DQN / Rainbow-style Atari setting (Mnih et al. 2015, Methods;
Hessel et al. 2018, Table 1; Dopamine's Rainbow configuration), scaled by agent steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any, NoReturn

# The smallest frame the Nature-DQN torso turns into at least one 1×1 feature map.
MIN_SCREEN_SIZE = 36
# Longest n-step return accepted (the return matrix is n x n; Rainbow, Hessel et al. 2018, uses 3).
MAX_N_STEP = 1000

# Options that fix the shape of the networks, the envs or the replay: a resumed run keeps them.
FIXED_ON_RESUME = ("env_id", "num_envs", "frame_skip", "frame_stack", "screen_size", "dueling", "hidden_size",
                   "n_step", "buffer_size")


def _f(default: Any, help: str) -> Any:  # noqa: A002 - "help" mirrors argparse
    return field(default=default, metadata={"help": help})


@dataclass
class Config:
    """Every setting of a training run (see the module docstring for units)."""

    # --- experiment -------------------------------------------------------------------------
    env_id: str = _f("BreakoutNoFrameskip-v4", "gymnasium env id: an ALE game (BreakoutNoFrameskip-v4, "
                     "ALE/Breakout-v5; the wrappers always do the frame skipping) or vecdqn/Catch-v0")
    seed: int = _f(1, "seed in [0, 2**32) of envs (env i gets seed+i), replay sampling and network init")
    total_steps: int = _f(10_000_000, "length of the run, in agent steps summed over envs")
    num_envs: int = _f(8, "number of env worker processes (AsyncVectorEnv)")
    log_dir: str = _f("runs", "folder under which the run folder <env_id>__<seed>__<unix time> is made")
    run_name: str = _f("", "run folder name under --log-dir (empty: <env_id>__<seed>__<unix time>)")
    device: str = _f("auto", "torch device for the learner: auto (cuda when available), cpu, cuda, cuda:1, ...")
    torch_threads: int = _f(0, "torch intra-op threads of the learner (0: all cores on a CPU learner, "
                               "the cores the env workers leave free on a GPU)")
    log_every: int = _f(10_000, "write scalar metrics every this many agent steps")
    preset: str = _f("", "named set of defaults to start from: 'catch' (see README); explicit options win")

    # --- environment (DeepMind/Nature preprocessing) ----------------------------------------
    noop_max: int = _f(30, "at most this many no-op frames at the start of each game (0: none)")
    frame_skip: int = _f(4, "emulator frames per agent step (action repeat; max over the last two)")
    frame_stack: int = _f(4, "frames stacked into one observation")
    screen_size: int = _f(84, "observation height and width in pixels")
    episodic_life: bool = _f(True, "treat a lost life as the end of an episode for the learner")
    fire_reset: bool = _f(True, "press FIRE after each reset in games that have it")
    repeat_action_probability: float = _f(0.0, "sticky-action probability (Machado et al. 2018 use 0.25)")
    max_episode_frames: int = _f(108_000, "truncate a game after this many emulator frames (frames, not agent steps)")

    # --- replay -----------------------------------------------------------------------------
    buffer_size: int = _f(1_000_000, "replay capacity, in frame slots: one per transition + one per episode")
    per: bool = _f(True, "prioritized replay (Schaul et al. 2016); --no-per samples uniformly")
    per_alpha: float = _f(0.5, "priority exponent alpha of prioritized replay")
    per_beta_start: float = _f(0.4, "importance-sampling exponent beta at the start of learning")
    per_beta_end: float = _f(1.0, "importance-sampling exponent beta after --per-beta-steps")
    per_beta_steps: int = _f(10_000_000, "agent steps, from step 0, over which beta anneals linearly to its end value")
    per_eps: float = _f(1e-6, "added to |TD error| to form a priority")
    n_step: int = _f(3, "n of n-step returns, in agent steps (1: one-step TD; at most 1000)")

    # --- learner ----------------------------------------------------------------------------
    learning_starts: int = _f(80_000, "agent steps of experience collected before the first update")
    train_frequency: int = _f(4, "one gradient update every this many agent steps")
    batch_size: int = _f(32, "transitions per gradient update")
    learning_rate: float = _f(6.25e-5, "Adam learning rate")
    adam_eps: float = _f(1.5e-4, "Adam epsilon")
    gamma: float = _f(0.99, "discount factor per agent step")
    target_update_frequency: int = _f(8_000, "copy online to target network every this many agent steps")
    max_grad_norm: float = _f(10.0, "clip the global gradient norm to this (0: no clipping)")
    clip_rewards: bool = _f(True, "learn from sign(reward) (Mnih et al. 2015); logged returns stay raw")
    double: bool = _f(True, "double-DQN target (van Hasselt et al. 2016); --no-double uses max_a Q_target")
    dueling: bool = _f(True, "dueling head (Wang et al. 2016); --no-dueling uses a plain linear head")
    hidden_size: int = _f(512, "units of the fully connected layer")
    compile: bool = _f(False, "torch.compile the Q-network")

    # --- exploration ------------------------------------------------------------------------
    epsilon_start: float = _f(1.0, "epsilon-greedy epsilon at step 0")
    epsilon_end: float = _f(0.01, "epsilon after the decay")
    epsilon_decay_steps: int = _f(250_000, "agent steps, from step 0, over which epsilon decays linearly")

    # --- checkpoints and evaluation -----------------------------------------------------------
    checkpoint_every: int = _f(500_000, "write checkpoints/latest.pt every this many agent steps (0: only at the end)")
    save_replay: bool = _f(False, "also save the replay buffer with each checkpoint (for exact resume)")
    resume: str = _f("", "run folder (or checkpoint file) to continue")
    worker_timeout: float = _f(60.0, "seconds an env worker may take to answer before the run stops")
    eval_every: int = _f(250_000, "evaluate greedily every this many agent steps (0: off)")
    eval_episodes: int = _f(5, "whole games per periodic evaluation")
    eval_epsilon: float = _f(0.001, "epsilon of the periodic evaluation")

    def validate(self) -> None:
        """Check every value that can be checked without starting an env.

        Raises:
            ValueError: naming the bad option, its value and what is allowed.
        """
        positive = [
            "total_steps", "num_envs", "buffer_size", "batch_size", "train_frequency",
            "target_update_frequency", "frame_skip", "frame_stack", "screen_size", "n_step",
            "log_every", "max_episode_frames", "hidden_size", "eval_episodes", "per_beta_steps",
        ]
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{option_flag(name)} {value} must be a positive integer (>= 1)")
        for name in ["learning_starts", "noop_max", "checkpoint_every", "eval_every", "epsilon_decay_steps",
                     "torch_threads"]:
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{option_flag(name)} {value} must be >= 0")
        for name in ["learning_rate", "adam_eps", "worker_timeout"]:
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{option_flag(name)} {value} must be a positive number")
        for name in ["gamma", "repeat_action_probability", "epsilon_start", "epsilon_end", "eval_epsilon",
                     "per_beta_start", "per_beta_end"]:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{option_flag(name)} {value} must be in [0, 1]")
        for name, value, ok, allowed in [
            ("per_alpha", self.per_alpha, self.per_alpha >= 0, ">= 0 (0: uniform sampling)"),
            ("per_eps", self.per_eps, self.per_eps > 0, "> 0"),
            ("max_grad_norm", self.max_grad_norm, self.max_grad_norm >= 0, ">= 0 (0: no clipping)"),
        ]:
            if not (ok and math.isfinite(value)):
                raise ValueError(f"{option_flag(name)} {value} must be a finite number {allowed}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"--seed {self.seed} must be in [0, 2**32) (env i is seeded seed + i)")
        if self.seed + self.num_envs > 2**32:
            raise ValueError(f"--seed {self.seed} + --num-envs {self.num_envs} exceeds 2**32; use a smaller seed")
        if self.screen_size < MIN_SCREEN_SIZE:
            raise ValueError(
                f"--screen-size {self.screen_size} is too small for the Nature-DQN torso (8×8/4, 4×4/2, 3×3/1 "
                f"convolutions); use at least {MIN_SCREEN_SIZE}"
            )
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"--batch-size {self.batch_size} is larger than --buffer-size {self.buffer_size}; "
                "use a buffer at least as large as one batch"
            )
        if self.learning_starts < self.batch_size:
            raise ValueError(
                f"--learning-starts {self.learning_starts} is below --batch-size {self.batch_size}; "
                "collect at least one batch of transitions before learning"
            )
        if self.learning_starts > self.total_steps:
            raise ValueError(
                f"--learning-starts {self.learning_starts} is above --total-steps {self.total_steps}; "
                "the run would end before its first update"
            )
        if self.n_step > MAX_N_STEP:
            raise ValueError(f"--n-step {self.n_step} is too long; use at most {MAX_N_STEP} (Rainbow uses 3)")
        ring = self.buffer_size // self.num_envs
        if ring < 2 * self.frame_stack + self.n_step:
            raise ValueError(
                f"--buffer-size {self.buffer_size} split over --num-envs {self.num_envs} leaves {ring} slots per env; "
                f"with --frame-stack {self.frame_stack} and --n-step {self.n_step} use at least "
                f"{self.num_envs * (2 * self.frame_stack + self.n_step)}"
            )
        if self.run_name and (
            self.run_name in (".", "..") or "/" in self.run_name or "\\" in self.run_name
        ):
            raise ValueError(
                f"--run-name {self.run_name!r} must be a plain folder name (no '/', not '.' or '..'); the run is "
                f"written to --log-dir/<run-name>"
            )
        if self.device != "auto" and not (self.device == "cpu" or self.device.startswith("cuda")
                                          or self.device == "mps"):
            raise ValueError(f"--device {self.device!r} is not one of auto, cpu, cuda, cuda:N, mps")
        if self.preset and self.preset not in PRESETS:
            raise ValueError(f"--preset {self.preset!r} is unknown; choose one of {sorted(PRESETS)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        """Build a Config from a saved dict, ignoring keys this version does not know."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


# Named starting points. Each maps option names to values; explicit command-line options win.
PRESETS: dict[str, dict[str, Any]] = {
    # The pixel Catch game (vecdqn/Catch-v0): small, fast, learnable on a CPU in minutes.
    # Episodes last 9 agent steps, so the replay and the schedules are scaled down.
    "catch": dict(
        env_id="vecdqn/Catch-v0",
        total_steps=20_000,
        num_envs=4,
        # 44 px, not 84: four times less convolution work, and the smallest size at which the
        # Nature torso still sees the bottom row (at 42 its strides drop the paddle's rows).
        screen_size=44,
        buffer_size=20_000,
        learning_starts=1_000,
        train_frequency=4,
        batch_size=32,
        learning_rate=5e-4,
        adam_eps=1e-8,
        gamma=0.99,
        n_step=1,
        target_update_frequency=500,
        epsilon_start=1.0,
        epsilon_end=0.01,
        epsilon_decay_steps=10_000,
        per_beta_steps=20_000,
        hidden_size=128,
        log_every=1_000,
        checkpoint_every=0,
        eval_every=0,
        per_alpha=0.5,
    ),
}


def option_flag(name: str) -> str:
    """The command-line flag of a `Config` field: ``"n_step" -> "--n-step"``."""
    return "--" + name.replace("_", "-")


class _OneLineErrors(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (not the whole usage of ~50 options)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``scripts/train.py``, generated from `Config`'s fields."""
    parser = _OneLineErrors(
        prog="train.py",
        description="Train a DQN agent (double DQN, dueling network, prioritized replay) on an Atari game. "
        "All counts are agent steps summed over envs (1 agent step = frame-skip emulator frames) "
        "unless the option says frames.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in fields(Config):
        kwargs: dict[str, Any] = {"help": f.metadata["help"], "default": f.default}
        if f.type in ("bool", bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            type_name = f.type if isinstance(f.type, str) else f.type.__name__
            kwargs["type"] = {"int": int, "float": float, "str": str}[type_name]
            kwargs["metavar"] = type_name.upper()
        parser.add_argument(option_flag(f.name), dest=f.name, **kwargs)
    return parser


def parse_args(argv: list[str] | None = None) -> Config:
    """Parse a command line into a validated `Config`.

    A ``--preset`` replaces the defaults it names before the other options are applied.
    On a bad value this prints one line to stderr and exits with code 2 (argparse's convention).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    given = explicit_options(parser, argv if argv is not None else sys.argv[1:])
    values = vars(args)
    if args.preset:
        if args.preset not in PRESETS:
            parser.exit(2, f"error: --preset {args.preset!r} is unknown; choose one of {sorted(PRESETS)}\n")
        for key, value in PRESETS[args.preset].items():
            if key not in given:
                values[key] = value
    config = Config(**values)
    if config.resume:
        # The saved configuration, updated with the options given here, is checked on resume.
        return config
    try:
        config.validate()
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    return config


def explicit_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """Names of the options that appear on the command line (so presets do not override them)."""
    flag_to_dest = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public mapping
        for flag in action.option_strings:
            flag_to_dest[flag] = action.dest
    given = set()
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag in flag_to_dest:
            given.add(flag_to_dest[flag])
    return given


def default_torch_threads(num_envs: int, cpu_count: int | None = None, device_type: str = "cpu") -> int:
    """Intra-op threads for the learner so it does not fight the env workers for cores.

    Rule: a learner on the CPU takes every core; a learner on a GPU takes the cores the env
    workers leave free (at least one, at most four: it only feeds the GPU).

    Why: on the CPU the learner is the bottleneck by far. A batch-32 update of the dueling
    network takes ~32 ms on 2 threads, while one vector step of 8 envs costs the workers ~5 ms
    of CPU in all, and with `Trainer`'s overlap they run while the update runs. Measured on 2
    cores, 8 envs, end to end: 100 agent steps/s with 2 learner threads against 74 with 1 (plain
    DQN: 149 against 108). A learner thread only loses badly to busy workers when the workers
    are busy all the time (an env-bound run: a 2-thread update with the other core saturated
    took ~700 ms against ~60 ms on 1 thread), which is the GPU case: there the workers get the
    cores.
    """
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    if device_type == "cpu":
        return max(1, cores)
    return max(1, min(4, cores - num_envs))
