"""Reference scores of the 57-game Atari benchmark and the human-normalized score (HNS).

``HNS = (score − random) / (human − random)``: 0 is uniform random play, 1 a professional game
tester (Mnih et al. 2015, caption of Fig. 3, there as a percentage). The random and human scores
are those of Badia et al. 2020 (Agent57), per-game tables of the appendix (`SCORE_SOURCE`), the
table recent work (Rainbow, R2D2, Agent57) normalizes with. A score is the raw points of one whole
game started after 1..30 no-ops and capped at 108,000 emulator frames.

Pure Python: no NumPy, no env, no network.
"""

from __future__ import annotations

import re

__all__ = ["HUMAN_RANDOM_SCORES", "SCORE_SOURCE", "game_name", "human_normalized_score"]

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
