"""Named starting points of a run: ``--preset catch``, ``pong``, ``labml`` (DQN), ``catch-pqn``
and ``atari-pqn`` (PQN, any ALE game), with ``pong-pqn`` and ``breakout-pqn`` its named instances;
a learner's record adds its own (`vecdqn.learners.LearnerSpec.presets`, over one of these).

Each preset maps `vecdqn.config.Config` option names to values; explicit command-line options
win over them. Units as in `Config`: agent steps summed over envs unless a name says frames.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "PRESET_SOURCES", "check_preset"]

# Named starting points. Each maps option names to values; explicit command-line options win.
# PQN for any ALE game on 2 CPU cores (--preset atari-pqn --env-id GAME), one set of values for
# every game as PQN's authors use one config for all 57: their many-env shape (purejaxql's
# pqn_atari: 128 envs x rollouts of 32 steps, 2 epochs of 32 minibatches of 128, lambda 0.65,
# gamma 0.99, RAdam 2.5e-4, gradient norm 10, LayerNorm, no dueling head), the 128 games stepped
# by 2 env workers of 64 (--envs-per-worker auto), for the 10M agent steps (40M frames) of the
# published curves. Against CleanRL's 8 envs x 128 steps, 4 epochs of 4 x 256 it halves the
# sample-gradients per agent step and runs ~2x the agent steps/s (docs/pqn.md). Orthogonal
# initial weights (CleanRL's PQN layer_init) end Pong's flat start sooner than PyTorch's
# defaults. 64 px: at 44 px Breakout's ball is under a pixel wide and greedy play stayed below
# 300 (best +95, two seeds), at 64 px both seeds passed 300 within 10M agent steps, and 64 px
# runs ~1.9x the speed of 84 px (docs/presets.md has the measurements).
_ATARI_PQN: dict[str, Any] = dict(
    algo="pqn",
    total_steps=10_000_000,
    num_envs=128,
    screen_size=64,
    hidden_size=512,
    dueling=False,
    init="orthogonal",
    rollout_steps=32,
    epochs=2,
    minibatches=32,
    q_lambda=0.65,
    learning_rate=2.5e-4,
    gamma=0.99,
    max_grad_norm=10.0,
    epsilon_start=1.0,
    epsilon_end=0.01,
    epsilon_decay_steps=1_000_000,
    torch_threads=1,
    # The update of each rollout on a second thread while the envs collect the next (the
    # actions lag one rollout; docs/pqn.md).
    overlap_update=True,
    log_every=10_000,
    checkpoint_every=500_000,
    keep_checkpoints=True,
    # The run does not stop to evaluate: its kept checkpoints are evaluated afterwards
    # (scripts/evaluate.py --every-checkpoint --episodes 10 --keep-best).
    eval_every=0,
    eval_episodes=10,
)

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
        # One learner thread: two make the run 8% faster alone but ~9x slower beside one busy
        # core (they wait for each other at every operation; docs/presets.md has the figures).
        torch_threads=1,
        log_every=1_000,
        checkpoint_every=0,
        eval_every=0,
        per_alpha=0.5,
    ),
    # Pong on two CPU cores, as fast as it learns in wall-clock time (docs/results.md).
    # One batch-32 update per agent step, lr 1e-4, target sync every 1,000, epsilon 1 -> 0.02 over
    # 100,000, learning from 10,000: the Pong settings of Lapan, "Deep Reinforcement Learning
    # Hands-On" (3rd ed., ch. 8), with its tuned discount 0.98 and 3-step targets (its tuned
    # 3-step run needed the fewest games), plus vecdqn's double/dueling/PER and half its replay.
    "pong": dict(
        env_id="PongNoFrameskip-v4",
        total_steps=500_000,
        num_envs=4,
        screen_size=44,  # a quarter of 84x84's convolution work; the torso still covers every pixel
        hidden_size=256,
        # Half of Lapan's 100,000: the last 50,000 transitions (~9 minutes of the run) stay close to
        # the fast-changing policy (the measured comparison is in docs/presets.md).
        buffer_size=50_000,
        learning_starts=10_000,
        train_frequency=1,
        batch_size=32,
        learning_rate=1e-4,
        # PyTorch's default, as in Lapan's runs: with Huber TD errors of ~0.03 and importance
        # weights below 1 the gradients are ~1e-4 and smaller, and Rainbow's 1.5e-4 would then
        # shrink Adam's steps several times over.
        adam_eps=1e-8,
        gamma=0.98,
        n_step=3,
        target_update_frequency=1_000,
        epsilon_start=1.0,
        epsilon_end=0.02,
        epsilon_decay_steps=100_000,
        per_beta_steps=500_000,
        # One learner thread: the env workers need part of the second core (the measured
        # speeds are in docs/performance.md); the update is the same.
        torch_threads=1,
        log_every=5_000,
        checkpoint_every=25_000,
        keep_checkpoints=True,
        # The run does not stop to evaluate (10 games took ~5 of every 60 minutes): its kept
        # checkpoints are evaluated afterwards, with the seeds and the 10 whole games a periodic
        # evaluation would have used (scripts/evaluate.py --every-checkpoint --episodes 10).
        eval_every=0,
        eval_episodes=10,
    ),
    # labml's annotated DQN experiment on Breakout (labml_nn.rl.dqn: dueling network, double-Q
    # Huber loss, prioritized replay, 8 worker processes), converted to agent steps: there one
    # "update" collects 8 workers x 4 steps = 32 transitions and then trains 8 minibatches of
    # 32, i.e. one update of 32 every 4 agent steps; its 1,000,000 updates are 32,000,000 agent
    # steps. vecdqn keeps its own DeepMind-protocol wrappers (docs/presets.md).
    "labml": dict(
        env_id="BreakoutNoFrameskip-v4",
        num_envs=8,
        total_steps=32_000_000,
        buffer_size=2**14,
        per_alpha=0.6,
        per_eps=1e-6,
        learning_starts=2**14,  # learning starts when the replay is full
        train_frequency=4,
        batch_size=32,
        target_update_frequency=8_000,  # every 250 of its updates
        epsilon_schedule="0:1.0,800000:0.1,16000000:0.01",  # (0, 1.0), (25k, 0.1), (500k, 0.01) updates
        per_beta_start=0.4,
        per_beta_end=1.0,
        per_beta_steps=32_000_000,
        learning_rate=1e-4,
        adam_eps=1e-8,  # PyTorch's default
        max_grad_norm=0.5,
        gamma=0.99,
        n_step=1,
        clip_rewards=False,
    ),
    # PQN on pixel Catch: 8 envs x 16 steps per rollout, 4 epochs of 8 minibatches of 16 (one
    # gradient step per 4 agent steps, as the catch preset's DQN); gamma 0.9 for 9-step games.
    # The learning rate falls linearly from 1e-3 to 1e-5 over the run (as CleanRL's PQN anneals
    # it): held at 1e-3, seed 1 with two torch threads learned by 8,000 agent steps and then fell
    # to a greedy -0.24 at 12,000 (measured before commit c9f40b7, which cut it from docs/presets.md
    # for want of the commit it was measured at).
    "catch-pqn": dict(
        env_id="vecdqn/Catch-v0",
        algo="pqn",
        total_steps=12_000,
        num_envs=8,
        screen_size=44,
        hidden_size=128,
        rollout_steps=16,
        epochs=4,
        minibatches=8,
        q_lambda=0.65,
        learning_rate_schedule="0:1e-3,12000:1e-5",
        gamma=0.9,
        epsilon_start=1.0,
        epsilon_end=0.01,
        epsilon_decay_steps=5_000,
        log_every=1_000,
        checkpoint_every=0,
        eval_every=0,
    ),
    "atari-pqn": _ATARI_PQN,
    # Named instances of atari-pqn: its values with the game's env id. Pong alone overrides two:
    # 44 px, where both seeds reached greedy >= +18 by 2.0M-3.25M agent steps (Pong has not been run
    # at 64 px) and which runs 1.68x the agent steps/s of 64 px (benchmark.py --estimate --preset
    # pong-pqn, 60 s each, with and without --estimate-options '--screen-size 64': 2,762 and 1,646
    # on the Xeon VM at commit 183caca); and a checkpoint every 250,000 agent steps, since it
    # learns within the first 4M (docs/presets.md).
    "pong-pqn": dict(_ATARI_PQN, env_id="PongNoFrameskip-v4", screen_size=44, checkpoint_every=250_000),
    "breakout-pqn": dict(_ATARI_PQN, env_id="BreakoutNoFrameskip-v4"),
}


# Where each preset comes from (shown by --help with its values).
PRESET_SOURCES = {
    "catch": "the pixel Catch game of vecdqn's tests (bsuite's Catch, Osband et al. 2020), learnable on a CPU "
             "in minutes",
    "pong": "PongNoFrameskip-v4 learned on 2 CPU cores (Lapan, Deep Reinforcement Learning Hands-On, 3rd ed., "
            "ch. 8: its tuned gamma 0.98 and 3-step targets, with double/dueling/PER and half its 100,000 replay)",
    "labml": "labml's annotated DQN experiment on Breakout (labml_nn.rl.dqn), converted to agent steps",
    "catch-pqn": "PQN (Gallici et al. 2025) on the pixel Catch game: 8 envs, rollouts of 16 steps, 4 epochs of "
                 "8 minibatches",
    "atari-pqn": "PQN (Gallici et al. 2025) for any ALE game (--env-id; default Breakout) in its authors' shape "
                 "(purejaxql pqn_atari: 128 envs x 32 steps, 2 epochs of 32 minibatches, lambda 0.65, RAdam 2.5e-4, "
                 "LayerNorm, orthogonal initial weights as CleanRL's PQN) at 64 px for 10M agent steps",
    "pong-pqn": "atari-pqn on PongNoFrameskip-v4 at 44 px (1.68x the agent steps/s of 64 px) with a checkpoint "
                "every 250,000 agent steps",
    "breakout-pqn": "atari-pqn on BreakoutNoFrameskip-v4",
}


def check_preset(name: str) -> None:
    """Raise ``ValueError`` naming ``name`` and the presets there are, unless it is one of them."""
    if name not in PRESETS:
        raise ValueError(f"--preset {name!r} is unknown; choose one of {sorted(PRESETS)}")
