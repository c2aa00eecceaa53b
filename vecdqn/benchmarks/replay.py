"""``--replay``: the replay buffers' add, sample + update and priority operations, and memory.

`vecdqn.replay.PrioritizedReplayBuffer` (impl ``vecdqn``) against
`vecdqn.benchmarks.stacked_replay.StackedReplayBuffer` (impl ``stacked``, the anchor of ``add`` and
``sample+update``), and its priority structure against a straightforward per-item Python-loop sum
tree and min tree (impl ``python_loop``, the anchor of ``priorities``:
`vecdqn.benchmarks.baselines.LoopPriorityIndex`, holding the same priorities).
Ops: ``add`` of N envs' transitions (``batch_size`` = N); ``sample(B)`` followed by
``update_priorities(B)`` at B = 32 and 512; ``priorities``, the structure alone: what those do
besides reading the transitions (find, weights, set: the part the tree's vectorization speeds
up); and next to
sample+update, impl ``copy_floor``: the bare copy of the 2·B·S frames a sample returns, from
places like a sample's in the same frame array, which no priority structure can speed up. All on
buffers filled by the real ``add``. Then bytes per slot from the arrays' ``nbytes`` and the
process RSS after filling. The stacked buffer needs 56 KiB per transition, so it runs at a
smaller capacity (``--replay-stacked-capacity``), and ``vecdqn`` is timed at that capacity too
(impl ``vecdqn`` at that ``capacity``) for a like-for-like comparison.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from vecdqn.benchmarks.baselines import LoopPriorityIndex
from vecdqn.benchmarks.harness import Row, available_memory_bytes, check_counts, interleaved, rss_bytes, time_block
from vecdqn.benchmarks.stacked_replay import StackedReplayBuffer
from vecdqn.cli import whole_number
from vecdqn.replay import PrioritizedReplayBuffer, PriorityIndex, last_wins

__all__ = ["OBS_SHAPE", "QUICK", "FrameStackData", "ReplayBench", "add_arguments", "check_arguments", "run"]

OBS_SHAPE = (4, 84, 84)

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"replay_capacity": 4096, "replay_stacked_capacity": 512, "replay_envs": 2, "replay_batches": [8]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--replay section")
    group.add_argument("--replay", action="store_true", help="benchmark the replay buffers")
    group.add_argument("--replay-capacity", type=whole_number, default=2**20,
                       help="slots of the vecdqn buffer that is timed and whose RSS is reported (default 2^20)")
    group.add_argument("--replay-stacked-capacity", type=whole_number, default=2**15,
                       help="transitions of the stacked buffer, 56 KiB each (default 2^15 = 1.8 GiB); vecdqn "
                            "is also timed at this capacity for a like-for-like ratio")
    group.add_argument("--replay-envs", type=whole_number, default=8, help="N envs per add (default 8)")
    group.add_argument("--replay-batches", type=whole_number, nargs="+", default=[32, 512],
                       help="sample batch sizes (default 32 512)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line, naming the flag) for a capacity, env count or batch size below 1."""
    check_counts(args, "replay_capacity", "replay_stacked_capacity", "replay_envs", "replay_batches")


class FrameStackData:
    """N envs' FrameStack(S) observations cycling through ``period`` random frames per env:
    each step's obs is the previous next_obs, and next_obs is obs shifted by one new frame,
    so the frame-efficient buffer stores one frame per transition, as with real Atari data.
    (No episode ends: they cost one extra slot per episode, about 0.1 % in Atari.)"""

    def __init__(self, n_envs: int, obs_shape: tuple[int, ...], period: int = 64, seed: int = 0):
        rng = np.random.default_rng(seed)
        s = obs_shape[0]
        frames = rng.integers(0, 256, (n_envs, period, *obs_shape[1:]), dtype=np.uint8)
        steps = (np.arange(period)[:, None] + np.arange(s)) % period  # (period, S) frame numbers
        self.stacks = np.ascontiguousarray(frames[:, steps].swapaxes(0, 1))  # (period, N, S, H, W)
        self.period = period
        self.actions = rng.integers(0, 18, n_envs)
        self.rewards = rng.normal(size=n_envs)
        self.flags = np.zeros(n_envs, dtype=bool)
        self.t = 0

    def add_to(self, buffer) -> None:
        t = self.t % self.period
        buffer.add(self.stacks[t], self.actions, self.rewards, self.stacks[(t + 1) % self.period],
                   self.flags, self.flags)
        self.t += 1


