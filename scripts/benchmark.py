"""Micro-benchmarks of vecdqn's hot paths, one section per flag.

    python scripts/benchmark.py --replay [--replay-capacity 1048576] [--json out.json]

Sections (each adds its own flags; run several at once by passing several):

* ``--replay``: `vecdqn.replay.PrioritizedReplayBuffer` (impl ``vecdqn``) against the same buffer
  with its priorities kept in a straightforward per-item Python-loop sum tree and min tree
  (impl ``python_loop``, the anchor) and against `StackedReplayBuffer` (impl ``stacked``).
  Ops: ``add`` of N envs' transitions (``batch_size`` = N); ``sample(B)`` followed by
  ``update_priorities(B)`` at B = 32 and 512; ``priorities``, the same minus reading the
  transitions (find, weights, set: the part the tree's vectorization speeds up). All on buffers
  filled by the real ``add``. Then bytes per slot from the arrays' ``nbytes`` and the process RSS
  after filling. The stacked buffer needs 56 KiB per transition, so it runs at a smaller capacity
  (``--replay-stacked-capacity``), and ``vecdqn`` is timed at that capacity too for a
  like-for-like comparison.

Method: every measured row is the median over ``--repeats`` rounds; within a round the
implementations run one after another (interleaved), so a slow spell of a shared machine hits
all of them, and each row's ``ratio`` is the median of its per-round ``value / anchor value``
(below 1: faster than the anchor). Timings are wall-clock ``time.perf_counter`` means over a
block of calls, after one untimed warm-up call.

Output: a printed table and, with ``--json PATH``, a list of rows
``{"bench", "impl", "batch_size", "value", "unit", "ratio", ...}`` (extra keys: ``op``,
``capacity``, ``anchor``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vecdqn.replay import PrioritizedReplayBuffer, StackedReplayBuffer, _last_wins  # noqa: E402

Row = dict

# -- shared machinery (for every section) ---------------------------------------------------------


def rss_bytes() -> int:
    """Resident set size of this process (psutil when installed, else /proc)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read the RSS: install psutil")


def available_bytes() -> int | None:
    try:
        import psutil

        return psutil.virtual_memory().available
    except ImportError:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return None


def time_block(call: Callable[[], object], calls: int) -> float:
    """Mean seconds per call over ``calls`` calls, after one warm-up call."""
    call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def interleaved(rounds: int, candidates: dict[str, Callable[[], float]], anchor: str) -> dict[str, tuple[float, float]]:
    """Run each candidate once per round, in turn; ``{name: (median value, median ratio)}``.

    A candidate is a function that prepares itself (outside its timing) and returns its own
    measured value for that round; the ratio of a round is its value over the anchor's value in
    the same round.
    """
    values: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, run in candidates.items():
            values[name].append(run())
    anchor_values = values[anchor]
    return {name: (statistics.median(v), statistics.median(x / a for x, a in zip(v, anchor_values, strict=True)))
            for name, v in values.items()}


