"""Unpickling that cannot run code: only an allowlist of NumPy, ALE and vecdqn types loads.

A plain ``pickle.load`` calls whatever callable a file names, so a checkpoint or a saved replay
downloaded from someone else could run any code. The files vecdqn writes (env snapshots, the
replay buffer) need only NumPy arrays and generators, ``collections.deque``, the ALE's
``ALEState``, gymnasium's spaces and vecdqn's own classes; anything else is refused with
`UnsafePickleError` naming it.
"""

from __future__ import annotations

import importlib
import io
import pickle
from typing import IO, Any

__all__ = ["UnsafePickleError", "load", "loads"]

# (module, name) pairs that may be called while unpickling: constructors of plain data.
ALLOWED = frozenset({
    ("numpy", "dtype"), ("numpy", "ndarray"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
    ("numpy.random._pickle", "__generator_ctor"), ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"), ("numpy.random._pcg64", "PCG64"),
    ("numpy.random._mt19937", "MT19937"), ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("numpy.random.bit_generator", "SeedSequence"), ("numpy.random._generator", "Generator"),
    ("collections", "deque"), ("collections", "OrderedDict"), ("ale_py._ale_py", "ALEState"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"),
})
# Modules whose *classes* (never functions) may be rebuilt: instances are plain state.
CLASS_PREFIXES = ("vecdqn.", "gymnasium.spaces.", "gymnasium.envs.registration")
# vecdqn classes that files written by earlier versions name where they used to live: old -> new.
MOVED = {
    ("vecdqn.replay.buffer", "PrioritizedReplayBuffer"): ("vecdqn.replay.prioritized", "PrioritizedReplayBuffer"),
    ("vecdqn.replay.prioritized", "ReplayBase"): ("vecdqn.replay.proportional", "ReplayBase"),
}


class UnsafePickleError(pickle.UnpicklingError):
    """The data names a callable outside the allowlist."""


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        module, name = MOVED.get((module, name), (module, name))
        if module.startswith(CLASS_PREFIXES) or module == "vecdqn":
            try:
                obj = getattr(importlib.import_module(module), name, None)
            except ImportError:
                obj = None
            if isinstance(obj, type):
                return obj
            if obj is None and module.startswith("vecdqn"):
                raise pickle.UnpicklingError(f"the file names {module}.{name}, which this version of vecdqn does not "
                                             "have (a file written by another version?)")
        raise UnsafePickleError(
            f"refusing to load {module}.{name}: only NumPy arrays, ALE states and vecdqn's own classes may appear "
            "in a vecdqn file (this one may be crafted to run code)"
        )


def load(file: IO[bytes]) -> Any:
    """``pickle.load`` restricted to the allowlist.

    Raises:
        UnsafePickleError: naming the first callable outside the allowlist.
        pickle.UnpicklingError, EOFError, ValueError: corrupt or truncated data.
    """
    return _Restricted(file).load()


def loads(data: bytes) -> Any:
    """`load` from bytes."""
    return load(io.BytesIO(data))
