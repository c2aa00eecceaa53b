"""The data flow is one-directional: each module imports only what it may."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vecdqn"

# module (a path under vecdqn/, without .py) -> top-level packages / vecdqn modules it must not import
ENV_SIDE = sorted(f"envs/{path.stem}" for path in (PACKAGE / "envs").glob("*.py"))
LEARNING = {"vecdqn.model", "vecdqn.replay", "vecdqn.trainer", "vecdqn.core", "vecdqn.metrics", "vecdqn.config",
            "vecdqn.dqn", "vecdqn.pqn", "vecdqn.staging", "vecdqn.learners"}
FORBIDDEN = {
    # config may import only plain-data modules of the package: the presets, the schedules' points,
    # the env options, the learners' records (standard library only)
    "config": {"torch", "numpy", "gymnasium", "ale_py", "cv2",
               *(f"vecdqn.{p.stem}" for p in PACKAGE.glob("*.py")
                 if p.stem not in ("presets", "schedules", "learners", "__init__")),
               "vecdqn.replay", "vecdqn.benchmarks", "vecdqn.envs.make", "vecdqn.envs.family", "vecdqn.envs.vector",
               "vecdqn.envs.wrappers"},
    "presets": {"torch", "numpy", "gymnasium", "ale_py", "cv2", "vecdqn"},
    # the learners' records: what config reads of them is plain data; a learner's class is imported
    # by name when a run makes one (torch and numpy only for type names)
    "learners": {"gymnasium", "ale_py", "cv2", "vecdqn.config", "vecdqn.core", "vecdqn.trainer", "vecdqn.dqn",
                 "vecdqn.pqn", "vecdqn.envs", "vecdqn.model"},
    "signals": {"torch", "numpy", "gymnasium", "vecdqn"},
    "collector": {"gymnasium", "ale_py", "cv2", "vecdqn.core", "vecdqn.trainer", "vecdqn.dqn", "vecdqn.pqn",
                  "vecdqn.envs", "vecdqn.distributed"},
    "schedules": {"torch", "numpy", "gymnasium", "vecdqn"},
    "envs/options": {"torch", "numpy", "gymnasium", "ale_py", "cv2", *LEARNING, "vecdqn.envs.make"},
    "values": {"torch", "numpy", "gymnasium", "ale_py", "cv2", "vecdqn"},
    **{f"replay/{path.stem}": {"torch", "gymnasium", "ale_py", "cv2", "vecdqn.dqn", "vecdqn.model", "vecdqn.trainer"}
       for path in (PACKAGE / "replay").glob("*.py")},  # every module of the replay package
    # the env side: nothing of the learner, the run or its configuration
    **{module: {"torch", *LEARNING} for module in ENV_SIDE},
    # the one module that names ALE and gymnasium internals: nothing of vecdqn's own
    "envs/ale_direct": {"torch", "cv2", "vecdqn"},
    "acting": {"gymnasium", "ale_py", "cv2", "torch", "vecdqn"},
    "model": {"gymnasium", "ale_py", "cv2", "vecdqn.replay", "vecdqn.envs", "vecdqn.trainer"},
    "dqn/agent": {"gymnasium", "ale_py", "cv2", "vecdqn.replay", "vecdqn.envs", "vecdqn.trainer"},
    "dqn/learner": {"gymnasium", "ale_py", "cv2", "vecdqn.envs", "vecdqn.trainer", "vecdqn.core", "vecdqn.pqn"},
    # PQN: its math needs torch alone; its learner no replay, env or run loop
    "pqn/returns": {"numpy", "gymnasium", "ale_py", "cv2", "vecdqn"},
    "pqn/agent": {"gymnasium", "ale_py", "cv2", "vecdqn.envs", "vecdqn.replay", "vecdqn.dqn.agent", "vecdqn.core",
                  "vecdqn.trainer", "vecdqn.config"},
    "pqn/learner": {"gymnasium", "ale_py", "cv2", "vecdqn.envs", "vecdqn.replay", "vecdqn.dqn.agent", "vecdqn.core",
                    "vecdqn.trainer", "vecdqn.dqn"},
    "metrics": {"gymnasium", "ale_py", "vecdqn.dqn.agent", "vecdqn.replay", "vecdqn.trainer", "wandb"},
    # wandb is optional and imported lazily, by tracking alone; it logs no scalar of its own.
    "tracking": {"torch", "numpy", "gymnasium", "vecdqn.trainer", "vecdqn.dqn.agent", "vecdqn.replay"},
    "evaluation": {"vecdqn.trainer", "vecdqn.replay", "vecdqn.envs.vector", "vecdqn.metrics"},
    "scores": {"torch", "numpy", "gymnasium", "ale_py", "cv2", "vecdqn"},
    # metrics imports video: no gymnasium or ale_py here either.
    "video": {"torch", "gymnasium", "ale_py", "vecdqn.trainer", "vecdqn.replay", "vecdqn.dqn.agent", "vecdqn.metrics"},
    "checkpoint": {"gymnasium", "ale_py", "vecdqn.trainer", "vecdqn.dqn.agent", "vecdqn.replay", "vecdqn.evaluation"},
    "safe_pickle": {"torch", "gymnasium", "ale_py", "cv2", "vecdqn"},
    # the device is picked by vecdqn.staging: no learner needed for it
    "preflight": {"vecdqn.trainer", "vecdqn.cli", "vecdqn.metrics", "vecdqn.evaluation", "vecdqn.envs.vector",
                  "vecdqn.dqn.agent"},
    "resume": {"torch", "gymnasium", "vecdqn.trainer", "vecdqn.core", "vecdqn.dqn.agent", "vecdqn.envs.vector"},
    "trainer": {"vecdqn.cli", "vecdqn.benchmarks", "vecdqn.distributed", "ray"},
    "core": {"vecdqn.trainer", "vecdqn.cli", "vecdqn.benchmarks", "vecdqn.distributed", "ray"},
    "curves": {"torch", "matplotlib", "gymnasium", "vecdqn.trainer", "vecdqn.dqn.agent"},
    "tables": {"torch", "matplotlib", "gymnasium", "vecdqn.trainer", "vecdqn.dqn.agent", "vecdqn.metrics"},
    "cli": {"vecdqn.benchmarks"},
    # Ray is optional: only the modules that need it import it, and the package itself does not.
    "distributed/__init__": {"ray", "torch", "vecdqn.distributed.pool"},  # the learner: lazily, on use
    "distributed/blocks": {"ray", "torch", "gymnasium", "vecdqn.dqn.agent", "vecdqn.trainer"},
    "distributed/actor": {"vecdqn.dqn.agent", "vecdqn.trainer", "vecdqn.distributed.pool"},
    "staging": {"gymnasium", "ale_py", "cv2", "vecdqn"},
    "dqn/device_replay": {"gymnasium", "ale_py", "cv2", "vecdqn.dqn.agent", "vecdqn.trainer", "vecdqn.envs"},
    "dqn/pipeline": {"gymnasium", "ale_py", "cv2", "vecdqn.trainer", "vecdqn.envs", "vecdqn.metrics"},
    # The tuner runs trials as train.py processes: it never trains in its own process, and only
    # the study module imports Optuna (an optional extra).
    **{f"tuning/{path.stem}": {"vecdqn.trainer", "vecdqn.dqn.agent", "vecdqn.replay", "vecdqn.metrics", "torch"}
       | ({"optuna"} if path.stem != "study" else set())
       for path in (PACKAGE / "tuning").glob("*.py")},
}


def test_picking_a_device_does_not_load_the_learner():
    """Preflight, scripts/evaluate.py and the benchmarks' device choice import `vecdqn.staging`,
    not `vecdqn.dqn.agent`."""
    code = ("import importlib.util, sys\n"
            "import vecdqn.preflight, vecdqn.benchmarks.learner\n"
            "spec = importlib.util.spec_from_file_location('evaluate', 'scripts/evaluate.py')\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "vecdqn.benchmarks.learner.torch_threads(type('Args', (), {'torch_threads': 0, 'num_envs': 2, "
            "'device': 'cpu'})())\n"
            "print(sorted(m for m in ('vecdqn.dqn.agent', 'vecdqn.staging') if m in sys.modules))")
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
    "_exit": "os._exit is the documented way to end a process at once, from a signal handler during exit",
    "_add_info": "gymnasium's VectorEnv helper for its subclasses: batches one env's info as AsyncVectorEnv does",
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``{module: the vecdqn modules it imports at the top level}`` for every module of the
    package (imports inside functions, and under ``if TYPE_CHECKING:``, are not load-time edges).
    A package's ``__init__`` counts as imported with any of its modules."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        edges = set()
        for node in tree.body:  # top level only
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                parts = target.split(".")
                for i in range(1, len(parts) + 1):  # a module and the packages it sits in
                    if ".".join(parts[:i]) in modules and ".".join(parts[:i]) != name:
                        edges.add(".".join(parts[:i]))
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "vecdqn.envs.make" in graph["vecdqn.envs"]
    # A package's modules import their package's __init__ (Python runs it first): skip those edges.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_rooms_stay_small(path):
    """No module over 500 lines and no class over 300: a room owns one thing."""
    text = path.read_text()
    assert len(text.splitlines()) <= 500, f"{path.relative_to(ROOT)} has {len(text.splitlines())} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            lines = node.end_lineno - node.lineno + 1
            assert lines <= 300, f"class {node.name} of {path.relative_to(ROOT)} has {lines} lines"


def env_family_tests(path: Path) -> list[str]:
    """Where a module outside `vecdqn.envs` tells env families apart itself rather than reading
    `vecdqn.envs.env_family`: an ``is_ale``-style name, or a comparison of an emulator handle
    (``.ale``), an entry point or a length unit, or ``getattr(..., "ale")``."""
    found = []

    def family_operand(node: ast.AST) -> bool:
        return ((isinstance(node, ast.Attribute) and node.attr in ("ale", "entry_point"))
                or (isinstance(node, ast.Constant) and node.value in ("frames", "env steps")))

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and "is_ale" in node.id.lower():
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and "is_ale" in node.attr:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare) and any(family_operand(n) for n in (node.left, *node.comparators)):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "ale"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", [p for p in SOURCES if "envs" not in p.relative_to(PACKAGE.parent).parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_env_side_tells_env_families_apart(path):
    assert not env_family_tests(path), f"{path.relative_to(ROOT)}: ask vecdqn.envs.env_family instead"


def test_the_family_check_finds_an_ale_test(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f(env, result):\n    is_ale = env.unwrapped.ale is not None\n"
                      "    return result.length_unit == 'frames' or getattr(env, 'ale', None)\n")
    assert len(env_family_tests(module)) == 4
