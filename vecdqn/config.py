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
Hessel et al. 2018, Table 1; Dopamine's Rainbow configuration), counted in agent steps: where a
paper counts frames (Rainbow's 80K-frame warm-up is 20,000 agent steps) the default here may be
longer (``learning_starts`` 80,000 agent steps).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from vecdqn.envs.options import EnvOptions
from vecdqn.learners import LEARNERS, MAX_EPOCHS, check_learner_options, learner_spec
from vecdqn.presets import PRESETS, check_preset
from vecdqn.schedules import parse_pairs, replaced_options

# The smallest frame the Nature-DQN torso turns into at least one 1×1 feature map.
MIN_SCREEN_SIZE = 36
# The largest value of any whole-number option but --seed: 10**12 agent steps is over three years of
# training at 10,000 agent steps/s, and a count this size stays exact where the schedules turn it into
# a float64 (exact to 2**53) and where TensorBoard stores steps as int64.
MAX_COUNT = 10**12
# The longest duration of any option, in seconds: over 3 years, below `threading.TIMEOUT_MAX` (~9.2e9 s).
MAX_SECONDS = 10**8
# The Q-network's initial weights (`vecdqn.model.QNetwork`'s ``init``).
NETWORK_INITS = ("torch", "orthogonal")
# The rules an option can carry (each `Config` field's ``metadata["rules"]``), read through
# `options_with` by the command line, resume, the tuner and the distributed trainer:
RULES = {
    # fixes the shape of the networks, the envs or the replay, or names the preset the run's values
    # came from (its values are saved one by one; a second preset could not follow them)
    "fixed_on_resume": "a resumed run keeps its saved value",
    # each Ape-X actor plays --actor-envs envs with its own fixed epsilon (Horgan et al. 2018)
    "not_with_actors": "replaced by the actors' settings with --actors",
    "actors_only": "used only with --actors N",
    # a trial's run folder, tracking and resume are the tuner's
    "fixed_by_tuner": "set by scripts/tune.py for each trial",
    # changes neither what is learned nor how it is logged per agent step: runs that differ only in
    # these and the seed are seeds of one experiment (`vecdqn.curves`)
    "not_experiment": "not part of an experiment's definition (plots group runs over it)",
}
# Which env options an env uses is its family's (`vecdqn.envs.EnvFamily.options`), and which
# learner uses an option its record's (`vecdqn.learners.LearnerSpec.options`): no rule here.


def _f(default: Any, help: str, *rules: str, unit: str = "") -> Any:  # noqa: A002 - "help" mirrors argparse
    """A `Config` field: default, help, rules (`RULES` keys); a duration's ``unit="seconds"`` (`MAX_SECONDS`)."""
    assert set(rules) <= set(RULES) and unit in ("", "seconds"), (rules, unit)
    return field(default=default, metadata={"help": help, "rules": frozenset(rules), "unit": unit})


def options_with(rule: str) -> tuple[str, ...]:
    """The `Config` fields that carry ``rule`` (a key of `RULES`), in field order.

    >>> options_with("actors_only")[:2]
    ('actor_envs', 'ray_address')
    """
    if rule not in RULES:
        raise ValueError(f"unknown option rule {rule!r}; use one of {sorted(RULES)}")
    return tuple(f.name for f in fields(Config) if rule in f.metadata["rules"])


def check_options_used(given: set[str], config: Config, *, resuming: bool = False) -> None:
    """Refuse options given explicitly (``given``: field names) that ``config``'s run would not use:
    another learner's own (`vecdqn.learners.check_learner_options`), those ``"not_with_actors"``
    with ``--actors``, ``"actors_only"`` without, and those its other settings leave unread
    (`unused_options`). ``resuming``: the options come with ``--resume`` (``--algo`` is fixed).

    Raises:
        ValueError: one line naming the options and what to do instead.
    """
    check_learner_options([f.name for f in fields(Config) if f.name in given], config.algo, resuming=resuming)
    unused = [n for n in options_with("not_with_actors" if config.actors else "actors_only") if n in given]
    if unused:
        flags, it = ", ".join(option_flag(n) for n in unused), "it" if len(unused) == 1 else "them"
        if config.actors:
            raise ValueError(f"{flags} cannot be used with --actors {config.actors}: each actor plays --actor-envs "
                             f"envs with its own fixed epsilon (--apex-epsilon, --apex-alpha); drop {it}")
        raise ValueError(f"{flags} only appl{'ies' if it == 'it' else 'y'} with --actors N (N >= 1, Ray actors); add "
                         f"--actors or drop {it}")
    unread = {name: why for name, why in unused_options(config).items() if name in given}
    if unread:
        why = next(iter(unread.values()))
        same = [option_flag(n) for n, w in unread.items() if w == why]
        raise ValueError(f"{', '.join(same)} would have no effect: {why}; drop {'it' if len(same) == 1 else 'them'}")


def unused_options(config: Config) -> dict[str, str]:
    """``{field: why}`` of the options that ``config``'s run offers but would not read: the
    periodic evaluation's with ``eval_every == 0``, W&B's without ``track``, ``keep_checkpoints``
    without periodic checkpoints, ``epsilon_start`` without a decay, and its learner's
    (`vecdqn.learners.LearnerSpec.unused`)."""
    unused = dict(learner_spec(config.algo).unused(config))
    if config.eval_every == 0:
        unused |= dict.fromkeys(("eval_episodes", "eval_epsilon"), "--eval-every 0 turns the periodic evaluation off")
    elif config.eval_every > config.total_steps:
        unused |= dict.fromkeys(("eval_every", "eval_episodes", "eval_epsilon"), "no evaluation falls in --total-steps")
    if not config.track:
        unused |= dict.fromkeys(("wandb_project", "wandb_entity", "wandb_group"),
                                "they name the Weights & Biases run of --track, which is off")
    if config.keep_checkpoints and not 0 < config.checkpoint_every <= config.total_steps:
        unused["keep_checkpoints"] = "--checkpoint-every writes no periodic checkpoint in --total-steps to keep"
    if config.epsilon_decay_steps == 0 and not config.epsilon_schedule:
        unused["epsilon_start"] = "--epsilon-decay-steps 0 acts at --epsilon-end from agent step 0"
    return unused


def _env_field(name: str, *rules: str) -> Any:
    """A `Config` field mirroring `EnvOptions`' field ``name``: one default, one help text."""
    source = EnvOptions.__dataclass_fields__[name]
    return _f(source.default, source.metadata["help"], *rules)


@dataclass
class Config:
    """Every setting of a training run (see the module docstring for units)."""

    # --- experiment -------------------------------------------------------------------------
    env_id: str = _f("BreakoutNoFrameskip-v4", "gymnasium env id: an ALE game (BreakoutNoFrameskip-v4, "
                     "ALE/Breakout-v5; the wrappers always do the frame skipping) or vecdqn/Catch-v0",
          "fixed_on_resume")
    seed: int = _f(1, "seed in [0, 2**32) of envs (env i gets seed+i), replay sampling and network init",
                   "not_experiment", "fixed_on_resume")
    total_steps: int = _f(10_000_000, "length of the run, in agent steps summed over envs", "not_experiment")
    num_envs: int = _f(8, "number of envs (games) stepped together, in env worker processes (AsyncVectorEnv)",
                       "fixed_on_resume", "not_with_actors")
    envs_per_worker: int = _f(0, "envs each env worker process steps, a divisor of --num-envs (1: a process per "
                                 "env; 0: auto, the fewest workers that split the envs evenly with at least one "
                                 "per core, e.g. 64 envs on 2 cores: 2 workers of 32); the results are the same "
                                 "for every value", "not_with_actors", "not_experiment")
    log_dir: str = _f("runs", "folder under which the run folder <env_id>__<seed>__<unix time> is made "
                              "(a / in the env id becomes -)", "fixed_by_tuner", "not_experiment")
    run_name: str = _f("", "run folder name under --log-dir (empty: <env_id>__<seed>__<unix time>)",
                       "fixed_by_tuner", "not_experiment")
    device: str = _f("auto", "torch device for the learner: auto (cuda when available), cpu, cuda, cuda:1, ...",
                     "not_experiment")
    torch_threads: int = _f(0, "torch intra-op threads of the learner, at most 1024 (0: all cores on a CPU "
                               "learner, the cores the env workers leave free on a GPU)", "not_experiment")
    log_every: int = _f(10_000, "write scalar metrics every this many agent steps", "not_experiment")
    preset: str = _f("", f"named set of defaults to start from: {', '.join(PRESETS)} (their values and sources are "
                         "listed below); explicit options win",
                     "fixed_on_resume", "fixed_by_tuner")

    # --- learner ------------------------------------------------------------------------------
    algo: str = _f("dqn", "learner: " + "; ".join(f"{name} ({spec.summary})" for name, spec in LEARNERS.items()),
                   "fixed_on_resume")
    layer_norm: bool | None = _f(None, "LayerNorm before every hidden ReLU of the Q-network (PQN's network; each "
                                       "conv normalized over its whole feature map); unset: on with --algo pqn, "
                                       "off with --algo dqn", "fixed_on_resume")
    init: str = _f("torch", "initial weights of the Q-network: torch (PyTorch's defaults) or orthogonal (every conv "
                            "and linear layer, output included, orthogonal with gain sqrt(2), zero biases, as "
                            "CleanRL's PQN)", "fixed_on_resume")

    # --- environment (DeepMind/Nature preprocessing): the fields of `EnvOptions` -------------
    noop_max: int = _env_field("noop_max")
    frame_skip: int = _env_field("frame_skip", "fixed_on_resume")
    frame_stack: int = _env_field("frame_stack", "fixed_on_resume")
    screen_size: int = _env_field("screen_size", "fixed_on_resume")
    episodic_life: bool = _env_field("episodic_life")
    fire_reset: bool = _env_field("fire_reset")
    repeat_action_probability: float | None = _env_field("repeat_action_probability")
    max_episode_frames: int = _env_field("max_episode_frames")

    # --- replay -----------------------------------------------------------------------------
    buffer_size: int = _f(1_000_000, "replay capacity, in frame slots: one per transition + one per episode",
                          "fixed_on_resume")
    per: bool = _f(True, "prioritized replay (Schaul et al. 2016); --no-per samples uniformly")
    per_alpha: float = _f(0.5, "priority exponent alpha of prioritized replay")
    per_beta_start: float = _f(0.4, "importance-sampling exponent beta at the start of learning")
    per_beta_end: float = _f(1.0, "importance-sampling exponent beta after --per-beta-steps")
    per_beta_steps: int = _f(10_000_000, "agent steps, from step 0, over which beta anneals linearly to its end value")
    per_beta_schedule: str = _f("", "beta as 'step:value,...' pairs in agent steps, linear between them and constant "
                                    "after the last (replaces --per-beta-start/-end/-steps)")
    per_eps: float = _f(1e-6, "added to |TD error| to form a priority")
    n_step: int = _f(3, "n of n-step returns, in agent steps (1: one-step TD; at most 1000)",
                     "fixed_on_resume")

    # --- learner ----------------------------------------------------------------------------
    learning_starts: int = _f(80_000, "agent steps of experience collected before the first update")
    train_frequency: int = _f(4, "one gradient update every this many agent steps")
    batch_size: int = _f(32, "transitions per gradient update")
    learning_rate: float = _f(6.25e-5, "learning rate of the learner's optimizer: Adam for the replay learners "
                                       "(DQN's), RAdam for PQN (constant; see --learning-rate-schedule)")
    learning_rate_schedule: str = _f("", "learning rate as 'step:value,...' pairs in agent steps, linear between "
                                         "them and constant after the last (replaces --learning-rate)")
    adam_eps: float = _f(1.5e-4, "Adam epsilon")
    gamma: float = _f(0.99, "discount factor per agent step")
    target_update_frequency: int = _f(8_000, "copy online to target network every this many agent steps")
    max_grad_norm: float = _f(10.0, "clip the global gradient norm to this (0: no clipping)")
    clip_rewards: bool = _f(True, "learn from sign(reward) (Mnih et al. 2015); logged returns stay raw")
    double: bool = _f(True, "double-DQN target (van Hasselt et al. 2016); --no-double uses max_a Q_target")
    dueling: bool = _f(True, "dueling head (Wang et al. 2016); --no-dueling uses a plain linear head",
                       "fixed_on_resume")
    hidden_size: int = _f(512, "units of the fully connected layer", "fixed_on_resume")
    compile: bool = _f(False, "torch.compile: on CUDA the update's forward and backward as CUDA graphs "
                              "(mode reduce-overhead, static input buffers); elsewhere the Q-network", "not_experiment")
    amp: str = _f("auto", "autocast the learner's forward passes: auto (bf16 on a CUDA GPU that computes in bf16 or "
                          "a CPU with native bf16, avx512_bf16 or amx_bf16; else fp32), off, or bf16 (fp32 master "
                          "weights and loss); the mode chosen is printed at the start and saved in config.json")
    prefetch: bool | None = _f(None, "sample the next batch on a background thread during each update; "
                                     "priorities then arrive one update late (as in Ape-X); unset: on with a CUDA "
                                     "learner, off elsewhere (--no-prefetch: synchronous, priorities before the "
                                     "next sample)")
    overlap_forward: bool = _f(False, "CPU learner: compute the next observations' target and online Q-values on a "
                                      "second thread beside the batch's online forward pass (a core the env "
                                      "workers leave idle); the same arithmetic, so a run changes only in speed",
                               "not_experiment")
    replay_device: str = _f("", "keep a copy of the replay's frames on this torch device (auto, cuda, cpu, ...) "
                                "and gather batches there; empty: batches are copied out on the host")

    # --- PQN (--algo pqn; Gallici et al. 2025, Algorithm 1) ----------------------------------
    rollout_steps: int = _f(32, "vector steps per PQN rollout (T); a rollout is T x --num-envs agent steps",
                            "fixed_on_resume")
    q_lambda: float = _f(0.65, "lambda of PQN's Q(lambda) returns (0: one-step Q-learning targets, 1: Monte-Carlo "
                               "returns within the rollout)")
    epochs: int = _f(2, f"passes of PQN over each rollout (at most {MAX_EPOCHS})")
    minibatches: int = _f(4, "minibatches per pass over a PQN rollout; each holds T x --num-envs / this "
                             "transitions (must divide it)")
    overlap_update: bool = _f(False, "PQN: learn from rollout k on a second thread while the envs collect rollout "
                                     "k+1 with a copy of the network synced at each rollout (a one-rollout policy "
                                     "lag; still a function of the seed)")

    # --- distributional value and noisy nets (Bellemare, Dabney, Munos 2017; Fortunato et al. 2018) --
    atoms: int = _f(51, "atoms of the categorical return distribution (C51; 1: no distribution, one Q-value per "
                        "action)", "fixed_on_resume")
    v_min: float = _f(-10.0, "return of the lowest atom, in clipped-reward units", "fixed_on_resume")
    v_max: float = _f(10.0, "return of the highest atom, in clipped-reward units", "fixed_on_resume")
    noisy: bool = _f(True, "noisy linear layers with factorised Gaussian noise explore in place of epsilon-greedy "
                           "(epsilon 0); --no-noisy: plain layers and the epsilon schedule", "fixed_on_resume")
    noisy_sigma: float = _f(0.5, "sigma_0 of the noisy layers: each noise scale starts at sigma_0 / sqrt(inputs)",
                            "fixed_on_resume")

    # --- exploration ------------------------------------------------------------------------
    epsilon_start: float = _f(1.0, "epsilon-greedy epsilon at step 0", "not_with_actors")
    epsilon_end: float = _f(0.01, "epsilon after the decay", "not_with_actors")
    epsilon_decay_steps: int = _f(250_000, "agent steps, from step 0, over which epsilon decays linearly (0: "
                                           "--epsilon-end from step 0)", "not_with_actors")
    epsilon_schedule: str = _f("", "epsilon as 'step:value,...' pairs in agent steps, e.g. '0:1.0,800000:0.1,"
                                   "16000000:0.01': linear between them, constant after the last (replaces "
                                   "--epsilon-start/-end/-decay-steps)", "not_with_actors")

    # --- checkpoints and evaluation -----------------------------------------------------------
    checkpoint_every: int = _f(500_000, "write checkpoints/latest.pt every this many agent steps (0: only at the end)",
                               "not_experiment")
    keep_checkpoints: bool = _f(False, "also keep each periodic checkpoint as checkpoints/step_<agent step>.pt "
                                       "(networks and counters, no replay), e.g. to evaluate them later",
                                "not_experiment")
    save_replay: bool = _f(False, "also save the replay buffer with each checkpoint (for exact resume)",
                           "not_experiment")
    resume: str = _f("", "run folder (or checkpoint file) to continue", "fixed_by_tuner", "not_experiment")
    worker_timeout: float = _f(60.0, "seconds an env worker may take to answer before the run stops", "not_experiment",
                               unit="seconds")
    eval_every: int = _f(250_000, "evaluate greedily every this many agent steps (0: off)")
    eval_episodes: int = _f(5, "whole games per periodic evaluation")
    eval_epsilon: float = _f(0.001, "epsilon of the periodic evaluation")

    # --- distributed actors (Ape-X, Horgan et al. 2018; needs the ray extra) -----------------
    actors: int = _f(0, "Ray actor processes that play and feed the learner's replay (0: the single-process "
                        "trainer with --num-envs envs; >= 1 needs pip install -e \".[ray]\")")
    actor_envs: int = _f(2, "envs (worker processes) per actor; with --actors the replay holds --actors x "
                            "--actor-envs env rings and --num-envs is not used", "actors_only")
    ray_address: str = _f("", "Ray cluster to join ('auto': the one started by 'ray start --head' on this host, "
                              "or host:port); empty: a local instance on 127.0.0.1 sized to this machine",
          "actors_only")
    weight_sync_every: int = _f(100, "publish the learner's weights to the actors every this many gradient "
                                     "updates (updates, not agent steps)", "actors_only")
    apex_epsilon: float = _f(0.4, "base epsilon of the actors: actor i of N plays with epsilon^(1 + alpha*i/(N-1)) "
                                  "(Horgan et al. 2018; replaces --epsilon-* with --actors)", "actors_only")
    apex_alpha: float = _f(7.0, "exponent spread alpha of the actors' epsilons (Horgan et al. 2018 use 7)",
                           "actors_only")
    actor_block_steps: int = _f(32, "vector steps per block an actor ships (a block is this x --actor-envs "
                                    "agent steps)", "actors_only")

    # --- tracking (Weights & Biases: what TensorBoard gets, at the same agent steps; needs the track extra) --
    track: bool = _f(False, "also send the run to Weights & Biases: its config, every TensorBoard scalar (same tags, "
                            "agent steps) and the evaluation videos; needs pip install -e \".[track]\" "
                            "(WANDB_MODE=offline writes it locally for a later 'wandb sync')",
                     "fixed_by_tuner", "not_experiment")
    wandb_project: str = _f("vecdqn", "Weights & Biases project of a --track run", "fixed_by_tuner", "not_experiment")
    wandb_entity: str = _f("", "Weights & Biases entity (user or team) of a --track run (empty: your default)",
                           "fixed_by_tuner", "not_experiment")
    wandb_group: str = _f("", "Weights & Biases group of a --track run, e.g. the seeds of one experiment or a "
                              "tuning study (empty: none)", "fixed_by_tuner", "not_experiment")

    def validate(self) -> None:
        """Check every value that can be checked without starting an env or torch (the device
        names and ``--amp`` are checked once, by `vecdqn.staging`, in `vecdqn.preflight`).

        Raises:
            ValueError: naming the bad option, its value and what is allowed.
        """
        _check_ranges(self)
        self.env_options().validate(option_flag)
        _check_schedules(self)
        learner = learner_spec(self.algo)
        _check_relations(self)
        _check_actors(self)
        learner.check(self)

    def envs_per_worker_on(self, cores: int) -> int:
        """K, the envs each worker process steps on a machine of ``cores`` cores: ``envs_per_worker``,
        or when 0 the fewest workers ``W >= min(cores, N)`` that divide ``N``, ``K = N / W``.

        >>> Config(num_envs=64).envs_per_worker_on(2), Config(num_envs=8).envs_per_worker_on(16)
        (32, 1)
        """
        if self.envs_per_worker:
            return self.envs_per_worker
        n = self.num_envs
        return n // next(w for w in range(min(max(1, cores), n), n + 1) if n % w == 0)

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

    @property
    def uses_layer_norm(self) -> bool:
        """Whether the Q-network has LayerNorm: ``layer_norm``, or unset, the learner's choice
        (`vecdqn.learners.LearnerSpec.layer_norm`: on for PQN only)."""
        return learner_spec(self.algo).layer_norm if self.layer_norm is None else bool(self.layer_norm)

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


def _check_ranges(c: Config) -> None:
    """Each number on its own: counts (none above `MAX_COUNT`), durations (none above
    `MAX_SECONDS`), rates, probabilities."""
    for f in fields(c):
        value = getattr(c, f.name)
        if f.type == "int" and f.name != "seed" and value > MAX_COUNT:
            raise ValueError(f"{option_flag(f.name)} {value} is above 10**12, the largest count an option takes "
                             "(10**12 agent steps are over 3 years at 10,000 agent steps/s)")
        if f.metadata["unit"] == "seconds" and value > MAX_SECONDS:
            raise ValueError(f"{option_flag(f.name)} {value} seconds is above 10**8 (over 3 years), the longest "
                             "duration an option takes")
    positive = [
        "total_steps", "num_envs", "buffer_size", "batch_size", "train_frequency",
        "target_update_frequency", "n_step", "log_every", "hidden_size", "eval_episodes", "per_beta_steps",
    ]
    for name in positive:
        value = getattr(c, name)
        if value < 1:
            raise ValueError(f"{option_flag(name)} {value} must be a positive integer (>= 1)")
    for name in ["learning_starts", "checkpoint_every", "eval_every", "epsilon_decay_steps"]:
        value = getattr(c, name)
        if value < 0:
            raise ValueError(f"{option_flag(name)} {value} must be >= 0")
    for name in ["learning_rate", "adam_eps", "worker_timeout"]:
        value = getattr(c, name)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{option_flag(name)} {value} must be a positive number")
    for name in ["gamma", "epsilon_start", "epsilon_end", "eval_epsilon",
                 "per_beta_start", "per_beta_end"]:
        value = getattr(c, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{option_flag(name)} {value} must be in [0, 1]")
    for name, value, ok, allowed in [
        ("per_alpha", c.per_alpha, c.per_alpha >= 0, ">= 0 (0: uniform sampling)"),
        ("per_eps", c.per_eps, c.per_eps > 0, "> 0"),
        ("max_grad_norm", c.max_grad_norm, c.max_grad_norm >= 0, ">= 0 (0: no clipping)"),
        ("torch_threads", c.torch_threads, 0 <= c.torch_threads <= 1024, "in [0, 1024] (0: chosen for the device)"),
    ]:
        if not (ok and math.isfinite(value)):
            raise ValueError(f"{option_flag(name)} {value} must be a finite number {allowed}")


def _check_schedules(c: Config) -> None:
    """Each ``--*-schedule`` parses, and its values are in their quantity's range."""
    for name, low, high in [("epsilon_schedule", 0.0, 1.0), ("per_beta_schedule", 0.0, 1.0),
                            ("learning_rate_schedule", 0.0, math.inf)]:
        text = getattr(c, name)
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


def _check_relations(c: Config) -> None:
    """Values that must fit each other (seeds and envs, screen and torso) and names; DQN's own."""
    if not 0 <= c.seed < 2**32:
        raise ValueError(f"--seed {c.seed} must be in [0, 2**32) (env i is seeded seed + i)")
    if c.envs_per_worker < 0 or (c.envs_per_worker and c.num_envs % c.envs_per_worker):
        divisors = [k for k in range(1, c.num_envs + 1) if c.num_envs % k == 0]
        raise ValueError(f"--envs-per-worker {c.envs_per_worker} must divide --num-envs {c.num_envs}; use 0 (auto) "
                         f"or one of {divisors}")
    if c.seed + c.num_envs > 2**32:
        raise ValueError(f"--seed {c.seed} + --num-envs {c.num_envs} exceeds 2**32; use a smaller seed")
    if c.screen_size < MIN_SCREEN_SIZE:
        raise ValueError(f"--screen-size {c.screen_size} is too small for the Nature-DQN torso (8×8/4, 4×4/2, 3×3/1 "
                         f"convolutions); use at least {MIN_SCREEN_SIZE}")
    if c.run_name and len(c.run_name.encode()) > 255:
        raise ValueError(f"--run-name of {len(c.run_name.encode())} bytes is too long for a folder name; use at most "
                         "255 bytes")
    if c.run_name and (c.run_name.strip(" .") == "" or {"/", "\\"} & set(c.run_name) or not c.run_name.isprintable()):
        raise ValueError(f"--run-name {c.run_name!r} must be a plain folder name (no '/', no control character such as "
                         "a newline, not only dots or spaces); the run is written to --log-dir/<run-name>")
    if c.init not in NETWORK_INITS:
        raise ValueError(f"--init {c.init!r} is not one of {', '.join(NETWORK_INITS)}")
    if c.preset:
        check_preset(c.preset)


def _check_actors(c: Config) -> None:
    """The distributed options of ``c`` (see `Config.validate`)."""
    if c.actors < 0:
        raise ValueError(f"--actors {c.actors} must be >= 0 (0: the single-process trainer)")
    for name in ("actor_envs", "weight_sync_every", "actor_block_steps"):
        if getattr(c, name) < 1:
            raise ValueError(f"{option_flag(name)} {getattr(c, name)} must be a positive integer (>= 1)")
    if not 0.0 <= c.apex_epsilon <= 1.0:
        raise ValueError(f"--apex-epsilon {c.apex_epsilon} must be in [0, 1] (Horgan et al. 2018 use 0.4)")
    if not (c.apex_alpha >= 0 and math.isfinite(c.apex_alpha)):
        raise ValueError(f"--apex-alpha {c.apex_alpha} must be a finite number >= 0 (Horgan et al. 2018 use 7)")
    if c.actors and c.save_replay:
        raise ValueError("--save-replay is not supported with --actors: a resumed run's actors start fresh "
                         "games and the replay refills for --learning-starts agent steps; drop --save-replay")
    if c.actors and c.seed + c.actors * c.actor_envs > 2**32:
        raise ValueError(f"--seed {c.seed} + --actors x --actor-envs exceeds 2**32; use a smaller seed")


def option_flag(name: str) -> str:
    """The command-line flag of a `Config` field: ``"n_step" -> "--n-step"``."""
    return "--" + name.replace("_", "-")
