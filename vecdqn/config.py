"""One place for every knob of a training run.

`Config` is a dataclass: each field has a default, a unit and a one-line help text (its
``metadata["help"]``), and `Config.validate` checks every value but the device names and
``--amp``, which need torch (`vecdqn.staging` checks those). The command line of
``scripts/train.py`` is generated from these fields by `vecdqn.cli`, so there is no second list of
options to keep in sync; this module holds the settings, their units and their checks only.

Units: every count is in **agent steps summed over all envs** (one vector step of N envs is N
agent steps = 4N emulator frames with the default frame skip), unless the name or help says
frames.

Defaults follow the usual Nature-DQN / Rainbow-style Atari setting (Mnih et al. 2015, Methods;
Hessel et al. 2018, Table 1; Dopamine's Rainbow configuration), scaled by agent steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from vecdqn.presets import PRESETS

# The smallest frame the Nature-DQN torso turns into at least one 1×1 feature map.
MIN_SCREEN_SIZE = 36
# Longest n-step return accepted (the return matrix is n x n; Rainbow, Hessel et al. 2018, uses 3).
MAX_N_STEP = 1000

# Options that fix the shape of the networks, the envs or the replay, and the preset the run's
# values came from (its values are saved one by one; a second preset could not follow them):
# a resumed run keeps them.
FIXED_ON_RESUME = ("env_id", "num_envs", "frame_skip", "frame_stack", "screen_size", "dueling", "hidden_size",
                   "n_step", "buffer_size", "preset")

# The preprocessing options only an ALE game uses; other envs (vecdqn/Catch-v0) take only
# screen_size and frame_stack, and the command line refuses these for them.
ALE_ONLY_OPTIONS = ("noop_max", "frame_skip", "episodic_life", "fire_reset", "repeat_action_probability",
                    "max_episode_frames")


def _f(default: Any, help: str) -> Any:  # noqa: A002 - "help" mirrors argparse
    return field(default=default, metadata={"help": help})


def _is_int(value: Any) -> bool:
    """An integer that is not a bool (NumPy integers included)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


@dataclass(frozen=True)
class EnvOptions:
    """The preprocessing options of one env: what `vecdqn.envs.make_env` builds from.

    Units: ``noop_max`` and ``max_episode_frames`` count emulator frames; one agent step is
    ``frame_skip`` frames. The Atari-only options (`ALE_ONLY_OPTIONS`: all but ``screen_size``
    and ``frame_stack``) are ignored for non-ALE envs such as ``vecdqn/Catch-v0``.
    """

    noop_max: int = _f(30, "at most this many no-op frames at the start of each game (0: none)")
    frame_skip: int = _f(4, "emulator frames per agent step (action repeat; max over the last two)")
    frame_stack: int = _f(4, "frames stacked into one observation")
    screen_size: int = _f(84, "observation height and width in pixels")
    episodic_life: bool = _f(True, "treat a lost life as the end of an episode for the learner")
    fire_reset: bool = _f(True, "press FIRE after each reset in games that have it")
    repeat_action_probability: float | None = _f(
        None, "sticky-action probability per frame (Machado et al. 2018 use 0.25); unset: the env id's own "
        "default (0.0 for *NoFrameskip-v4 ids, 0.25 for ALE/*-v5 ids)")
    max_episode_frames: int | None = _f(108_000, "truncate a game after this many emulator frames (frames, "
                                                 "not agent steps)")

    def validate(self, name: Callable[[str], str] | None = None) -> None:
        """Check every value's type and range.

        Args:
            name: how an error names an option (default ``"frame_skip=0"`` style; the CLI passes
                `option_flag` for ``"--frame-skip 0"``).

        Raises:
            ValueError: naming the option, its value and what is allowed.
        """
        def bad(option: str, value: Any, hint: str) -> ValueError:
            said = f"{name(option)} {value}" if name else f"{option}={value!r}"
            return ValueError(f"{said} is invalid; {hint}")

        for option, minimum, hint in [
            ("noop_max", 0, "use 0 (no no-op starts) or a positive count of frames"),
            ("frame_skip", 1, "use 1 (no frame skipping) or more frames per step"),
            ("screen_size", 1, "use a positive side length in pixels, e.g. 84"),
            ("frame_stack", 1, "use 1 (no stacking) or more frames, e.g. 4"),
        ]:
            value = getattr(self, option)
            if not _is_int(value) or value < minimum:
                raise bad(option, value, hint)
        for option in ("episodic_life", "fire_reset"):
            value = getattr(self, option)
            if type(value).__name__ not in ("bool", "bool_"):
                raise bad(option, value, "use True or False")
        p = self.repeat_action_probability
        if p is not None and (isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0):
            raise bad("repeat_action_probability", p, "use a probability in [0, 1] (0.25 as in Machado et al. "
                      "2018, 0.0 for deterministic emulation) or leave it unset for the env id's default")
        frames = self.max_episode_frames
        if frames is not None and (not _is_int(frames) or frames < 1):
            raise bad("max_episode_frames", frames, "use a positive number of frames (108_000 = 30 minutes) or "
                      "None for no cap")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _env_field(name: str) -> Any:
    """A `Config` field mirroring `EnvOptions`' field ``name``: one default, one help text."""
    source = EnvOptions.__dataclass_fields__[name]
    return field(default=source.default, metadata=source.metadata)


