"""The data flow is one-directional: each module imports only what it may."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vecdqn"

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
    # the device is picked by vecdqn.staging: no learner needed for it
    "preflight": {"vecdqn.trainer", "vecdqn.cli", "vecdqn.metrics", "vecdqn.evaluation", "vecdqn.vector",
                  "vecdqn.agent"},
    "trainer": {"vecdqn.cli", "vecdqn.benchmarks", "vecdqn.distributed", "ray"},
    "core": {"vecdqn.trainer", "vecdqn.cli", "vecdqn.benchmarks", "vecdqn.distributed", "ray"},
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


def test_picking_a_device_does_not_load_the_learner():
    """Preflight, scripts/evaluate.py and the benchmarks' device choice import `vecdqn.staging`,
    not `vecdqn.agent`."""
    code = ("import importlib.util, sys\n"
            "import vecdqn.preflight, vecdqn.benchmarks.learner\n"
            "spec = importlib.util.spec_from_file_location('evaluate', 'scripts/evaluate.py')\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "vecdqn.benchmarks.learner.torch_threads(type('Args', (), {'torch_threads': 0, 'num_envs': 2, "
            "'device': 'cpu'})())\n"
            "print(sorted(m for m in ('vecdqn.agent', 'vecdqn.staging') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "['vecdqn.staging']"


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


# Private names of other libraries used for want of a public spelling, each with its reason.
# (NamedTuple's _replace/_asdict/_fields/_make are its public API, underscored to avoid clashes.)
THIRD_PARTY_PRIVATE = {
    "_replace": "NamedTuple API", "_asdict": "NamedTuple API", "_fields": "NamedTuple API", "_make": "NamedTuple API",
    "_dynamo": "torch._dynamo.mark_static_address has no public spelling yet",
    # ale_py's AtariEnv internals, each named and checked in ale_direct.py (and benchmarks/env.py).
    "_action_set": "ale_py's AtariEnv keeps its action set only there",
    "_frameskip": "ale_py's AtariEnv setting, checked by ale_direct.direct_ale",
    "_obs_type": "ale_py's AtariEnv setting, checked by ale_direct.direct_ale",
    "_actions": "argparse has no public list of a parser's actions",
}
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, variables, arguments, and the
    attributes it assigns (``self._x = ...`` in its own classes)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if _private(name)}


def private_uses(path: Path) -> list[str]:
    """Uses of another module's private names in one file: ``from m import _x``, and ``obj._x``
    (``self._x`` too: a subclass reaching into its parent elsewhere) where ``_x`` is not defined in
    this file."""
    tree = ast.parse(path.read_text())
    own = _own_private_names(tree)
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            uses += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            uses += [f"line {node.lineno}: import {a.name}" for a in node.names
                     if any(_private(part) for part in a.name.split("."))]
        elif (isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own
              and node.attr not in THIRD_PARTY_PRIVATE):
            uses.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(uses, key=lambda use: (int(use.split(":")[0].split()[1]), use))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_uses_another_modules_private_names(path):
    assert not private_uses(path), f"{path.relative_to(ROOT)} uses private names of other modules"


def test_the_private_name_check_finds_a_subclass_reaching_into_its_parent(tmp_path):
    """What the distributed trainer once did: call its parent's private methods through self."""
    child = tmp_path / "child.py"
    child.write_text("from vecdqn.trainer import Trainer, _helper\n\n"
                     "class Child(Trainer):\n    def run(self):\n        self._ok = 1\n"
                     "        return self._update(self._ok) + self.core._clock\n")
    assert private_uses(child) == ["line 1: from vecdqn.trainer import _helper", "line 6: self._update",
                                   "line 6: self.core._clock"]
