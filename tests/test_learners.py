"""The learner registry: every learner-dependent decision asks a record, and a third learner joins
through a package of its own and one record."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vecdqn import checkpoint
from vecdqn.acting import epsilon_greedy
from vecdqn.cli import parse_args
from vecdqn.config import Config
from vecdqn.learners import LEARNERS, POLICY_KEY, Learner, LearnerSpec, ReplayLearner, learner_spec, register
from vecdqn.presets import PRESETS
from vecdqn.trainer import Trainer

PACKAGE = Path(__file__).resolve().parents[1] / "vecdqn"
# Where a learner's name may be compared: the registry and the learners' own packages.
LEARNER_ROOMS = ("learners.py", "dqn/", "pqn/")


def algo_comparisons(path: Path) -> list[str]:
    """Comparisons of an ``algo`` (a name, an attribute or a subscript ``[...]["algo"]``) with a
    string literal, and tables keyed by learner names indexed with one."""
    def is_algo(node: ast.AST) -> bool:
        return ((isinstance(node, ast.Name) and node.id == "algo")
                or (isinstance(node, ast.Attribute) and node.attr == "algo")
                or (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                    and node.slice.value == "algo"))

    def is_text(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(map(is_text, node.elts))
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(is_algo, operands)) and any(map(is_text, operands)):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and is_algo(node.slice):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", [p for p in sorted(PACKAGE.rglob("*.py"))
                                  if not str(p.relative_to(PACKAGE)).startswith(LEARNER_ROOMS)],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_outside_the_registry_tells_learners_apart_by_name(path):
    assert not algo_comparisons(path), f"{path.relative_to(PACKAGE)}: ask vecdqn.learners.learner_spec instead"


def test_the_name_check_finds_each_kind(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('def f(c, saved):\n    a = c.algo == "dqn"\n    b = "pqn" != saved["config"]["algo"]\n'
                      '    return {"dqn": 1, "pqn": 2}[c.algo], algo in ("dqn",)\n')
    assert len(algo_comparisons(module)) == 4


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_each_record_names_a_learner_with_the_protocol_and_real_options(name):
    spec = learner_spec(name)
    cls = spec.load()
    protocol = ReplayLearner if spec.keeps_replay else Learner
    members = {m for m in dir(protocol) if not m.startswith("_")} | set(protocol.__annotations__)
    missing = sorted(m for m in members if not hasattr(cls, m) and m not in ("n_actions", "obs_shape", "n_step"))
    assert not missing, f"{cls.__name__} lacks {missing}"
    assert spec.options <= {f.name for f in fields(Config)}
    config = Config(**{k: v for k, v in PRESETS[f"catch{'' if name == 'dqn' else '-' + name}"].items()})
    assert config.algo == name and spec.learns_from(config) >= 0 and spec.storage(config)[0] > 0


def test_options_of_one_learner_are_refused_for_another_by_its_record():
    with pytest.raises(SystemExit):
        parse_args(["--algo", "pqn", "--n-step", "3"])
    with pytest.raises(ValueError, match="--algo 'sarsa' is unknown; choose one of"):
        Config(algo="sarsa").validate()


# -- a third learner, written here: one-step Q-learning on each vector step (no replay, no target) ----
class LinearQ(torch.nn.Module):
    """Its network, not a `QNetwork`: one linear layer over the scaled frames, ``(B, S, H, W) uint8
    -> (B, A) float32``."""

    def __init__(self, config: Config, n_actions: int, obs_shape: tuple[int, ...] | None = None):
        super().__init__()
        shape = obs_shape or (config.frame_stack, config.screen_size, config.screen_size)
        self.linear = torch.nn.Linear(int(np.prod(shape)), n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(obs.flatten(1).float() / 255.0)


class OneStepLearner:
    """Watkins' Q-learning (1989) on the last vector step: ``r + γ (1 − terminated) max_a Q(s', a)``,
    one Adam step per vector step."""

    def __init__(self, config: Config, device: torch.device, obs_shape: tuple[int, ...], n_actions: int):
        self.config, self.device = config, device
        self.n_actions, self.obs_shape = n_actions, tuple(obs_shape)
        self.online = LinearQ(config, n_actions, obs_shape)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=config.learning_rate)
        self.rng = np.random.default_rng(config.seed)
        self.batch: tuple[torch.Tensor, ...] | None = None

    @property
    def network(self) -> torch.nn.Module:
        return self.online

    def restore(self, saved: dict[str, Any]) -> None:
        self.online.load_state_dict(saved[POLICY_KEY])
        self.optimizer.load_state_dict(saved["optimizer"])

    def start(self) -> None:
        pass

    def new_games(self) -> None:
        self.batch = None

    def epsilon(self, step: int) -> float:
        return max(0.05, 1.0 - step / 2_000)

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        with torch.no_grad():
            q = self.online(torch.from_numpy(obs))
        return epsilon_greedy(self.rng, self.epsilon(step), self.n_actions, len(obs), lambda: q.argmax(1).numpy())

    def store(self, obs, actions, rewards, next_obs, terminated, truncated) -> np.ndarray:
        self.batch = tuple(torch.from_numpy(np.asarray(x)) for x in (obs, actions, rewards, next_obs, terminated))
        return np.arange(len(obs), dtype=np.int64)

    def learn(self, state, agent_steps: int, report) -> None:
        if self.batch is None:
            return
        (obs, actions, rewards, next_obs, terminated), self.batch = self.batch, None  # each transition once
        with torch.no_grad():
            target = rewards.float() + self.config.gamma * (~terminated).float() * self.online(next_obs).max(1).values
        q = self.online(obs).gather(1, actions.long()[:, None])[:, 0]
        loss = torch.nn.functional.smooth_l1_loss(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        state.updates += 1
        report({"td_loss": float(loss), "q_values": float(q.mean())})

    def sync(self) -> None:
        pass

    def scalars(self, step: int) -> dict[str, float]:
        return {"charts/epsilon_onestep": self.epsilon(step)}

    def state_dict(self) -> dict[str, Any]:
        return {POLICY_KEY: self.online.state_dict(), "optimizer": self.optimizer.state_dict()}

    def close(self) -> None:
        pass


@pytest.fixture
def onestep_record():
    """The third learner's record, for this test only."""
    yield register(LearnerSpec(
        name="onestep", summary="one-step Q-learning on each vector step", learner=f"{__name__}:OneStepLearner",
        network=f"{__name__}:LinearQ", options=frozenset(), check=lambda c: None, learns_from=lambda c: 0,
        keeps_replay=False, layer_norm=False, storage=lambda c: (0, "nothing"),
        checkpoint_bytes=lambda c, parameters: 3 * 4 * parameters))
    del LEARNERS["onestep"]


