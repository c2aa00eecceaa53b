"""Docstrings name what exists: every `reference` in single backticks in vecdqn's and the
scripts' docstrings resolves to a module, class, function or attribute of the project, the
standard library's builtins or the module's own imports."""

import ast
import builtins
import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path

import ale_py
import gymnasium.wrappers
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# `name` or `dotted.name` in single backticks (double backticks are literal values, not references)
REFERENCE = re.compile(r"(?<![`\w])`([A-Za-z_][\w.]*)`(?!`)")
SOURCES = sorted((ROOT / "vecdqn").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))


def _module(path: Path):
    """The module of ``path`` (a script is loaded under its own name, not run)."""
    if path.parent.name == "scripts":
        spec = importlib.util.spec_from_file_location(f"_refs_script_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    return importlib.import_module(name)


def _has(obj, name: str) -> bool:
    """``obj.name`` exists, a dataclass field without a default included."""
    return hasattr(obj, name) or (dataclasses.is_dataclass(obj) and name in obj.__dataclass_fields__)


def _walk(obj, parts: list[str]) -> bool:
    for i, part in enumerate(parts):
        if not _has(obj, part):
            return False
        if i < len(parts) - 1:
            obj = getattr(obj, part)
    return True


def _resolves(reference: str, scopes: list[dict]) -> bool:
    """``reference`` as a dotted path: absolute (``vecdqn.…``), or from any scope's names, or from
    the attributes of any class in those scopes (a method named by its class's docstring)."""
    parts = reference.split(".")
    if parts[0] == "vecdqn":
        for i in range(len(parts), 0, -1):
            try:
                module = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            return _walk(module, parts[i:]) if parts[i:] else True
        return False
    for scope in scopes:
        if parts[0] in scope and (len(parts) == 1 or _walk(scope[parts[0]], parts[1:])):
            return True
    classes = {id(v): v for scope in scopes for v in scope.values() if isinstance(v, type)}
    return any(_walk(cls, parts) for cls in classes.values())


def _project_scopes() -> list[dict]:
    """The names of every vecdqn module, of builtins and of the libraries the docstrings cite by
    name (NumPy's functions, gymnasium's wrappers, the ALE's vector env)."""
    scopes = [vars(builtins), vars(np), vars(gymnasium.wrappers), vars(ale_py)]
    for path in ROOT.glob("vecdqn/**/*.py"):
        scopes.append(vars(_module(path)))
    return scopes


def _arguments(node: ast.AST) -> dict:
    """The parameters a docstring may name: a function's, or a class's ``__init__``'s."""
    if isinstance(node, ast.ClassDef):
        init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        return _arguments(init[0]) if init else {}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {a.arg: None for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    return {}


def test_every_docstring_reference_resolves():
    pytest.importorskip("ray")  # vecdqn.distributed's modules import it
    scopes = _project_scopes()
    broken = []
    for path in SOURCES:
        module, text = _module(path), path.read_text()
        attributes = {name: None for name in re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=", text)}  # instances'
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = _arguments(node)
                for reference in REFERENCE.findall(ast.get_docstring(node) or ""):
                    if not _resolves(reference, [vars(module), attributes, arguments, *scopes]):
                        broken.append(f"{path.relative_to(ROOT)}: `{reference}`")
    assert not broken, "docstrings name what does not exist:\n" + "\n".join(broken)
