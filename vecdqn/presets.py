"""Named starting points of a run: ``--preset catch``, ``--preset pong``, ``--preset labml``.

Each preset maps `vecdqn.config.Config` option names to values; explicit command-line options
win over them. Units as in `Config`: agent steps summed over envs unless a name says frames.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "PRESET_SOURCES"]

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
    # Pong on two CPU cores, as fast as it learns in wall-clock time (see README, "Does it learn?").
    # Starting points: the published fast-Pong DQN settings (OpenAI Baselines' deepq Atari example:
    # 256 hidden units, batch 32 every 4 agent steps, lr 1e-4, target sync every 1,000 updates,
    # epsilon to 0.01 early, learning from 10,000 transitions; Lapan 2018, "Deep Reinforcement
    # Learning Hands-On", ch. 6: the same lr and warm-up), with vecdqn's double/dueling/PER/3-step
    # targets and fewer updates per agent step (the learner is what a CPU run waits for).
    "pong": dict(
        env_id="PongNoFrameskip-v4",
        total_steps=600_000,
        num_envs=8,
        screen_size=44,  # a quarter of 84x84's convolution work; the torso still covers every pixel
        hidden_size=256,
        buffer_size=100_000,
        learning_starts=10_000,
        # One update of 32 every 8 agent steps (4 sampled transitions per agent step, half of
        # Nature DQN's replay ratio): on two cores the learner sets the pace, and per update the
        # agent then plays twice the games.
        train_frequency=8,
        batch_size=32,
        learning_rate=2.5e-4,
        # One learner thread: with two, each update waits at OpenMP barriers whenever an env
        # worker holds the other core, and an update then takes several times as long.
        torch_threads=1,
        n_step=3,
        target_update_frequency=4_000,  # every 500 updates
        epsilon_start=1.0,
        epsilon_end=0.01,
        epsilon_decay_steps=60_000,
        per_beta_steps=600_000,
        log_every=5_000,
        checkpoint_every=25_000,
        keep_checkpoints=True,
        eval_every=50_000,  # 10 whole games, the evaluation protocol of scripts/evaluate.py
        eval_episodes=10,
    ),
    # labml's annotated DQN experiment on Breakout (labml_nn.rl.dqn: dueling network, double-Q
    # Huber loss, prioritized replay, 8 worker processes), converted to agent steps: there one
    # "update" collects 8 workers x 4 steps = 32 transitions and then trains 8 minibatches of
    # 32, i.e. one update of 32 every 4 agent steps; its 1,000,000 updates are 32,000,000 agent
    # steps. vecdqn keeps its own DeepMind-protocol wrappers (see README).
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
}


# Where each preset comes from (shown by --help with its values).
PRESET_SOURCES = {
    "catch": "the pixel Catch game of vecdqn's tests (bsuite's Catch, Osband et al. 2020), learnable on a CPU "
             "in minutes",
    "pong": "PongNoFrameskip-v4 learned on 2 CPU cores (fast-Pong settings of OpenAI Baselines' deepq example "
            "and Lapan 2018, ch. 6, with double/dueling/PER/3-step targets)",
    "labml": "labml's annotated DQN experiment on Breakout (labml_nn.rl.dqn), converted to agent steps",
}
