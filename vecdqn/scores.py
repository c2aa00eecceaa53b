"""Reference scores of the 57-game Atari benchmark, the human-normalized score (HNS), and
published DQN and PQN scores to compare a run with.

``HNS = (score − random) / (human − random)``: 0 is uniform random play, 1 a professional game
tester (Mnih et al. 2015, caption of Fig. 3, there as a percentage). The random and human scores
are those of Badia et al. 2020 (Agent57), per-game tables of the appendix (`SCORE_SOURCE`), the
table recent work (Rainbow, R2D2, Agent57) normalizes with. A score is the raw points of one whole
game started after 1..30 no-ops and capped at 108,000 emulator frames.

`PUBLISHED_SCORES` holds, for the seven games of the first DQN paper (Mnih et al. 2013: BeamRider,
Breakout, Enduro, Pong, Qbert, Seaquest, SpaceInvaders), the published scores of agents trained
for 10M agent steps (40M emulator frames, as ``--preset atari-pqn`` trains), each a
`PublishedScore` with its source, budget and kind (training return or evaluation of a final
model), and Nature DQN's figure after 50M agent steps, the nearest longer budget; `anchor` picks
a game's 10M-step figure by `ANCHOR_PREFERENCE`, `nature_dqn` its 50M-step one.

Pure Python: no NumPy, no env, no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ANCHOR_PREFERENCE",
    "EVALUATION",
    "HUMAN_RANDOM_SCORES",
    "PUBLISHED_SCORES",
    "SCORE_SOURCE",
    "TRAINING",
    "PublishedScore",
    "anchor",
    "game_name",
    "human_normalized_score",
    "nature_dqn",
]

SCORE_SOURCE = (
    "Badia et al. 2020, 'Agent57: Outperforming the Atari Human Benchmark' (ICML), "
    "per-game score tables of the appendix, columns 'Random' and 'Human'"
)

# game -> (random score, human score): the reference scores of the 57-game Atari benchmark,
# from SCORE_SOURCE (the same values as the Atari-57 table of DeepMind's DQN Zoo,
# dqn_zoo/atari_data.py). The random agent picks uniform actions; the human is a professional
# game tester; both start after 1..30 no-ops and play at most 108,000 frames.
# For 49 of these games Mnih et al. 2015 (Extended Data Table 2) give the same random scores but
# some other human scores (e.g. Breakout 31.8, Pong 9.3): later papers re-measured them, and it is
# this later table that recent work (Rainbow, R2D2, Agent57) normalizes with.
# Keys are the ALE's ROM names (snake_case), which `game_name` derives from env ids.
HUMAN_RANDOM_SCORES: dict[str, tuple[float, float]] = {
    "alien": (227.8, 7127.7),
    "amidar": (5.8, 1719.5),
    "assault": (222.4, 742.0),
    "asterix": (210.0, 8503.3),
    "asteroids": (719.1, 47388.7),
    "atlantis": (12850.0, 29028.1),
    "bank_heist": (14.2, 753.1),
    "battle_zone": (2360.0, 37187.5),
    "beam_rider": (363.9, 16926.5),
    "berzerk": (123.7, 2630.4),
    "bowling": (23.1, 160.7),
    "boxing": (0.1, 12.1),
    "breakout": (1.7, 30.5),
    "centipede": (2090.9, 12017.0),
    "chopper_command": (811.0, 7387.8),
    "crazy_climber": (10780.5, 35829.4),
    "defender": (2874.5, 18688.9),
    "demon_attack": (152.1, 1971.0),
    "double_dunk": (-18.6, -16.4),
    "enduro": (0.0, 860.5),
    "fishing_derby": (-91.7, -38.7),
    "freeway": (0.0, 29.6),
    "frostbite": (65.2, 4334.7),
    "gopher": (257.6, 2412.5),
    "gravitar": (173.0, 3351.4),
    "hero": (1027.0, 30826.4),
    "ice_hockey": (-11.2, 0.9),
    "jamesbond": (29.0, 302.8),
    "kangaroo": (52.0, 3035.0),
    "krull": (1598.0, 2665.5),
    "kung_fu_master": (258.5, 22736.3),
    "montezuma_revenge": (0.0, 4753.3),
    "ms_pacman": (307.3, 6951.6),
    "name_this_game": (2292.3, 8049.0),
    "phoenix": (761.4, 7242.6),
    "pitfall": (-229.4, 6463.7),
    "pong": (-20.7, 14.6),
    "private_eye": (24.9, 69571.3),
    "qbert": (163.9, 13455.0),
    "riverraid": (1338.5, 17118.0),
    "road_runner": (11.5, 7845.0),
    "robotank": (2.2, 11.9),
    "seaquest": (68.4, 42054.7),
    "skiing": (-17098.1, -4336.9),
    "solaris": (1236.3, 12326.7),
    "space_invaders": (148.0, 1668.7),
    "star_gunner": (664.0, 10250.0),
    "surround": (-10.0, 6.5),
    "tennis": (-23.8, -8.3),
    "time_pilot": (3568.0, 5229.2),
    "tutankham": (11.4, 167.6),
    "up_n_down": (533.4, 11693.2),
    "venture": (0.0, 1187.5),
    # Random play scores almost as much as the human here: an HNS is very sensitive on this game.
    "video_pinball": (16256.9, 17667.9),
    "wizard_of_wor": (563.5, 4756.5),
    "yars_revenge": (3092.9, 54576.9),
    "zaxxon": (32.5, 9173.3),
}

# "ALE/Breakout-v5", "BreakoutNoFrameskip-v4", "Breakout-ramDeterministic-v4",
# "ALE/Breakout-ram-v5".
# The name is matched lazily so that a suffix such as "NoFrameskip" is not taken as part of it.
_ENV_ID = re.compile(r"^(?:ALE/)?(?P<name>[A-Za-z]+?)(?:-ram)?(?:NoFrameskip|Deterministic)?-v\d+$")


def game_name(env_id: str) -> str | None:
    """The key of `HUMAN_RANDOM_SCORES` for an env id or a game name, or None if not one of the 57.

    Accepts gymnasium/ALE ids (``"BreakoutNoFrameskip-v4"``, ``"ALE/Breakout-v5"``, ``-ram`` and
    ``Deterministic`` variants) and bare names (``"Breakout"``, ``"MsPacman"``, ``"ms_pacman"``).

    >>> game_name("ALE/MontezumaRevenge-v5"), game_name("UpNDownNoFrameskip-v4")
    ('montezuma_revenge', 'up_n_down')
    >>> game_name("vecdqn/Catch-v0") is None
    True
    """
    match = _ENV_ID.match(env_id)
    name = match.group("name") if match else env_id
    if name.lower() in HUMAN_RANDOM_SCORES:  # already a ROM name, or one word ("Breakout")
        return name.lower()
    # CamelCase -> snake_case: "KungFuMaster" -> "kung_fu_master", "UpNDown" -> "up_n_down".
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return snake if snake in HUMAN_RANDOM_SCORES else None


def human_normalized_score(env_id_or_game: str, score: float) -> float | None:
    """``(score − random) / (human − random)`` with the reference scores of `HUMAN_RANDOM_SCORES`.

    0 is random play, 1 the human tester's score (formula: Mnih et al. 2015, caption of Fig. 3;
    scores: Badia et al. 2020, see `SCORE_SOURCE`). ``score`` is a raw game score (a mean over
    games gives the per-game HNS papers average). Returns None for games without references
    (e.g. ``vecdqn/Catch-v0``).

    >>> human_normalized_score("BreakoutNoFrameskip-v4", 30.5)
    1.0
    """
    game = game_name(env_id_or_game)
    if game is None:
        return None
    random_score, human_score = HUMAN_RANDOM_SCORES[game]
    return (float(score) - random_score) / (human_score - random_score)


# --- published scores of the seven games of Mnih et al. 2013 ------------------------------------------------

# The two kinds of published score. They differ by more than a few percent on games where the
# exploration of training loses lives, so the table that shows them says which is which.
# A training return: the raw whole-game returns of the games played while training, with the
# epsilon of training (0.01 from 10% of the run on), averaged over each seed's last games.
TRAINING = "training"
# An evaluation: separate games played by the trained model after training.
EVALUATION = "evaluation"

# 10M agent steps = 40M emulator frames at frame skip 4: the budget of ``--preset atari-pqn``.
AGENT_STEPS_10M = 10_000_000
# Mnih et al. 2015 train for "50 million frames (that is, around 38 days of game experience)":
# 38 days at 60 Hz are about 197M emulator frames, so their frames are agent steps (frame skip 4).
AGENT_STEPS_50M = 50_000_000

CLEANRL_PQN = "CleanRL PQN"
CLEANRL_DQN = "CleanRL DQN"
ZOO_DQN = "RL Zoo DQN"
NATURE_DQN = "Nature DQN"

_CLEANRL_PQN_SOURCE = ("vwxyzjn/cleanrl, docs/rl-algorithms/pqn.md (commit 1ed80620), section "
                       "pqn_atari_envpool.py, table 'Episode Rewards'")
_CLEANRL_DQN_SOURCE = "vwxyzjn/cleanrl, docs/rl-algorithms/dqn.md, dqn_atari.py table, column '10M steps'"
_ZOO_DQN_SOURCE = "DLR-RM/rl-baselines3-zoo, benchmark.md, rows of algo dqn"
_NATURE_DQN_SOURCE = ("Mnih et al. 2015, 'Human-level control through deep reinforcement learning' (Nature 518), "
                      "Extended Data Table 2, column 'DQN'")

# A game's 10M-step anchor is its figure from the first of these that has one: CleanRL's PQN is
# the algorithm --preset atari-pqn trains and reports training returns as our training column
# does; CleanRL's DQN reports the same kind; the RL Zoo's DQN is the one source with all seven.
ANCHOR_PREFERENCE = (CLEANRL_PQN, CLEANRL_DQN, ZOO_DQN)


@dataclass(frozen=True)
class PublishedScore:
    """One published score of one game.

    Attributes:
        value: the score in raw game points (the mean of whole-game returns; see ``kind``).
        spread: the ``±`` published with it, a standard deviation (over what: ``spread_of``).
        spread_of: what the standard deviation is over, e.g. ``"3 seeds"``.
        name: the agent and its publisher, short, as a table shows it (e.g. ``"CleanRL PQN"``).
        source: where the number is printed: repository and file, or paper and table.
        agent_steps: the training budget in agent steps (1 agent step = 4 emulator frames).
        kind: `TRAINING` (returns of the training games) or `EVALUATION` (games played by a
            trained model afterwards).
    """

    value: float
    spread: float
    spread_of: str
    name: str
    source: str
    agent_steps: int
    kind: str


def _cleanrl_pqn(value: float, spread: float) -> PublishedScore:
    """``pqn_atari_envpool.py`` (envpool ``*-v5`` envs, no sticky actions) at its default 10M agent
    steps: the training return, logged at the end of each whole game (``lives == 0``) with raw
    rewards while epsilon is 0.01; per seed the mean of its last 100 games (openrlbenchmark's
    ``rlops``, window 100), then the mean and the population standard deviation over 3 seeds."""
    return PublishedScore(value, spread, "3 seeds (each the mean of its last 100 training games)", CLEANRL_PQN,
                          _CLEANRL_PQN_SOURCE, AGENT_STEPS_10M, TRAINING)


def _cleanrl_dqn(value: float, spread: float) -> PublishedScore:
    """``dqn_atari.py`` (gym ``*NoFrameskip-v4``) at 10M agent steps: the training return (epsilon
    0.01 from 10% of the run on), mean and standard deviation over 3 seeds. The number of last
    games averaged per seed is not stated for this table (the PQN table's is 100)."""
    return PublishedScore(value, spread, "3 seeds", CLEANRL_DQN, _CLEANRL_DQN_SOURCE, AGENT_STEPS_10M, TRAINING)


def _zoo_dqn(value: float, spread: float, games: int) -> PublishedScore:
    """Stable-Baselines3's DQN from the RL Zoo at 10M agent steps: one training run, its final
    model evaluated for about 600,000 agent steps (``games`` whole games), epsilon-greedy at the
    final exploration rate (the Zoo acts stochastically on Atari; 0.01 in its current
    ``hyperparams/dqn.yml``, though which config trained these models is not recorded); the mean
    and standard deviation over those games."""
    return PublishedScore(value, spread, f"the {games} evaluation games of one run", ZOO_DQN, _ZOO_DQN_SOURCE,
                          AGENT_STEPS_10M, EVALUATION)


def _nature_dqn(value: float, spread: float) -> PublishedScore:
    """Mnih et al. 2015's DQN after 50M agent steps (200M emulator frames): trained agents
    evaluated on 30 games of at most 5 minutes each, after random no-op starts, at epsilon 0.05;
    the ``±`` is the standard deviation the table prints without saying over what, read as over
    those games. The 5-minute cap holds Enduro down."""
    return PublishedScore(value, spread, "the evaluation games (as read: the table does not say)", NATURE_DQN,
                          _NATURE_DQN_SOURCE, AGENT_STEPS_50M, EVALUATION)


# game -> its published scores: those at 10M agent steps in `ANCHOR_PREFERENCE` order, then
# Nature DQN's at 50M. CleanRL benchmarked PQN on 4 of the 7 games and DQN on 3; the RL Zoo has
# all 7. Numbers as printed by each source.
PUBLISHED_SCORES: dict[str, tuple[PublishedScore, ...]] = {
    "beam_rider": (
        _cleanrl_pqn(5753.03, 2394.70),
        _cleanrl_dqn(6673.24, 1434.37),
        _zoo_dqn(4295.946, 1790.458, games=37),
        _nature_dqn(6846.0, 1619.0),
    ),
    "breakout": (
        _cleanrl_pqn(384.85, 12.39),
        _cleanrl_dqn(366.928, 39.89),
        _zoo_dqn(358.327, 61.981, games=55),
        _nature_dqn(401.2, 26.9),
    ),
    "enduro": (
        _zoo_dqn(830.929, 194.544, games=14),
        _nature_dqn(301.8, 24.6),
    ),
    "pong": (
        _cleanrl_pqn(20.49, 0.11),
        _cleanrl_dqn(20.25, 0.41),
        _zoo_dqn(20.602, 0.613, games=88),
        _nature_dqn(18.9, 1.3),
    ),
    "qbert": (
        _zoo_dqn(9496.774, 5399.633, games=124),
        _nature_dqn(10596.0, 3294.0),
    ),
    "seaquest": (
        _zoo_dqn(2000.290, 606.644, games=69),
        _nature_dqn(5286.0, 1310.0),
    ),
    "space_invaders": (
        _cleanrl_pqn(1325.20, 78.49),
        _zoo_dqn(622.742, 201.564, games=155),
        _nature_dqn(1976.0, 893.0),
    ),
}


def _published(env_id_or_game: str) -> tuple[PublishedScore, ...]:
    game = game_name(env_id_or_game)
    return PUBLISHED_SCORES.get(game, ()) if game is not None else ()


def anchor(env_id_or_game: str) -> PublishedScore | None:
    """The game's published score at 10M agent steps from the first of `ANCHOR_PREFERENCE` that
    has one; None for a game outside `PUBLISHED_SCORES`. Takes env ids and game names as
    `game_name` does.

    >>> anchor("BreakoutNoFrameskip-v4").name, anchor("ALE/Qbert-v5").name, anchor("MsPacman")
    ('CleanRL PQN', 'RL Zoo DQN', None)
    """
    scores = {score.name: score for score in _published(env_id_or_game) if score.agent_steps == AGENT_STEPS_10M}
    return next((scores[name] for name in ANCHOR_PREFERENCE if name in scores), None)


def nature_dqn(env_id_or_game: str) -> PublishedScore | None:
    """The game's Nature DQN score after 50M agent steps (Mnih et al. 2015, Extended Data Table 2),
    or None for a game outside `PUBLISHED_SCORES`.

    >>> nature_dqn("Pong").value
    18.9
    """
    return next((score for score in _published(env_id_or_game) if score.name == NATURE_DQN), None)