def fill(buffer, data: FrameStackData) -> float:
    """Add until ``buffer`` is full, then one more eighth of a lap so that the timed adds
    overwrite (the steady state); seconds taken."""
    n_envs = len(data.actions)
    start = time.perf_counter()
    while len(buffer) < buffer.capacity - 2 * n_envs * OBS_SHAPE[0] and data.t < 2 * buffer.capacity:
        data.add_to(buffer)
    for _ in range(buffer.capacity // n_envs // 8):
        data.add_to(buffer)
    return time.perf_counter() - start


def check_memory(capacity: int, small: int) -> None:
    """Exit with one line when the buffers would not fit in the available memory."""
    need = (PrioritizedReplayBuffer.bytes_needed(capacity, OBS_SHAPE)
            + PrioritizedReplayBuffer.bytes_needed(small, OBS_SHAPE) + small * 2 * int(np.prod(OBS_SHAPE)))
    free = available_memory_bytes()
    if free is not None and need > 0.9 * free:
        raise SystemExit(f"--replay needs {need / 2**30:.1f} GiB but {free / 2**30:.1f} GiB are available; "
                         f"lower --replay-capacity or --replay-stacked-capacity")


class ReplayBench:
    """The filled buffers and the timed candidates over them.

    ``main``: the vecdqn buffer of ``capacity`` slots; ``vector_index`` and ``loop_index``: a
    `PriorityIndex` and a Python-loop one holding its priorities; ``stacked`` and ``side``: the
    stacked buffer and a vecdqn buffer of ``small`` capacity. Each ``*_runner`` returns a candidate
    for `interleaved`: a function that returns µs per call.
    """

    def __init__(self, capacity: int, small: int, n_envs: int):
        self.capacity, self.small, self.rng = capacity, small, np.random.default_rng(0)
        rss_before = rss_bytes()
        self.main = PrioritizedReplayBuffer(capacity, OBS_SHAPE, alpha=0.6, seed=0)
        self.main_data = FrameStackData(n_envs, OBS_SHAPE, seed=1)
        print(f"filling the {capacity:,}-slot vecdqn buffer with real add() calls ...", flush=True)
        seconds = fill(self.main, self.main_data)
        self.rss_after = rss_bytes()
        self.rss_buffer = self.rss_after - rss_before
        print(f"  {len(self.main):,} sampleable transitions in {seconds:.1f} s", flush=True)

        self.stacked = StackedReplayBuffer(small, OBS_SHAPE, alpha=0.6, seed=0)
        self.stacked_data = FrameStackData(n_envs, OBS_SHAPE, seed=2)
        self.side = PrioritizedReplayBuffer(small, OBS_SHAPE, alpha=0.6, seed=0)
        self.side_data = FrameStackData(n_envs, OBS_SHAPE, seed=2)
        print(f"filling the {small:,}-transition stacked buffer and a {small:,}-slot vecdqn buffer ...", flush=True)
        fill(self.stacked, self.stacked_data)
        fill(self.side, self.side_data)

        # Priorities spread like a learner's: |δ| + ε with |δ| exponential.
        for buffer in (self.main, self.side, self.stacked):
            slots = np.flatnonzero(buffer.priorities(np.arange(buffer.capacity)) > 0)
            buffer.update_priorities(slots, self.rng.exponential(size=slots.size))
        priorities = self.main.priorities(np.arange(capacity))  # the tree's p^α
        self.vector_index = PriorityIndex(capacity)
        self.vector_index.load(priorities.copy())
        self.loop_index = LoopPriorityIndex(priorities.copy())

    def add_runner(self, buffer, data: FrameStackData, calls: int = 100) -> Callable[[], float]:
        def run() -> float:
            return time_block(lambda: data.add_to(buffer), calls) * 1e6
        return run

    def sample_runner(self, buffer, batch: int, calls: int = 50) -> Callable[[], float]:
        td = self.rng.exponential(size=batch)

        def step() -> None:
            sample = buffer.sample(batch, 0.4)
            buffer.update_priorities(sample.indices, td)

        def run() -> float:
            return time_block(step, calls) * 1e6
        return run

    def floor_runner(self, batch: int, calls: int) -> Callable[[], float]:
        """The memory-copy floor of a sample: the bytes of obs and next_obs, 2·B·S frames, copied
        from the main buffer's frame array into a fresh array in one gather, and nothing else. The
        places are a sample's: B stratified positions (sorted, one per equal segment of the
        slots), each read as S consecutive frames ending there and S ending one later; fresh ones
        every call, so that caches help no more than they help a real sample."""
        frames, s, rng = self.main.frames, OBS_SHAPE[0], self.rng

        def slots() -> np.ndarray:  # (2B, S)
            newest = ((np.arange(batch) + rng.random(batch)) * ((self.capacity - s) / batch)).astype(np.int64) + s - 1
            stacks = newest[:, None] + np.arange(1 - s, 1)
            return np.concatenate([stacks, stacks + 1])

        picks = [slots() for _ in range(64)]

        def places():
            while True:
                yield from picks

        def run() -> float:
            place = places()
            return time_block(lambda: frames[next(place)], calls) * 1e6
        return run

    def priority_runner(self, index, batch: int, calls: int) -> Callable[[], float]:
        """The priority structure alone: what sample + update_priorities do besides reading the
        transitions (stratified find, weights, then setting B priorities)."""
        rng = self.rng
        td = rng.exponential(size=batch) + 1e-6
        dedupe = last_wins if index is self.vector_index else (lambda i, v: (i, v))  # loop: in order

        def step() -> None:
            total = index.total
            slots = index.find((np.arange(batch) + rng.random(batch)) * (total / batch))
            (index.get(slots) / index.min_positive) ** -0.4
            index.set(*dedupe(slots, td))

        def run() -> float:
            return time_block(step, calls) * 1e6
        return run


def timed_ops(bench: ReplayBench, n_envs: int, batches: list[int]) -> list[tuple[str, int, str, dict]]:
    """``[(op, batch_size, anchor, {impl: candidate})]``; ``vecdqn@small`` is vecdqn at the small
    capacity."""
    b = bench
    ops = [("add", n_envs, "stacked", {
        "vecdqn": b.add_runner(b.main, b.main_data, calls=200),
        "stacked": b.add_runner(b.stacked, b.stacked_data, calls=200),
        "vecdqn@small": b.add_runner(b.side, b.side_data, calls=200),
    })]
    for batch in batches:
        ops.append(("sample+update", batch, "stacked", {
            "vecdqn": b.sample_runner(b.main, batch, calls=max(4, 4096 // batch)),
            "stacked": b.sample_runner(b.stacked, batch, calls=max(4, 4096 // batch)),
            "vecdqn@small": b.sample_runner(b.side, batch, calls=max(4, 4096 // batch)),
            "copy_floor": b.floor_runner(batch, calls=max(4, 4096 // batch)),
        }))
    for batch in batches:
        ops.append(("priorities", batch, "python_loop", {
            "python_loop": b.priority_runner(b.loop_index, batch, calls=max(2, 256 // batch)),
            "vecdqn": b.priority_runner(b.vector_index, batch, calls=max(4, 4096 // batch)),
        }))
    return ops


def memory_rows(bench: ReplayBench) -> list[Row]:
    """Bytes per slot of both buffers (ratio to the stacked one) and the RSS after filling."""
    rows: list[Row] = []
    stacked_bytes = bench.stacked.nbytes / bench.small
    for impl, buffer in (("vecdqn", bench.main), ("stacked", bench.stacked)):
        per = buffer.nbytes / buffer.capacity
        rows.append({"bench": "replay", "op": "memory", "impl": impl, "capacity": buffer.capacity,
                     "batch_size": None, "value": per, "unit": "B/slot", "ratio": per / stacked_bytes,
                     "anchor": "stacked"})
    for op, value in (("rss", bench.rss_after), ("rss_buffer", bench.rss_buffer)):
        rows.append({"bench": "replay", "op": op, "impl": "vecdqn", "capacity": bench.capacity, "batch_size": None,
                     "value": value / 2**30, "unit": "GiB", "ratio": None, "anchor": None})
    return rows


def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: per op, batch size and impl the median µs per call, then memory."""
    capacity, small = args.replay_capacity, args.replay_stacked_capacity
    check_memory(capacity, small)
    bench = ReplayBench(capacity, small, args.replay_envs)
    rows: list[Row] = []
    for op, batch, anchor, candidates in timed_ops(bench, args.replay_envs, args.replay_batches):
        print(f"timing {op} (batch {batch}) ...", flush=True)
        result = interleaved(args.repeats, candidates, anchor=anchor)
        for name, (value, ratio) in result.items():
            impl, cap = ("vecdqn", small) if name == "vecdqn@small" else \
                (name, small if name == "stacked" else capacity)
            rows.append({"bench": "replay", "op": op, "impl": impl, "capacity": cap, "batch_size": batch,
                         "value": value, "unit": "us/call", "ratio": ratio, "anchor": anchor})
    rows += memory_rows(bench)
    print()
    return rows