@dataclass
class Config:
    """Every setting of a training run (see the module docstring for units)."""

    # --- experiment -------------------------------------------------------------------------
    env_id: str = _f("BreakoutNoFrameskip-v4", "gymnasium env id: an ALE game (BreakoutNoFrameskip-v4, "
                     "ALE/Breakout-v5; the wrappers always do the frame skipping) or vecdqn/Catch-v0")
    seed: int = _f(1, "seed in [0, 2**32) of envs (env i gets seed+i), replay sampling and network init")
    total_steps: int = _f(10_000_000, "length of the run, in agent steps summed over envs")
    num_envs: int = _f(8, "number of env worker processes (AsyncVectorEnv)")
    log_dir: str = _f("runs", "folder under which the run folder <env_id>__<seed>__<unix time> is made "
                              "(a / in the env id becomes -)")
    run_name: str = _f("", "run folder name under --log-dir (empty: <env_id>__<seed>__<unix time>)")
    device: str = _f("auto", "torch device for the learner: auto (cuda when available), cpu, cuda, cuda:1, ...")
    torch_threads: int = _f(0, "torch intra-op threads of the learner (0: all cores on a CPU learner, "
                               "the cores the env workers leave free on a GPU)")
    log_every: int = _f(10_000, "write scalar metrics every this many agent steps")
    preset: str = _f("", "named set of defaults to start from: 'catch', 'pong' or 'labml' (their values are in "
                         "the README); explicit options win")

    # --- environment (DeepMind/Nature preprocessing): the fields of `EnvOptions` -------------
    noop_max: int = _env_field("noop_max")
    frame_skip: int = _env_field("frame_skip")
    frame_stack: int = _env_field("frame_stack")
    screen_size: int = _env_field("screen_size")
    episodic_life: bool = _env_field("episodic_life")
    fire_reset: bool = _env_field("fire_reset")
    repeat_action_probability: float | None = _env_field("repeat_action_probability")
    max_episode_frames: int = _env_field("max_episode_frames")

    # --- replay -----------------------------------------------------------------------------
    buffer_size: int = _f(1_000_000, "replay capacity, in frame slots: one per transition + one per episode")
    per: bool = _f(True, "prioritized replay (Schaul et al. 2016); --no-per samples uniformly")
    per_alpha: float = _f(0.5, "priority exponent alpha of prioritized replay")
    per_beta_start: float = _f(0.4, "importance-sampling exponent beta at the start of learning")
    per_beta_end: float = _f(1.0, "importance-sampling exponent beta after --per-beta-steps")
    per_beta_steps: int = _f(10_000_000, "agent steps, from step 0, over which beta anneals linearly to its end value")
    per_beta_schedule: str = _f("", "beta as 'step:value,...' pairs in agent steps, linear between them and constant "
                                    "after the last (replaces --per-beta-start/-end/-steps)")
    per_eps: float = _f(1e-6, "added to |TD error| to form a priority")
    n_step: int = _f(3, "n of n-step returns, in agent steps (1: one-step TD; at most 1000)")

    # --- learner ----------------------------------------------------------------------------
    learning_starts: int = _f(80_000, "agent steps of experience collected before the first update")
    train_frequency: int = _f(4, "one gradient update every this many agent steps")
    batch_size: int = _f(32, "transitions per gradient update")
    learning_rate: float = _f(6.25e-5, "Adam learning rate (constant; see --learning-rate-schedule)")
    learning_rate_schedule: str = _f("", "learning rate as 'step:value,...' pairs in agent steps, linear between "
                                         "them and constant after the last (replaces --learning-rate)")
    adam_eps: float = _f(1.5e-4, "Adam epsilon")
    gamma: float = _f(0.99, "discount factor per agent step")
    target_update_frequency: int = _f(8_000, "copy online to target network every this many agent steps")
    max_grad_norm: float = _f(10.0, "clip the global gradient norm to this (0: no clipping)")
    clip_rewards: bool = _f(True, "learn from sign(reward) (Mnih et al. 2015); logged returns stay raw")
    double: bool = _f(True, "double-DQN target (van Hasselt et al. 2016); --no-double uses max_a Q_target")
    dueling: bool = _f(True, "dueling head (Wang et al. 2016); --no-dueling uses a plain linear head")
    hidden_size: int = _f(512, "units of the fully connected layer")
    compile: bool = _f(False, "torch.compile: on CUDA the update's forward and backward as CUDA graphs "
                              "(mode reduce-overhead, static input buffers); elsewhere the Q-network")
    amp: str = _f("off", "autocast the learner's forward passes: off, or bf16 (fp32 master weights and loss; "
                         "CPUs and CUDA GPUs with bf16)")
    prefetch: bool | None = _f(None, "sample the next batch on a background thread during each update; "
                                     "priorities then arrive one update late (as in Ape-X); unset: on with a CUDA "
                                     "learner, off elsewhere (--no-prefetch: exact, synchronous)")
    overlap_forward: bool = _f(False, "CPU learner: compute the next observations' target and online Q-values on a "
                                      "second thread beside the batch's online forward pass (a core the env "
                                      "workers leave idle); the same arithmetic, so a run changes only in speed")
    replay_device: str = _f("", "keep a copy of the replay's frames on this torch device (auto, cuda, cpu, ...) "
                                "and gather batches there; empty: batches are copied out on the host")

    # --- exploration ------------------------------------------------------------------------
    epsilon_start: float = _f(1.0, "epsilon-greedy epsilon at step 0")
    epsilon_end: float = _f(0.01, "epsilon after the decay")
    epsilon_decay_steps: int = _f(250_000, "agent steps, from step 0, over which epsilon decays linearly")
    epsilon_schedule: str = _f("", "epsilon as 'step:value,...' pairs in agent steps, e.g. '0:1.0,800000:0.1,"
                                   "16000000:0.01': linear between them, constant after the last (replaces "
                                   "--epsilon-start/-end/-decay-steps)")

    # --- checkpoints and evaluation -----------------------------------------------------------
    checkpoint_every: int = _f(500_000, "write checkpoints/latest.pt every this many agent steps (0: only at the end)")
    keep_checkpoints: bool = _f(False, "also keep each periodic checkpoint as checkpoints/step_<agent step>.pt "
                                       "(networks and counters, no replay), e.g. to evaluate them later")
    save_replay: bool = _f(False, "also save the replay buffer with each checkpoint (for exact resume)")
    resume: str = _f("", "run folder (or checkpoint file) to continue")
    worker_timeout: float = _f(60.0, "seconds an env worker may take to answer before the run stops")
    eval_every: int = _f(250_000, "evaluate greedily every this many agent steps (0: off)")
    eval_episodes: int = _f(5, "whole games per periodic evaluation")
    eval_epsilon: float = _f(0.001, "epsilon of the periodic evaluation")

    # --- distributed actors (Ape-X, Horgan et al. 2018; needs the ray extra) -----------------
    actors: int = _f(0, "Ray actor processes that play and feed the learner's replay (0: the single-process "
                        "trainer with --num-envs envs; >= 1 needs pip install -e \".[ray]\")")
    actor_envs: int = _f(2, "envs (worker processes) per actor; with --actors the replay holds --actors x "
                            "--actor-envs env rings and --num-envs is not used")
    ray_address: str = _f("", "Ray cluster to join ('auto': the one started by 'ray start --head' on this host, "
                              "or host:port); empty: a local instance on 127.0.0.1 sized to this machine")
    weight_sync_every: int = _f(100, "publish the learner's weights to the actors every this many gradient "
                                     "updates (updates, not agent steps)")
    apex_epsilon: float = _f(0.4, "base epsilon of the actors: actor i of N plays with epsilon^(1 + alpha*i/(N-1)) "
                                  "(Horgan et al. 2018; replaces --epsilon-* with --actors)")
    apex_alpha: float = _f(7.0, "exponent spread alpha of the actors' epsilons (Horgan et al. 2018 use 7)")
    actor_block_steps: int = _f(32, "vector steps per block an actor ships (a block is this x --actor-envs "
                                    "agent steps)")

    # --- tracking (Weights & Biases, through its own TensorBoard sync; needs the track extra) --
    track: bool = _f(False, "also send the run to Weights & Biases: its config, every TensorBoard scalar (same tags, "
                            "agent steps) and the evaluation videos; needs pip install -e \".[track]\" "
                            "(WANDB_MODE=offline writes it locally for a later 'wandb sync')")
    wandb_project: str = _f("vecdqn", "Weights & Biases project of a --track run")
    wandb_entity: str = _f("", "Weights & Biases entity (user or team) of a --track run (empty: your default)")
    wandb_group: str = _f("", "Weights & Biases group of a --track run, e.g. the seeds of one experiment or a "
                              "tuning study (empty: none)")

    def validate(self) -> None:
        """Check every value that can be checked without starting an env or torch (the device
        names and ``--amp`` are checked once, by `vecdqn.staging`, in `vecdqn.preflight`).

        Raises:
            ValueError: naming the bad option, its value and what is allowed.
        """
        self._check_ranges()
        self.env_options().validate(option_flag)
        self._check_schedules()
        self._check_relations()

    def _check_ranges(self) -> None:
        """Each number on its own: counts, rates, probabilities."""
        positive = [
            "total_steps", "num_envs", "buffer_size", "batch_size", "train_frequency",
            "target_update_frequency", "n_step", "log_every", "hidden_size", "eval_episodes", "per_beta_steps",
        ]
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{option_flag(name)} {value} must be a positive integer (>= 1)")
        for name in ["learning_starts", "checkpoint_every", "eval_every", "epsilon_decay_steps",
                     "torch_threads"]:
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{option_flag(name)} {value} must be >= 0")
        for name in ["learning_rate", "adam_eps", "worker_timeout"]:
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{option_flag(name)} {value} must be a positive number")
        for name in ["gamma", "epsilon_start", "epsilon_end", "eval_epsilon",
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

    def _check_schedules(self) -> None:
        """Each ``--*-schedule`` parses, and its values are in their quantity's range."""
        for name, low, high in [("epsilon_schedule", 0.0, 1.0), ("per_beta_schedule", 0.0, 1.0),
                                ("learning_rate_schedule", 0.0, math.inf)]:
            text = getattr(self, name)
            if not text:
                continue
            try:
                values = [v for _, v in parse_pairs(text)]
            except ValueError as err:
                raise ValueError(f"{option_flag(name)} {text!r}: {err}") from None
            bad = [v for v in values if not (low <= v <= high) or (name == "learning_rate_schedule" and v <= 0)]
            if bad:
                allowed = "positive" if high == math.inf else f"in [{low:g}, {high:g}]"
                raise ValueError(f"{option_flag(name)} {text!r}: values {bad} must be {allowed}")

    def _check_relations(self) -> None:
        """Values that must fit each other (batch and buffer, warm-up and length, ...) and names."""
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
        self._validate_actors()
        envs, envs_said = self.env_workers()
        ring = self.buffer_size // envs
        if ring < 2 * self.frame_stack + self.n_step:
            raise ValueError(
                f"--buffer-size {self.buffer_size} split over {envs_said} leaves {ring} slots per env; "
                f"with --frame-stack {self.frame_stack} and --n-step {self.n_step} use at least "
                f"{envs * (2 * self.frame_stack + self.n_step)}"
            )
        if self.run_name and (
            self.run_name in (".", "..") or "/" in self.run_name or "\\" in self.run_name
        ):
            raise ValueError(
                f"--run-name {self.run_name!r} must be a plain folder name (no '/', not '.' or '..'); the run is "
                f"written to --log-dir/<run-name>"
            )
        if self.preset and self.preset not in PRESETS:
            raise ValueError(f"--preset {self.preset!r} is unknown; choose one of {sorted(PRESETS)}")
        if self.overlap_forward and self.compile:
            raise ValueError("--overlap-forward cannot be combined with --compile (a compiled network is not called "
                             "from two threads); drop one of them")

    def _validate_actors(self) -> None:
        """The distributed options (see `validate`)."""
        if self.actors < 0:
            raise ValueError(f"--actors {self.actors} must be >= 0 (0: the single-process trainer)")
        for name in ("actor_envs", "weight_sync_every", "actor_block_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{option_flag(name)} {getattr(self, name)} must be a positive integer (>= 1)")
        if not 0.0 <= self.apex_epsilon <= 1.0:
            raise ValueError(f"--apex-epsilon {self.apex_epsilon} must be in [0, 1] (Horgan et al. 2018 use 0.4)")
        if not (self.apex_alpha >= 0 and math.isfinite(self.apex_alpha)):
            raise ValueError(f"--apex-alpha {self.apex_alpha} must be a finite number >= 0 (Horgan et al. 2018 "
                             "use 7)")
        if self.actors and self.save_replay:
            raise ValueError("--save-replay is not supported with --actors: a resumed run's actors start fresh "
                             "games and the replay refills for --learning-starts agent steps; drop --save-replay")
        if self.actors and self.seed + self.actors * self.actor_envs > 2**32:
            raise ValueError(f"--seed {self.seed} + --actors x --actor-envs exceeds 2**32; use a smaller seed")

    def env_workers(self) -> tuple[int, str]:
        """``(count, options)``: the env worker processes of the run and the options that set
        them: ``--actors A x --actor-envs K`` with actors, else ``--num-envs N``."""
        if self.actors:
            return self.actors * self.actor_envs, f"--actors {self.actors} x --actor-envs {self.actor_envs}"
        return self.num_envs, f"--num-envs {self.num_envs}"

    def schedule_points(self, quantity: str) -> list[tuple[float, float]]:
        """The ``(agent step, value)`` points of the ``"epsilon"``, ``"per_beta"`` or
        ``"learning_rate"`` schedule: its ``--*-schedule`` option when given, else the two-point
        shorthand (ε from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps``; β from
        ``per_beta_start`` to ``per_beta_end`` over ``per_beta_steps``, 0 without PER; a constant
        ``learning_rate``).

        Raises:
            ValueError: an unknown quantity or a malformed schedule.
        """
        if quantity not in ("epsilon", "per_beta", "learning_rate"):
            raise ValueError(f"unknown schedule {quantity!r}; use 'epsilon', 'per_beta' or 'learning_rate'")
        if quantity == "per_beta" and not self.per:
            return [(0, 0.0)]
        text = getattr(self, f"{quantity}_schedule")
        if text:
            return parse_pairs(text)
        if quantity == "epsilon":
            if self.epsilon_decay_steps == 0:
                return [(0, self.epsilon_end)]
            return [(0, self.epsilon_start), (self.epsilon_decay_steps, self.epsilon_end)]
        if quantity == "per_beta":
            return [(0, self.per_beta_start), (self.per_beta_steps, self.per_beta_end)]
        return [(0, self.learning_rate)]

    def env_options(self) -> EnvOptions:
        """The env preprocessing options of this run."""
        return EnvOptions(**{f.name: getattr(self, f.name) for f in fields(EnvOptions)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        """Build a Config from a saved dict, ignoring keys this version does not know."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any], overrides: Mapping[str, Any]) -> Config:
        """A saved run's configuration with the options given on resume put over it.

        Each option in ``overrides`` replaces its saved value, and so does what it implies
        (`replaced_options`): a two-point shorthand such as ``epsilon_end`` also clears a saved
        ``epsilon_schedule``, which would otherwise win over it. Not validated here.
        """
        values = dict(saved)
        for name in replaced_options(overrides):
            values.pop(name, None)  # back to its default; given options are put back just below
        return cls.from_dict({**values, **overrides})


def parse_pairs(text: str) -> list[tuple[float, float]]:
    """``"step:value,step:value,..."`` (agent steps from 0, strictly increasing) as a list of
    ``(step, value)`` points.

    >>> parse_pairs("0:1.0, 800000:0.1")
    [(0, 1.0), (800000, 0.1)]

    Raises:
        ValueError: naming the bad pair: not ``step:value`` numbers, a negative step, a value
            that is not finite, or steps that do not increase.
    """
    points: list[tuple[float, float]] = []
    for pair in text.split(","):
        step, sep, value = pair.strip().partition(":")
        try:
            if not sep:
                raise ValueError
            point = (int(step), float(value))
        except ValueError:
            raise ValueError(f"{pair.strip()!r} is not a 'step:value' pair (e.g. '0:1.0,250000:0.01')") from None
        if point[0] < 0:
            raise ValueError(f"step {point[0]} of {pair.strip()!r} is negative; steps count agent steps from 0")
        if not math.isfinite(point[1]):
            raise ValueError(f"the value of {pair.strip()!r} is not a finite number")
        points.append(point)
    steps = [s for s, _ in points]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"the steps {steps} must increase strictly")
    return points


# The two forms of each schedule: giving both is refused.
SCHEDULE_SHORTHANDS = {
    "epsilon_schedule": ("epsilon_start", "epsilon_end", "epsilon_decay_steps"),
    "per_beta_schedule": ("per_beta_start", "per_beta_end", "per_beta_steps"),
    "learning_rate_schedule": ("learning_rate",),
}


def replaced_options(given: Iterable[str]) -> set[str]:
    """The options that options ``given`` explicitly replace in an earlier set of values (a
    preset's, or a resumed run's saved ones): each given option, and the ``--*-schedule`` of
    each quantity whose two-point shorthand is given.

    Why the schedule: a schedule wins over its shorthand (`Config.schedule_points`), so keeping
    an earlier ``epsilon_schedule`` would silently ignore an explicit ``--epsilon-end``.

    >>> sorted(replaced_options({"epsilon_end", "total_steps"}))
    ['epsilon_end', 'epsilon_schedule', 'total_steps']
    """
    replaced = set(given)
    for schedule, shorthand in SCHEDULE_SHORTHANDS.items():
        if replaced.intersection(shorthand):
            replaced.add(schedule)
    return replaced


def option_flag(name: str) -> str:
    """The command-line flag of a `Config` field: ``"n_step" -> "--n-step"``."""
    return "--" + name.replace("_", "-")


def default_torch_threads(num_envs: int, cpu_count: int | None = None, device_type: str = "cpu") -> int:
    """Intra-op threads for the learner so it does not fight the env workers for cores.

    Rule: a learner on the CPU takes every core; a learner on a GPU takes the cores the env
    workers leave free (at least one, at most four: it only feeds the GPU).

    Why: on the CPU the learner is the bottleneck by far (an update costs several times the
    workers' CPU for one vector step, and `Trainer` overlaps the two), so it gets every core.
    A learner thread only loses badly to workers that are busy all the time (an env-bound
    run), which is the GPU case: there the workers get the cores. The README's Performance
    section has the measured figures.
    """
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    if device_type == "cpu":
        return max(1, cores)
    return max(1, min(4, cores - num_envs))