def test_a_third_learner_joins_with_one_record_and_trains_catch(tmp_path, onestep_record):
    config = parse_args(["--algo", "onestep", "--env-id", "vecdqn/Catch-v0", "--num-envs", "2", "--screen-size", "44",
                         "--hidden-size", "32", "--total-steps", "400", "--learning-rate", "1e-3",
                         "--checkpoint-every", "200", "--eval-every", "400", "--eval-episodes", "2",
                         "--log-every", "100", "--log-dir", str(tmp_path), "--run-name", "onestep"])
    assert config.algo == "onestep" and not config.uses_layer_norm
    initial = LinearQ(config, 3)
    summary = Trainer(config, progress=False, handle_signals=False).run()
    # one update per vector step of 2 envs, the last one's at the run's end (learn with 0 agent steps)
    assert summary["steps"] == 400 and summary["updates"] == 200
    policy = checkpoint.load_policy(summary["checkpoint"])
    assert isinstance(policy.network, LinearQ)  # the checkpoint's policy is the record's network
    saved = checkpoint.load_training(summary["checkpoint"])
    assert saved["config"]["algo"] == "onestep" and POLICY_KEY in saved["agent"]
    assert any(not torch.equal(a, b) for a, b in zip(policy.network.state_dict().values(),
                                                      initial.state_dict().values()))
    # and it resumes through the same record
    resumed = Trainer.from_checkpoint(tmp_path / "onestep", {"total_steps": 600}, progress=False,
                                      handle_signals=False)
    assert resumed.run()["updates"] == 300


def test_a_record_name_is_registered_once():
    with pytest.raises(ValueError, match="'dqn' is registered already"):
        register(dataclasses.replace(learner_spec("dqn")))


def test_help_shows_each_learners_options_in_its_own_group():
    """Each option under one group title: a learner's own under a title naming that learner (and the
    other learners that use it, if any), the rest under "options of every run"."""
    import re

    from vecdqn.cli import build_parser, option_flag
    from vecdqn.learners import learners_using

    title, section_of = None, {}
    for line in build_parser().format_help().splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line
        elif match := re.match(r"  (--[a-z0-9-]+)", line):
            section_of[match.group(1)] = title
    for f in fields(Config):
        users = learners_using(f.name)
        heading = section_of[option_flag(f.name)]
        if "actors_only" in f.metadata["rules"]:
            assert heading.startswith("Ape-X options (read only with --actors N"), (f.name, heading)
        elif users:
            assert all(f"--algo {user}" in heading for user in users), (f.name, heading)
            assert not any(f"--algo {other} " in heading + " " for other in set(LEARNERS) - set(users)), heading
        else:
            assert heading == "options of every run (any --algo):", (f.name, heading)
