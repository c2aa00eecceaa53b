"""The reference-score table, env ids to game names, the human-normalized score, and the
published scores a run is compared with."""

from __future__ import annotations

import doctest

import pytest

import vecdqn.scores
from vecdqn.scores import (
    ANCHOR_PREFERENCE,
    EVALUATION,
    HUMAN_RANDOM_SCORES,
    PUBLISHED_SCORES,
    SCORE_SOURCE,
    TRAINING,
    anchor,
    game_name,
    human_normalized_score,
    nature_dqn,
)

# The 57 games of the Atari benchmark, as ALE ROM names.
ATARI_57 = """alien amidar assault asterix asteroids atlantis bank_heist battle_zone beam_rider
berzerk bowling boxing breakout centipede chopper_command crazy_climber defender demon_attack
double_dunk
enduro fishing_derby freeway frostbite gopher gravitar hero ice_hockey jamesbond kangaroo krull
kung_fu_master montezuma_revenge ms_pacman name_this_game phoenix pitfall pong private_eye qbert
riverraid road_runner robotank seaquest skiing solaris space_invaders star_gunner surround tennis
time_pilot tutankham up_n_down venture video_pinball wizard_of_wor yars_revenge zaxxon""".split()


def test_table_has_exactly_the_57_games():
    assert len(ATARI_57) == 57
    assert sorted(HUMAN_RANDOM_SCORES) == sorted(ATARI_57)
    assert "Badia et al. 2020" in SCORE_SOURCE


@pytest.mark.parametrize("game", sorted(HUMAN_RANDOM_SCORES))
def test_random_score_normalizes_to_0_and_human_score_to_1(game):
    random_score, human_score = HUMAN_RANDOM_SCORES[game]
    assert human_score > random_score
    assert human_normalized_score(game, random_score) == pytest.approx(0.0, abs=1e-12)
    assert human_normalized_score(game, human_score) == pytest.approx(1.0, abs=1e-12)


def test_hns_is_the_closed_form():
    # Pong: random -20.7, human 14.6.
    assert human_normalized_score("ALE/Pong-v5", 0.0) == pytest.approx(20.7 / 35.3)
    assert human_normalized_score("ALE/Pong-v5", -21.0) < 0


@pytest.mark.parametrize(
    ("env_id", "game"),
    [
        ("BreakoutNoFrameskip-v4", "breakout"),
        ("ALE/Breakout-v5", "breakout"),
        ("Breakout-v4", "breakout"),
        ("BreakoutDeterministic-v4", "breakout"),
        ("Breakout-ramNoFrameskip-v4", "breakout"),
        ("ALE/Breakout-ram-v5", "breakout"),
        ("ALE/MontezumaRevenge-v5", "montezuma_revenge"),
        ("MsPacmanNoFrameskip-v4", "ms_pacman"),
        ("UpNDownNoFrameskip-v4", "up_n_down"),
        ("ALE/KungFuMaster-v5", "kung_fu_master"),
        ("JamesbondNoFrameskip-v4", "jamesbond"),
        ("ALE/Qbert-v5", "qbert"),
        ("Pong", "pong"),
        ("video_pinball", "video_pinball"),
        ("vecdqn/Catch-v0", None),
        ("ALE/Tetris-v5", None),  # an ALE game outside the 57
        ("CartPole-v1", None),
    ],
)
def test_game_name_maps_env_ids(env_id, game):
    assert game_name(env_id) == game


def test_every_game_is_an_ale_rom_and_found_from_its_registered_ids():
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    assert set(HUMAN_RANDOM_SCORES) <= set(ale_py.roms.get_all_rom_ids())
    for game in ATARI_57:
        camel = "".join(part.capitalize() for part in game.split("_"))  # "UpNDown", "MsPacman"
        assert f"ALE/{camel}-v5" in gym.registry, camel
        assert game_name(f"ALE/{camel}-v5") == game
        if f"{camel}NoFrameskip-v4" in gym.registry:  # Surround has no v4 id
            assert game_name(f"{camel}NoFrameskip-v4") == game
    assert human_normalized_score("vecdqn/Catch-v0", 1.0) is None


def test_docstring_examples():
    failed, attempted = doctest.testmod(vecdqn.scores)
    assert attempted >= 3 and failed == 0


# The seven games of Mnih et al. 2013 and the publisher of each one's 10M-step anchor: CleanRL's
# PQN where it benchmarked the game, else CleanRL's DQN, else the RL Zoo's DQN.
ANCHORS = {"beam_rider": "CleanRL PQN", "breakout": "CleanRL PQN", "enduro": "RL Zoo DQN", "pong": "CleanRL PQN",
           "qbert": "RL Zoo DQN", "seaquest": "RL Zoo DQN", "space_invaders": "CleanRL PQN"}


def test_published_scores_cover_the_seven_games_at_10m_and_50m_steps():
    assert sorted(PUBLISHED_SCORES) == sorted(ANCHORS)
    for game, scores in PUBLISHED_SCORES.items():
        assert game in HUMAN_RANDOM_SCORES
        names = [score.name for score in scores]
        assert len(set(names)) == len(names) and names[-1] == "Nature DQN", game
        for score in scores:
            assert score.spread > 0 and score.source and score.spread_of
            assert score.kind in (TRAINING, EVALUATION)
            assert score.agent_steps == (50_000_000 if score.name == "Nature DQN" else 10_000_000)
            # CleanRL publishes training returns; the RL Zoo and Nature evaluate trained models.
            assert score.kind == (TRAINING if score.name.startswith("CleanRL") else EVALUATION)
        assert nature_dqn(game) is scores[-1]
    assert nature_dqn("MsPacman") is None and nature_dqn("vecdqn/Catch-v0") is None


@pytest.mark.parametrize("game", sorted(ANCHORS))
def test_anchor_is_the_preferred_10m_score(game):
    camel = "".join(part.capitalize() for part in game.split("_"))
    for name in (game, camel, f"{camel}NoFrameskip-v4", f"ALE/{camel}-v5"):
        chosen = anchor(name)
        assert chosen.name == ANCHORS[game] and chosen.agent_steps == 10_000_000
        assert chosen in PUBLISHED_SCORES[game]


def test_anchor_falls_back_in_order_of_preference(monkeypatch):
    """Without CleanRL's PQN figure Breakout's anchor is CleanRL's DQN, without either the Zoo's;
    a 50M-step figure is never an anchor."""
    assert ANCHOR_PREFERENCE == ("CleanRL PQN", "CleanRL DQN", "RL Zoo DQN")
    breakout = PUBLISHED_SCORES["breakout"]
    for dropped, expected in (({"CleanRL PQN"}, "CleanRL DQN"), ({"CleanRL PQN", "CleanRL DQN"}, "RL Zoo DQN")):
        left = tuple(score for score in breakout if score.name not in dropped)
        monkeypatch.setitem(PUBLISHED_SCORES, "breakout", left)
        assert anchor("breakout").name == expected
    monkeypatch.setitem(PUBLISHED_SCORES, "breakout", (nature_dqn("breakout"),))
    assert anchor("breakout") is None
    assert anchor("MsPacman") is None and anchor("vecdqn/Catch-v0") is None
