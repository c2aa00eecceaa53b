"""The data flow is one-directional: each module imports only what it may."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vecdqn"

# module (a path under vecdqn/, without .py) -> top-level packages / vecdqn modules it must not import
FORBIDDEN = {
    # config may import only the preset table (plain data) of the package
    "config": {"torch", "numpy", "gymnasium", "ale_py", "cv2", *(f"vecdqn.{p.stem}" for p in PACKAGE.glob("*.py")
                                                                  if p.stem not in ("presets", "__init__")),
               "vecdqn.replay", "vecdqn.benchmarks"},
    "presets": {"torch", "numpy", "gymnasium", "ale_py", "cv2", "vecdqn"},
    "schedules": {"torch", "numpy", "gymnasium", "vecdqn"},
    **{f"replay/{path.stem}": {"torch", "gymnasium", "ale_py", "cv2", "vecdqn.agent", "vecdqn.model", "vecdqn.trainer"}
       for path in (PACKAGE / "replay").glob("*.py")},  # every module of the replay package
    "wrappers": {"torch", "vecdqn.agent", "vecdqn.model", "vecdqn.replay", "vecdqn.trainer", "vecdqn.metrics"},
    "envs": {"torch", "vecdqn.agent", "vecdqn.model", "vecdqn.replay", "vecdqn.trainer", "vecdqn.metrics"},
    # the one module that names ALE and gymnasium internals: nothing of vecdqn's own
    "ale_direct": {"torch", "cv2", "vecdqn"},
    "vector": {"torch", "vecdqn.agent", "vecdqn.model", "vecdqn.replay", "vecdqn.trainer", "vecdqn.metrics"},
    "model": {"gymnasium", "ale_py", "cv2", "vecdqn.replay", "vecdqn.wrappers", "vecdqn.trainer"},
    "agent": {"gymnasium", "ale_py", "cv2", "vecdqn.replay", "vecdqn.wrappers", "vecdqn.vector", "vecdqn.trainer"},
    "metrics": {"gymnasium", "ale_py", "vecdqn.agent", "vecdqn.replay", "vecdqn.trainer", "wandb"},
    # wandb is optional and imported lazily, by tracking alone; it logs no scalar of its own.
    "tracking": {"torch", "numpy", "gymnasium", "vecdqn.trainer", "vecdqn.agent", "vecdqn.replay"},
    "evaluation": {"vecdqn.trainer", "vecdqn.replay", "vecdqn.vector", "vecdqn.metrics"},
    "scores": {"torch", "numpy", "gymnasium", "ale_py", "cv2", "vecdqn"},
    # metrics imports video: no gymnasium or ale_py here either.
    "video": {"torch", "gymnasium", "ale_py", "vecdqn.trainer", "vecdqn.replay", "vecdqn.agent", "vecdqn.metrics"},
    "frame_tap": {"torch", "vecdqn.trainer", "vecdqn.replay", "vecdqn.agent", "vecdqn.model"},
    "checkpoint": {"gymnasium", "ale_py", "vecdqn.trainer", "vecdqn.agent", "vecdqn.replay", "vecdqn.evaluation"},
    "catch": {"torch", "vecdqn.agent", "vecdqn.model", "vecdqn.replay", "vecdqn.trainer"},
    "safe_pickle": {"torch", "gymnasium", "ale_py", "cv2", "vecdqn"},
    "preflight": {"vecdqn.trainer", "vecdqn.cli", "vecdqn.metrics", "vecdqn.evaluation", "vecdqn.vector"},
    "trainer": {"vecdqn.cli", "vecdqn.benchmarks", "vecdqn.distributed", "ray"},
    "curves": {"torch", "matplotlib", "gymnasium", "vecdqn.trainer", "vecdqn.agent"},
    "cli": {"vecdqn.benchmarks"},
    # Ray is optional: only the modules that need it import it, and the package itself does not.
    "distributed/__init__": {"ray", "torch", "vecdqn.distributed.pool"},  # the learner: lazily, on use
    "distributed/blocks": {"ray", "torch", "gymnasium", "vecdqn.agent", "vecdqn.trainer"},
    "distributed/actor": {"vecdqn.agent", "vecdqn.trainer", "vecdqn.distributed.pool"},
    "staging": {"gymnasium", "ale_py", "cv2", "vecdqn"},
    "device_replay": {"gymnasium", "ale_py", "cv2", "vecdqn.agent", "vecdqn.trainer", "vecdqn.vector"},
    "pipeline": {"gymnasium", "ale_py", "cv2", "vecdqn.trainer", "vecdqn.vector", "vecdqn.metrics"},
    # The tuner runs trials as train.py processes: it never trains in its own process, and only
    # the study module imports Optuna (an optional extra).
    **{f"tuning/{path.stem}": {"vecdqn.trainer", "vecdqn.agent", "vecdqn.replay", "vecdqn.metrics", "torch"}
       | ({"optuna"} if path.stem != "study" else set())
       for path in (PACKAGE / "tuning").glob("*.py")},
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_respect_the_layering(module):
    imported = _imports(PACKAGE / f"{module}.py")
    bad = {name for name in imported for f in FORBIDDEN[module] if name == f or name.startswith(f + ".")}
    assert not bad, f"vecdqn/{module}.py imports {sorted(bad)}"
