"""The learners: the seam between the training core and a learner, and one record per learner.

Everything that depends on which learner runs (``--algo``) asks that learner's `LearnerSpec`
here (`learner_spec`), never its name: the command line, the config's checks, preflight's
memory and disk estimates, the `vecdqn.train_state.TrainState`, resume, checkpoint loading and
the core. A learner is a package (``vecdqn/dqn/``, ``vecdqn/pqn/``) and one record in
`LEARNERS`; `register` adds one at run time.

The seam (`Learner`), in the order the core calls it::

    learner = Class(config, device, obs_shape, n_actions)
    learner.restore(saved)           on resume: a checkpoint's state_dict (ReplayLearner: then
    learner.restore_replay(replay)   the saved replay, when there is one)
    learner.start()
    learner.new_games()              whenever the collector starts new games (a new run too)
    each collect:  act(obs, step) ─ store(transitions) ─ learn(state, k, report)
                   (store then learn then act on the vector collector: a learner whose targets
                   need the next observation's values, as PQN's, completes them in that act and
                   learns nothing until it has)
    learner.learn(state, 0, report)  at the run's end, before its final checkpoint: what is due
                                     with no agent step to come (PQN's last full rollout)
    learner.sync()                   before every evaluation, checkpoint or weight broadcast:
                                     any update in flight is done, a non-finite one raised here
    learner.network / state_dict()   read only after sync
    learner.close()

Sources: DQN (Mnih et al. 2015; van Hasselt et al. 2016; Wang et al. 2016; Schaul et al. 2016;
Hessel et al. 2018) in `vecdqn.dqn`; PQN (Gallici et al. 2025) in `vecdqn.pqn`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from vecdqn.presets import PRESET_SOURCES, PRESETS

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["LEARNERS", "POLICY_KEY", "Learner", "LearnerSpec", "ReplayLearner", "check_learner_options",
           "learner_spec", "make_learner", "register"]

# The key of a learner's `Learner.state_dict` (and so of a checkpoint's ``agent``) that holds the
# greedy policy's network weights: what evaluation, the actors and `vecdqn.checkpoint` load.
POLICY_KEY = "online"


class Learner(Protocol):
    """What the training core asks of every learner (see the module for the call order). Counts
    live in the core's `vecdqn.train_state.TrainState`, which `learn` reads and updates
    (``updates``, a target network's clock)."""

    n_actions: int
    obs_shape: tuple[int, ...]

    @property
    def network(self) -> torch.nn.Module:
        """The greedy policy's Q-network, ``(B, S, H, W) uint8 -> (B, A) float32``; after `sync`."""

    def restore(self, saved: dict[str, Any]) -> None:
        """Load a checkpoint's `state_dict`."""

    def start(self) -> None:
        """Ready to act and learn (after any `restore`)."""

    def new_games(self) -> str | None:
        """The collector starts new games (after `start`, before the first `act`): a new run, or a
        resume that cannot continue the saved games; what the learner holds of old games must not
        continue into the new ones. Returns a line for the console, or None."""

    def epsilon(self, step: int) -> float:
        """The exploration rate of its actions at agent step ``step``."""

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` actions at agent step ``step``."""

    def store(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
              terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """One vector step of N envs: ``obs``/``next_obs (N, S, H, W) uint8`` (``next_obs`` the
        final observation where a step ended an episode), ``actions (N,) int64``, ``rewards (N,)``
        float (for learning: clipped), ``terminated``/``truncated (N,) bool``. Returns where it
        filed them, ``(N,) int64``."""

    def learn(self, state: Any, agent_steps: int, report: Callable[[dict[str, float]], None]) -> None:
        """Learn what is due for ``agent_steps`` more agent steps; each update's metrics
        (``td_loss``, ``q_values``, ...) to ``report``, which raises on a non-finite one."""

    def sync(self) -> None:
        """Finish any update in flight (its metrics wait for the next `learn`), so that `network`
        and `state_dict` show it.

        Raises:
            vecdqn.collector.NonFiniteError: that update's loss or mean Q-value is NaN or infinite.
        """

    def scalars(self, step: int) -> dict[str, float]:
        """Its own TensorBoard scalars at agent step ``step``."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of it (networks, optimizer, generators); the policy's weights
        under `POLICY_KEY`. After `sync`."""

    def close(self) -> None:
        """Stop its threads."""


class ReplayLearner(Learner, Protocol):
    """A learner that keeps a replay: transitions may come from any env stream (Ape-X's actors
    feed it through `vecdqn.distributed.blocks.BlockIngest`), with priorities set from outside,
    and ``--save-replay`` keeps the replay beside a checkpoint."""

    n_step: int  # the replay's n of its n-step returns

    def start_envs(self, count: int) -> None:
        """The replay takes ``count`` env streams (its N)."""

    def store(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
              terminated: np.ndarray, truncated: np.ndarray, envs: Any = None) -> np.ndarray:
        """As `Learner.store`, for the env streams ``envs`` (None: all N, in order)."""

    def set_priorities(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """Priorities ``|δ| + ε`` of the ``(M,)`` replay slots ``slots``."""

    def replay(self) -> Any:
        """The replay, for a checkpoint with ``--save-replay``."""

    def restore_replay(self, replay: Any) -> None:
        """Continue with a saved replay (after `restore`, before `start`)."""


@dataclass(frozen=True)
class LearnerSpec:
    """One learner's record.

    Attributes:
        name: its ``--algo`` value.
        summary: one phrase for ``--help``.
        learner: ``"module:Class"`` of its `Learner` (imported when a run makes one), built as
            ``Class(config, device, obs_shape, n_actions)``.
        network: ``"module:callable"`` (a dotted attribute after the colon, e.g.
            ``"vecdqn.model:QNetwork.from_config"``) that builds the network it acts with as
            ``callable(config, n_actions, obs_shape)``: ``(B, S, H, W) uint8 -> (B, A) float32``
            values whose argmax is the greedy action, with the weights a checkpoint keeps under
            `POLICY_KEY`. What needs the policy without the learner (`build_network`) asks it here:
            a checkpoint's policy (evaluation, video), the Ape-X actors, preflight's estimates.
        options: the `vecdqn.config.Config` fields it uses that other learners do not (options
            no record lists are every learner's); given explicitly to another learner's run,
            they are refused (`check_learner_options`).
        check: raises ValueError, naming the option, for values of its options that cannot run.
        learns_from: the agent step of its first update in a new run.
        keeps_replay: a `ReplayLearner` (``--save-replay``, ``--actors`` and a resume's replay).
        layer_norm: whether its network has LayerNorm when ``--layer-norm`` is not given.
        storage: ``(bytes, what)``: the memory its transitions take and the options that size it.
        checkpoint_bytes: the bytes of its `Learner.state_dict` given the network's parameter count.
        first_update: ``(agent step, what sets it)`` of a new run's first update at the earliest
            (a new run shorter than that is refused); None: ``learns_from``.
        defaults: `vecdqn.config.Config` values of a new run of this learner where they differ
            from `Config`'s own defaults; a preset's values and the options given win over them.
        agent: ``"module:Class"`` of the agent a replay learner (``vecdqn.dqn:DQNLearner``) hosts in
            place of DQN's, built by its ``from_config(config, device, obs_shape, n_actions,
            learning_rate)`` with DQN's agent's interface; None: the learner's own.
        presets: the learner's own presets, ``{name: (source, base, values)}``: the preset ``base``
            of `vecdqn.presets` with ``values`` over it and ``algo`` set to this learner, which
            `vecdqn.presets` lists with the others.
        unused: ``{field: why}`` of the `vecdqn.config.Config` fields a run of this config would
            not read although the learner offers them (e.g. ε under noisy exploration); given
            explicitly, they are refused (`vecdqn.config.check_options_used`).
    """

    name: str
    summary: str
    learner: str
    network: str
    options: frozenset[str]
    check: Callable[[Any], None]
    learns_from: Callable[[Any], int]
    keeps_replay: bool
    layer_norm: bool
    storage: Callable[[Any], tuple[int, str]]
    checkpoint_bytes: Callable[[Any, int], int]
    first_update: Callable[[Any], tuple[int, str]] | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    agent: str | None = None
    presets: Mapping[str, tuple[str, str, Mapping[str, Any]]] = field(default_factory=dict)
    unused: Callable[[Any], Mapping[str, str]] = lambda c: {}

    def load(self) -> type:
        """Its `Learner` class."""
        return _resolve(self.learner)

    def load_agent(self) -> type:
        """Its `agent` class (see the attribute)."""
        return _resolve(self.agent)

    def build_network(self, config: Any, n_actions: int, obs_shape: tuple[int, ...] | None = None) -> torch.nn.Module:
        """The network it acts with (`network`) for ``A = n_actions`` and observations ``obs_shape``
        (None: the config's ``(frame_stack, screen_size, screen_size)``), freshly initialised,
        on the current default device."""
        return _resolve(self.network)(config, n_actions, obs_shape)


def _resolve(path: str) -> Any:
    """The object ``"module:attr.attr"`` names."""
    module, _, attrs = path.partition(":")
    found: Any = importlib.import_module(module)
    for attr in attrs.split("."):
        found = getattr(found, attr)
    return found


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# -- DQN ---------------------------------------------------------------------------------------------
# Longest n-step return accepted (the return matrix is n x n; Rainbow, Hessel et al. 2018, uses 3).
MAX_N_STEP = 1000


def _check_dqn(c: Any) -> None:
    """Batch and buffer, warm-up and length, the replay's rings per env, the update's threads."""
    if c.batch_size > c.buffer_size:
        raise ValueError(f"--batch-size {c.batch_size} is larger than --buffer-size {c.buffer_size}; use a buffer "
                         "at least as large as one batch")
    if c.learning_starts < c.batch_size:
        raise ValueError(f"--learning-starts {c.learning_starts} is below --batch-size {c.batch_size}; collect at "
                         "least one batch of transitions before learning")
    if c.learning_starts > c.total_steps:
        raise ValueError(f"--learning-starts {c.learning_starts} is above --total-steps {c.total_steps}; the run "
                         "would end before its first update")
    if c.n_step > MAX_N_STEP:
        raise ValueError(f"--n-step {c.n_step} is too long; use at most {MAX_N_STEP} (Rainbow uses 3)")
    envs, envs_said = c.env_workers()
    ring = c.buffer_size // envs
    if ring < 2 * c.frame_stack + c.n_step:
        raise ValueError(f"--buffer-size {c.buffer_size} split over {envs_said} leaves {ring} slots per env; with "
                         f"--frame-stack {c.frame_stack} and --n-step {c.n_step} use at least "
                         f"{envs * (2 * c.frame_stack + c.n_step)}")
    if c.overlap_forward and c.compile:
        raise ValueError("--overlap-forward cannot be combined with --compile (a compiled network is not called "
                         "from two threads); drop one of them")


def _dqn_storage(c: Any) -> tuple[int, str]:
    from vecdqn.replay import PrioritizedReplayBuffer

    size = PrioritizedReplayBuffer.bytes_needed(c.buffer_size, (c.frame_stack, c.screen_size, c.screen_size),
                                                n_step=c.n_step)
    return size, f"the replay of --buffer-size {c.buffer_size}"


# -- PQN ---------------------------------------------------------------------------------------------
# Most PQN epochs per rollout accepted (Gallici et al. 2025 use 2 on Atari, CleanRL 4): a rollout's
# epochs are one uninterruptible step of the run.
MAX_EPOCHS = 100


def _check_pqn(c: Any) -> None:
    """Rollout, epochs and minibatches, λ; no Ape-X actors."""
    for name in ("rollout_steps", "epochs", "minibatches"):
        if getattr(c, name) < 1:
            raise ValueError(f"{_flag(name)} {getattr(c, name)} must be a positive integer (>= 1)")
    if c.epochs > MAX_EPOCHS:
        raise ValueError(f"--epochs {c.epochs} is more than {MAX_EPOCHS} passes over each rollout; use 1 to "
                         f"{MAX_EPOCHS} (PQN's Atari runs use 2 to 4)")
    if not 0.0 <= c.q_lambda <= 1.0:
        raise ValueError(f"--q-lambda {c.q_lambda} must be in [0, 1] (PQN's Atari runs use 0.65)")
    rollout = c.rollout_steps * c.num_envs
    if rollout % c.minibatches:
        raise ValueError(f"--minibatches {c.minibatches} does not divide a rollout of --rollout-steps "
                         f"{c.rollout_steps} x --num-envs {c.num_envs} = {rollout} transitions; use a divisor of "
                         f"{rollout}")
    if c.actors:
        raise ValueError(f"--actors {c.actors} cannot be used with --algo pqn: PQN learns from its own vector "
                         "env's rollouts; drop --actors")


def rollout_bytes(c: Any) -> int:
    """Bytes of one PQN rollout: ``T × N`` stacked observations and their five fields."""
    return c.rollout_steps * c.num_envs * (c.frame_stack * c.screen_size**2 + 32)


def _pqn_storage(c: Any) -> tuple[int, str]:
    rollouts = 2 if c.overlap_update else 1  # with --overlap-update one is learned from while one fills
    said = f"{'two rollouts (--overlap-update)' if rollouts == 2 else 'a rollout'} of --rollout-steps {c.rollout_steps}"
    return rollouts * rollout_bytes(c), said


# -- Rainbow -----------------------------------------------------------------------------------------
# Most atoms accepted (Bellemare, Dabney, Munos 2017 and Rainbow use 51).
MAX_ATOMS = 1001


def _check_rainbow(c: Any) -> None:
    """DQN's checks (its replay and update), the return distribution's support, the noise scale;
    the QNetwork's LayerNorm and orthogonal initial weights are not offered."""
    _check_dqn(c)
    if not 1 <= c.atoms <= MAX_ATOMS:
        raise ValueError(f"--atoms {c.atoms} must be 1 (no distribution) to {MAX_ATOMS} (Rainbow uses 51)")
    if c.atoms > 1 and not c.v_min < c.v_max:
        raise ValueError(f"--v-min {c.v_min:g} must be below --v-max {c.v_max:g} (Rainbow: -10 and 10)")
    if not c.noisy_sigma >= 0:
        raise ValueError(f"--noisy-sigma {c.noisy_sigma:g} must be >= 0 (Rainbow uses 0.5)")
    if c.layer_norm:
        raise ValueError("--layer-norm is not offered with --algo rainbow (its network has no LayerNorm); drop it")
    if c.init != "torch":
        raise ValueError(f"--init {c.init} is not offered with --algo rainbow (its layers start from PyTorch's and "
                         "the noisy layers' own initialisation); drop it")


def _unused_by_replay(c: Any) -> dict[str, str]:
    """The prioritized replay's options, which a replay learner's run with ``--no-per`` would not read."""
    if c.per:
        return {}
    return dict.fromkeys(("per_alpha", "per_beta_start", "per_beta_end", "per_beta_steps", "per_beta_schedule",
                          "per_eps"), "--no-per samples the replay uniformly, with no priorities or importance-"
                                      "sampling weights")


def _unused_by_rainbow(c: Any) -> dict[str, str]:
    """The options a Rainbow run with these parts switched off (or on) would not read."""
    unused = _unused_by_replay(c)
    if c.noisy:
        why = "the noisy layers explore in place of epsilon-greedy (--noisy); add --no-noisy to act epsilon-greedily"
        unused.update(dict.fromkeys(("epsilon_start", "epsilon_end", "epsilon_decay_steps", "epsilon_schedule"), why))
    else:
        unused["noisy_sigma"] = "--no-noisy leaves no noisy layer to scale"
    if c.atoms == 1:
        unused.update(dict.fromkeys(("v_min", "v_max"), "--atoms 1 learns expected values, with no support to bound"))
    return unused


LEARNERS: dict[str, LearnerSpec] = {}


def register(spec: LearnerSpec) -> LearnerSpec:
    """Add ``spec`` to `LEARNERS` (``--algo spec.name``) and its presets to `vecdqn.presets.PRESETS`;
    returns it.

    Raises:
        ValueError: a learner of that name, or a preset of one of its presets' names, exists already.
    """
    if spec.name in LEARNERS:
        raise ValueError(f"a learner named {spec.name!r} is registered already")
    taken = sorted(set(spec.presets) & set(PRESETS))
    if taken:
        raise ValueError(f"presets {taken} exist already; name the learner's presets otherwise")
    LEARNERS[spec.name] = spec
    for name, (source, base, values) in spec.presets.items():
        PRESETS[name] = {**{k: v for k, v in PRESETS[base].items() if k != "algo"}, **values, "algo": spec.name}
        PRESET_SOURCES[name] = source
    return spec


register(LearnerSpec(
    name="dqn", summary="double DQN, dueling head, prioritized n-step replay", learner="vecdqn.dqn:DQNLearner",
    network="vecdqn.model:QNetwork.from_config",
    options=frozenset({"buffer_size", "per", "per_alpha", "per_beta_start", "per_beta_end", "per_beta_steps",
                       "per_beta_schedule", "per_eps", "n_step", "learning_starts", "train_frequency", "batch_size",
                       "adam_eps", "target_update_frequency", "double", "compile", "prefetch", "overlap_forward",
                       "replay_device", "save_replay", "actors"}),
    check=_check_dqn, learns_from=lambda c: c.learning_starts, keeps_replay=True, layer_norm=False,
    storage=_dqn_storage, unused=_unused_by_replay,
    # online and target networks and Adam's two moments: four float32 copies of the parameters
    checkpoint_bytes=lambda c, parameters: 4 * 4 * parameters,
))
register(LearnerSpec(
    name="pqn", summary="parallel Q-learning on the vector env: rollouts, Q(lambda) returns, no replay or target "
                        "network; Gallici et al. 2025",
    learner="vecdqn.pqn:PQNLearner", network="vecdqn.model:QNetwork.from_config",
    options=frozenset({"rollout_steps", "q_lambda", "epochs", "minibatches", "overlap_update"}),
    check=_check_pqn, learns_from=lambda c: 0, keeps_replay=False, layer_norm=True, storage=_pqn_storage,
    # the network, RAdam's two moments, the acting copy of --overlap-update; the rollout so far
    checkpoint_bytes=lambda c, parameters: 4 * 4 * parameters + rollout_bytes(c),
    first_update=lambda c: (c.rollout_steps * c.num_envs, f"one rollout of --rollout-steps {c.rollout_steps} x "
                                                          f"--num-envs {c.num_envs}"),
))


_DQN = LEARNERS["dqn"].options
register(LearnerSpec(
    name="rainbow", summary="Rainbow: DQN's double, dueling, prioritized n-step parts with C51's return "
                            "distribution and noisy nets; Hessel et al. 2018",
    learner="vecdqn.dqn:DQNLearner", agent="vecdqn.rainbow:RainbowAgent",
    network="vecdqn.rainbow:RainbowNetwork.from_config",
    # DQN's replay and update options, less the Ape-X actors, torch.compile and the overlapped forward
    options=(_DQN - {"actors", "compile", "overlap_forward"}) | {"atoms", "v_min", "v_max", "noisy", "noisy_sigma"},
    check=_check_rainbow, learns_from=lambda c: c.learning_starts, keeps_replay=True, layer_norm=False,
    storage=_dqn_storage,
    # online and target networks and Adam's two moments (the noise buffers are a rounding error)
    checkpoint_bytes=lambda c, parameters: 4 * 4 * parameters,
    # Hessel et al. 2018, Table 1: "Min history to start learning" 80K frames = 20,000 agent steps
    # (its other values are Config's defaults: vecdqn.rainbow.defaults has each with its source)
    defaults={"learning_starts": 20_000},
    unused=_unused_by_rainbow,
    presets={
        # The learning test's Catch run: the catch preset (DQN's) with Rainbow's parts; its support
        # covers Catch's returns of -1 and +1; catch's one learner thread (seed 1 plays greedily at 1.00
        # from 8,000 agent steps on, 6,000 with --no-noisy: tests/test_learning.py).
        "catch-rainbow": ("the catch preset's DQN values with Rainbow's parts: 51 atoms on [-2, 2], noisy layers, one "
                          "learner thread",
                          "catch", dict(atoms=51, v_min=-2.0, v_max=2.0)),
        # Pong on 2 CPU cores: the pong preset's values (4 envs, one batch-32 update per agent step, a
        # 50,000 replay, 3-step targets, gamma 0.98, target sync every 1,000, learning from 10,000,
        # Adam at 1e-4 with epsilon 1e-8) with Rainbow's parts. Not Table 1's Adam (6.25e-5, epsilon
        # 1.5e-4): with it seed 1 played greedily at -21 for its 60 minutes, with pong's it left -21 at
        # 175,000 agent steps (docs/rainbow.md).
        "pong-rainbow": ("PongNoFrameskip-v4 on 2 CPU cores: the pong preset's values (4 envs, a 50,000 replay, one "
                         "batch-32 update per agent step, 3-step targets, Adam 1e-4) with Rainbow's parts",
                         "pong", {}),
    },
))


def learner_spec(name: str) -> LearnerSpec:
    """The record of ``--algo name``.

    Raises:
        ValueError: no learner has that name (the message lists those that do).
    """
    try:
        return LEARNERS[name]
    except KeyError:
        raise ValueError(f"--algo {name!r} is unknown; choose one of {list(LEARNERS)}") from None


def make_learner(config: Any, device: torch.device, obs_shape: tuple[int, ...], n_actions: int) -> Learner:
    """The run's learner (``config.algo``) for observations ``(S, H, W)`` and ``A`` actions."""
    return learner_spec(config.algo).load()(config, device, obs_shape, n_actions)


def learners_using(option: str) -> list[str]:
    """The learners whose record lists ``option`` (a `Config` field) as their own; [] for an option
    every learner uses."""
    return [name for name, spec in LEARNERS.items() if option in spec.options]


def check_learner_options(given: Iterable[str], algo: str, *, resuming: bool = False) -> None:
    """Refuse options given explicitly (``given``: field names) that learner ``algo`` would not
    use: another learner's own (`LearnerSpec.options`). ``resuming``: the options are given with
    ``--resume`` to a run of ``algo``, whose ``--algo`` cannot change, so the only advice is to
    drop them.

    Raises:
        ValueError: one line naming the options, the learners that use them and what to do.
    """
    own = learner_spec(algo).options
    other = [name for name in given if learners_using(name) and name not in own]
    if not other:
        return
    users = sorted({user for name in other for user in learners_using(name)})
    flags, one = ", ".join(_flag(name) for name in other), len(other) == 1
    mine = " or ".join(f"--algo {user}" for user in users)
    it = "it" if one else "them"
    if resuming:
        raise ValueError(f"{flags} only appl{'ies' if one else 'y'} with {mine}, and the run being resumed uses "
                         f"--algo {algo}, which is fixed on resume: drop {flags}")
    raise ValueError(f"{flags} only appl{'ies' if one else 'y'} with {mine}; --algo {algo} would ignore {it}: drop "
                     f"{it} or change --algo")