def print_table(rows: list[Row]) -> None:
    columns = ["bench", "op", "impl", "capacity", "batch_size", "value", "unit", "ratio", "anchor"]

    def fmt(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        if isinstance(value, int) and value >= 1 << 14:
            return f"2^{value.bit_length() - 1}" if value & (value - 1) == 0 else f"{value:,}"
        return str(value)

    cells = [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


# -- replay section ---------------------------------------------------------------------------------


class LoopPriorityIndex:
    """The anchor: the textbook per-item sum tree and min tree (as in OpenAI baselines'
    segment trees), one Python loop iteration per tree level per item, with the interface the
    buffers use for their priorities (``get``, ``set``, ``find``, ``total``, ``min_positive``,
    ``count``). Updates propagate the change up the path."""

    def __init__(self, priorities: np.ndarray):
        self.capacity = priorities.size
        self.n_leaves = 1 << max(1, (self.capacity - 1).bit_length())
        self.sum = np.zeros(2 * self.n_leaves)
        self.min = np.full(2 * self.n_leaves, np.inf)
        self.load(priorities)

    def load(self, priorities: np.ndarray) -> None:  # set-up only, not timed: vectorized
        p = self.n_leaves
        self.sum[p: p + self.capacity] = priorities
        self.min[p: p + self.capacity] = np.where(priorities > 0, priorities, np.inf)
        level = p
        while level > 1:
            self.sum[level // 2: level] = self.sum[level: 2 * level: 2] + self.sum[level + 1: 2 * level: 2]
            self.min[level // 2: level] = np.minimum(self.min[level: 2 * level: 2], self.min[level + 1: 2 * level: 2])
            level //= 2
        self.count = int(np.count_nonzero(priorities))

    def leaves(self) -> np.ndarray:
        return self.sum[self.n_leaves: self.n_leaves + self.capacity]

    @property
    def total(self) -> float:
        return float(self.sum[1])

    @property
    def min_positive(self) -> float:
        return float(self.min[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return np.array([self.sum[i + self.n_leaves] for i in idx.tolist()])

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        tree, mins, p = self.sum, self.min, self.n_leaves
        for i, value in zip(idx.tolist(), values.tolist(), strict=True):
            node = i + p
            self.count += int(value > 0) - int(tree[node] > 0)
            delta = value - tree[node]
            while node >= 1:
                tree[node] += delta
                node //= 2
            node = i + p
            mins[node] = value if value > 0 else np.inf
            node //= 2
            while node >= 1:
                mins[node] = min(mins[2 * node], mins[2 * node + 1])
                node //= 2

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        tree, p = self.sum, self.n_leaves
        out = np.empty(prefix_sums.size, dtype=np.int64)
        for j, v in enumerate(prefix_sums.tolist()):
            node = 1
            while node < p:
                left = 2 * node
                if v < tree[left] or tree[left + 1] <= 0:
                    node = left
                else:
                    v -= tree[left]
                    node = left + 1
            out[j] = node - p
        return out


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


def replay_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--replay section")
    group.add_argument("--replay", action="store_true", help="benchmark the replay buffers")
    group.add_argument("--replay-capacity", type=int, default=2**20,
                       help="slots of the vecdqn buffer that is timed and whose RSS is reported (default 2^20)")
    group.add_argument("--replay-stacked-capacity", type=int, default=2**15,
                       help="transitions of the stacked buffer, 56 KiB each (default 2^15 = 1.8 GiB); vecdqn "
                            "is also timed at this capacity for a like-for-like ratio")
    group.add_argument("--replay-envs", type=int, default=8, help="N envs per add (default 8)")
    group.add_argument("--replay-batches", type=int, nargs="+", default=[32, 512],
                       help="sample batch sizes (default 32 512)")


def replay_section(args: argparse.Namespace) -> list[Row]:
    obs_shape = (4, 84, 84)
    n_envs, capacity, small = args.replay_envs, args.replay_capacity, args.replay_stacked_capacity
    need = (PrioritizedReplayBuffer.bytes_needed(capacity, obs_shape)
            + PrioritizedReplayBuffer.bytes_needed(small, obs_shape) + small * 2 * int(np.prod(obs_shape)))
    free = available_bytes()
    if free is not None and need > 0.9 * free:
        raise SystemExit(f"--replay needs {need / 2**30:.1f} GiB but {free / 2**30:.1f} GiB are available; "
                         f"lower --replay-capacity or --replay-stacked-capacity")
    rng = np.random.default_rng(0)
    rows: list[Row] = []

    def fill(buffer, data: FrameStackData) -> float:
        start = time.perf_counter()
        while len(buffer) < buffer.capacity - 2 * n_envs * obs_shape[0] and data.t < 2 * buffer.capacity:
            data.add_to(buffer)
        # one more lap of the ring so that the timed adds overwrite (the steady state)
        for _ in range(buffer.capacity // n_envs // 8):
            data.add_to(buffer)
        return time.perf_counter() - start

    rss_before = rss_bytes()
    main = PrioritizedReplayBuffer(capacity, obs_shape, alpha=0.6, seed=0)
    main_data = FrameStackData(n_envs, obs_shape, seed=1)
    print(f"filling the {capacity:,}-slot vecdqn buffer with real add() calls ...", flush=True)
    fill_seconds = fill(main, main_data)
    rss_after = rss_bytes()
    print(f"  {len(main):,} sampleable transitions in {fill_seconds:.1f} s", flush=True)

    stacked = StackedReplayBuffer(small, obs_shape, alpha=0.6, seed=0)
    stacked_data = FrameStackData(n_envs, obs_shape, seed=2)
    side = PrioritizedReplayBuffer(small, obs_shape, alpha=0.6, seed=0)
    side_data = FrameStackData(n_envs, obs_shape, seed=2)
    print(f"filling the {small:,}-transition stacked buffer and a {small:,}-slot vecdqn buffer ...", flush=True)
    fill(stacked, stacked_data)
    fill(side, side_data)

    # Priorities spread like a learner's: |δ| + ε with |δ| exponential.
    for buffer in (main, side, stacked):
        slots = np.flatnonzero(buffer.priorities(np.arange(buffer.capacity)) > 0)
        buffer.update_priorities(slots, rng.exponential(size=slots.size))

    vector_index = main._index
    loop_index = LoopPriorityIndex(vector_index.leaves().copy())

    def use(index) -> None:
        """Swap the main buffer's priorities to ``index``, carrying the current values over
        (outside the timing)."""
        if main._index is not index:
            index.load(main._index.leaves().copy())
            main._index = index

    def add_runner(buffer, data, index=None, calls=100):
        def run() -> float:
            if index is not None:
                use(index)
            return time_block(lambda: data.add_to(buffer), calls) * 1e6
        return run

    def sample_runner(buffer, batch, index=None, calls=50):
        td = rng.exponential(size=batch)

        def step() -> None:
            sample = buffer.sample(batch, 0.4)
            buffer.update_priorities(sample.indices, td)

        def run() -> float:
            if index is not None:
                use(index)
            return time_block(step, calls) * 1e6
        return run

    def priority_runner(index, batch, calls):
        """The priority structure alone: what sample + update_priorities do besides reading the
        transitions (stratified find, weights, then setting B priorities)."""
        td = rng.exponential(size=batch) + 1e-6
        dedupe = _last_wins if index is vector_index else (lambda i, v: (i, v))  # loop: in order

        def step() -> None:
            total = index.total
            slots = index.find((np.arange(batch) + rng.random(batch)) * (total / batch))
            (index.get(slots) / index.min_positive) ** -0.4
            index.set(*dedupe(slots, td))

        def run() -> float:
            use(index)
            return time_block(step, calls) * 1e6
        return run

    ops = [("add", n_envs, {
        "python_loop": add_runner(main, main_data, loop_index, calls=20),
        "vecdqn": add_runner(main, main_data, vector_index, calls=200),
        "stacked": add_runner(stacked, stacked_data, calls=200),
        "vecdqn@small": add_runner(side, side_data, calls=200),
    })]
    for batch in args.replay_batches:
        ops.append(("sample+update", batch, {
            "python_loop": sample_runner(main, batch, loop_index, calls=max(2, 256 // batch)),
            "vecdqn": sample_runner(main, batch, vector_index, calls=max(4, 4096 // batch)),
            "stacked": sample_runner(stacked, batch, calls=max(4, 4096 // batch)),
            "vecdqn@small": sample_runner(side, batch, calls=max(4, 4096 // batch)),
        }))
    for batch in args.replay_batches:
        ops.append(("priorities", batch, {
            "python_loop": priority_runner(loop_index, batch, calls=max(2, 256 // batch)),
            "vecdqn": priority_runner(vector_index, batch, calls=max(4, 4096 // batch)),
        }))
    for op, batch, candidates in ops:
        print(f"timing {op} (batch {batch}) ...", flush=True)
        result = interleaved(args.repeats, candidates, anchor="python_loop")
        for name, (value, ratio) in result.items():
            impl, cap = ("vecdqn", small) if name == "vecdqn@small" else \
                (name, small if name == "stacked" else capacity)
            rows.append({"bench": "replay", "op": op, "impl": impl, "capacity": cap, "batch_size": batch,
                         "value": value, "unit": "us/call", "ratio": ratio, "anchor": "python_loop"})
    use(vector_index)

    stacked_bytes = stacked.nbytes / small
    for impl, buffer in (("vecdqn", main), ("stacked", stacked)):
        per = buffer.nbytes / buffer.capacity
        rows.append({"bench": "replay", "op": "memory", "impl": impl, "capacity": buffer.capacity,
                     "batch_size": None, "value": per, "unit": "B/slot", "ratio": per / stacked_bytes,
                     "anchor": "stacked"})
    rows.append({"bench": "replay", "op": "rss", "impl": "vecdqn", "capacity": capacity, "batch_size": None,
                 "value": rss_after / 2**30, "unit": "GiB", "ratio": None, "anchor": None})
    rows.append({"bench": "replay", "op": "rss_buffer", "impl": "vecdqn", "capacity": capacity,
                 "batch_size": None, "value": (rss_after - rss_before) / 2**30, "unit": "GiB", "ratio": None,
                 "anchor": None})

    def value(op, impl, batch, cap=capacity):
        key = (op, impl, batch, cap)
        return next(r["value"] for r in rows if (r["op"], r["impl"], r["batch_size"], r["capacity"]) == key)

    print("\ntargets:")
    for batch in args.replay_batches:
        v, loop = value("sample+update", "vecdqn", batch), value("sample+update", "python_loop", batch)
        ratio = value("sample+update", "vecdqn", batch, small) / value("sample+update", "stacked", batch, small)
        tree = value("priorities", "python_loop", batch) / value("priorities", "vecdqn", batch)
        print(f"  B={batch}: vecdqn sample+update {v:.0f} us, {loop / v:.1f}x faster than python_loop "
              f"({tree:.0f}x on the priorities alone); {ratio:.2f}x the stacked buffer's at capacity {small:,}")
    print(f"  {main.nbytes / capacity:,.0f} bytes per slot (target <= 7,300); RSS after filling "
          f"{rss_after / 2**30:.2f} GiB (target <= 8 GiB); buffer fill {fill_seconds:.0f} s\n")
    return rows


# -- main ---------------------------------------------------------------------------------------------

# name -> (add its flags, run it); other sections (--env, --learner, --train) register here.
SECTIONS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], list[Row]]]] = {
    "replay": (replay_arguments, replay_section),
}


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved rounds per row; rows are medians (default 5)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the rows as a JSON list")
    for add_arguments, _ in SECTIONS.values():
        add_arguments(parser)
    args = parser.parse_args(argv)
    chosen = [name for name in SECTIONS if getattr(args, name)]
    if not chosen:
        parser.error("choose at least one section: " + ", ".join(f"--{name}" for name in SECTIONS))
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} must be >= 1")
    rows: list[Row] = []
    for name in chosen:
        rows += SECTIONS[name][1](args)
    print_table(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + os.linesep)
    return rows


if __name__ == "__main__":
    main()
