"""Micro-benchmarks of vecdqn's hot paths, one section per flag.

    python scripts/benchmark.py --replay [--replay-capacity 1048576] [--json out.json]

Sections (each adds its own flags; run several at once by passing several):

* ``--replay``: `vecdqn.replay.PrioritizedReplayBuffer` (impl ``vecdqn``) against the same buffer
  with its priorities kept in a straightforward per-item Python-loop sum tree and min tree
  (impl ``python_loop``, the anchor) and against `StackedReplayBuffer` (impl ``stacked``).
  Ops: ``add`` of N envs' transitions (``batch_size`` = N); ``sample(B)`` followed by
  ``update_priorities(B)`` at B = 32 and 512; ``priorities``, the same minus reading the
  transitions (find, weights, set: the part the tree's vectorization speeds up); and next to
  sample+update, impl ``copy_floor``: the bare copy of the 2·B·S frames a sample returns, from
  places like a sample's in the same frame array, which no priority structure can speed up. All on buffers
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

from vecdqn.replay import PrioritizedReplayBuffer, StackedReplayBuffer, last_wins  # noqa: E402
from vecdqn.trainer import available_memory_bytes  # noqa: E402

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
    columns = ["bench", "op", "impl", "num_envs", "capacity", "batch_size", "value", "unit", "ratio", "anchor", "note"]

    def fmt(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 14:
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
    free = available_memory_bytes()
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

    vector_index = main.priority_index
    loop_index = LoopPriorityIndex(vector_index.leaves().copy())

    def use(index) -> None:
        """Swap the main buffer's priorities to ``index``, carrying the current values over
        (outside the timing)."""
        if main.priority_index is not index:
            index.load(main.priority_index.leaves().copy())
            main.priority_index = index

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

    def floor_runner(batch, calls):
        """The memory-copy floor of a sample: the bytes of obs and next_obs, 2·B·S frames, copied
        from the main buffer's frame array into a fresh array in one gather, and nothing else. The
        places are a sample's: B stratified positions (sorted, one per equal segment of the
        slots), each read as S consecutive frames ending there and S ending one later; fresh ones
        every call, so that caches help no more than they help a real sample."""
        frames, s = main.frames, obs_shape[0]

        def slots() -> np.ndarray:  # (2B, S)
            newest = ((np.arange(batch) + rng.random(batch)) * ((capacity - s) / batch)).astype(np.int64) + s - 1
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

    def priority_runner(index, batch, calls):
        """The priority structure alone: what sample + update_priorities do besides reading the
        transitions (stratified find, weights, then setting B priorities)."""
        td = rng.exponential(size=batch) + 1e-6
        dedupe = last_wins if index is vector_index else (lambda i, v: (i, v))  # loop: in order

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
            "copy_floor": floor_runner(batch, calls=max(4, 4096 // batch)),
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
        floor = value("sample+update", "copy_floor", batch)
        print(f"  B={batch}: vecdqn sample+update {v:.0f} us, {loop / v:.1f}x faster than python_loop "
              f"({tree:.0f}x on the priorities alone); {ratio:.2f}x the stacked buffer's at capacity {small:,}")
        print(f"        copy floor (the 2·B·S frames alone) {floor:.0f} us = {floor / v:.0%} of vecdqn's "
              f"sample+update; no buffer can beat {loop / floor:.1f}x python_loop")
    print(f"  {main.nbytes / capacity:,.0f} bytes per slot (target <= 7,300); RSS after filling "
          f"{rss_after / 2**30:.2f} GiB (target <= 8 GiB); buffer fill {fill_seconds:.0f} s\n")
    return rows


# -- env section ----------------------------------------------------------------------------------------

ENV_ID = "BreakoutNoFrameskip-v4"


def env_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--env section")
    group.add_argument("--env", action="store_true", help="benchmark the env pipelines (Breakout, random actions)")
    group.add_argument("--env-nums", type=int, nargs="+", default=[2, 4, 8], help="numbers of envs (default 2 4 8)")
    group.add_argument("--env-steps", type=int, default=4000,
                       help="agent steps (summed over envs) per timed block (default 4000)")


def _gymnasium_reference_env():
    """The reference pipeline: gymnasium's own preprocessing wrappers."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84,
                                          terminal_on_life_loss=False, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


def make_env_impls(num_envs: int) -> dict[str, object]:
    """The three pipelines with the same preprocessing: 30 no-op starts, skip 4 with the max of the
    last two frames, 84×84 grayscale, 4 stacked, no life-loss termination, raw rewards."""
    import ale_py
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from vecdqn.vector import make_vector_env

    return {
        "gymnasium": gym.vector.AsyncVectorEnv([_gymnasium_reference_env] * num_envs, shared_memory=True,
                                               autoreset_mode=AutoresetMode.SAME_STEP),
        "vecdqn": make_vector_env(ENV_ID, num_envs, episodic_life=False, fire_reset=False),
        "ale_vector": ale_py.AtariVectorEnv(
            "breakout", num_envs, noop_max=30, frameskip=4, stack_num=4, img_height=84, img_width=84,
            grayscale=True, maxpool=True, episodic_life=False, reward_clipping=False, use_fire_reset=False,
            repeat_action_probability=0.0, autoreset_mode=AutoresetMode.SAME_STEP),
    }


def env_steps_per_second(env, num_envs: int, agent_steps: int, rng: np.random.Generator) -> float:
    """Agent steps per second of ``env`` under uniformly random actions (after a warm-up)."""
    n_actions = 4
    vector_steps = max(1, agent_steps // num_envs)
    actions = rng.integers(n_actions, size=(vector_steps + 10, num_envs))
    for a in actions[:10]:
        env.step(a)
    start = time.perf_counter()
    for a in actions[10:]:
        env.step(a)
    return vector_steps * num_envs / (time.perf_counter() - start)


def emulator_ceiling(frames: int = 20_000) -> tuple[float, int]:
    """Raw ALE frames/s of one emulator in this process (random actions, no screen read) and the
    core count: the ceiling of any pipeline is frames/s × cores / 4 agent steps/s."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.0)
    env.reset(seed=0)
    ale, action_set = env.unwrapped.ale, env.unwrapped._action_set
    actions = np.random.default_rng(0).integers(len(action_set), size=frames)
    start = time.perf_counter()
    for a in actions:
        ale.act(action_set[a], 1.0)
        if ale.game_over():
            ale.reset_game()
    rate = frames / (time.perf_counter() - start)
    env.close()
    return rate, os.cpu_count() or 1


def env_section(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    rng = np.random.default_rng(0)
    for num_envs in args.env_nums:
        print(f"timing env pipelines with {num_envs} envs ...", flush=True)
        impls = make_env_impls(num_envs)
        try:
            for impl in impls.values():
                impl.reset(seed=0)
            candidates = {name: (lambda impl=impl, n=num_envs: env_steps_per_second(impl, n, args.env_steps, rng))
                          for name, impl in impls.items()}
            result = interleaved(args.repeats, candidates, anchor="gymnasium")
        finally:
            for impl in impls.values():
                impl.close()
        for name, (value, ratio) in result.items():
            rows.append({"bench": "env", "impl": name, "num_envs": num_envs, "value": value, "unit": "steps/s",
                         "ratio": ratio, "anchor": "gymnasium"})
    frames_per_second, cores = emulator_ceiling()
    rows.append({"bench": "env", "impl": "emulator_ceiling", "num_envs": cores, "value": frames_per_second * cores / 4,
                 "unit": "steps/s", "ratio": None, "anchor": None,
                 "note": f"{frames_per_second:,.0f} raw frames/s x {cores} cores / 4"})
    print("\ntargets:")
    for num_envs in args.env_nums:
        ours = next(r for r in rows if r["impl"] == "vecdqn" and r["num_envs"] == num_envs)
        ale = next(r for r in rows if r["impl"] == "ale_vector" and r["num_envs"] == num_envs)
        print(f"  {num_envs} envs: vecdqn {ours['value']:,.0f} steps/s = {ours['ratio']:.2f}x gymnasium "
              f"(target >= 1.25), {ours['ratio'] / ale['ratio']:.2f}x ale_vector (target >= 0.75)")
    print()
    return rows


# -- learner section --------------------------------------------------------------------------------------


def learner_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--learner section")
    group.add_argument("--learner", action="store_true", help="benchmark DQNAgent.update")
    group.add_argument("--learner-batches", type=int, nargs="+", default=[32, 256], help="batch sizes (default 32 256)")
    group.add_argument("--device", default="auto", help="learner device: auto, cpu, cuda (default auto)")
    group.add_argument("--torch-threads", type=int, default=0,
                       help="torch intra-op threads (0: the trainer's rule for --num-envs; default 0)")
    group.add_argument("--num-envs", type=int, default=8,
                       help="envs of the --train runs and of the thread rule (default 8)")


def _threads(args: argparse.Namespace) -> int:
    from vecdqn.agent import select_device
    from vecdqn.config import default_torch_threads

    return args.torch_threads or default_torch_threads(args.num_envs, device_type=select_device(args.device).type)


def random_batch(batch: int, rng: np.random.Generator):
    from types import SimpleNamespace

    return SimpleNamespace(
        obs=rng.integers(0, 256, (batch, 4, 84, 84), dtype=np.uint8),
        next_obs=rng.integers(0, 256, (batch, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, 4, batch), rewards=rng.normal(size=batch).astype(np.float32),
        discounts=np.full(batch, 0.99**3, np.float32), weights=np.ones(batch, np.float32),
    )


def learner_updates_per_second(batch: int, device: str, threads: int, *, dueling=True, double=True,
                               seconds: float = 3.0) -> float:
    import torch

    from vecdqn.agent import DQNAgent, select_device

    torch.set_num_threads(threads)
    agent = DQNAgent(4, (4, 84, 84), select_device(device), dueling=dueling, double=double, seed=0)
    data = random_batch(batch, np.random.default_rng(0))
    agent.update(data)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count < 3:
        agent.update(data)
        count += 1
    return count / (time.perf_counter() - start)


def learner_section(args: argparse.Namespace) -> list[Row]:
    import torch

    from vecdqn.agent import select_device

    device = str(select_device(args.device))
    threads = _threads(args)
    rows: list[Row] = []
    for batch in args.learner_batches:
        print(f"timing DQNAgent.update at batch {batch} on {device} with {threads} thread(s) ...", flush=True)
        values = [learner_updates_per_second(batch, device, threads) for _ in range(args.repeats)]
        rows.append({"bench": "learner", "impl": "vecdqn", "batch_size": batch, "value": statistics.median(values),
                     "unit": "updates/s", "ratio": None, "anchor": None,
                     "note": f"{device}, {threads} torch thread(s), dueling double DQN"})
    torch.set_num_threads(os.cpu_count() or 1)
    print()
    return rows


# -- train section ----------------------------------------------------------------------------------------


def train_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--train section")
    group.add_argument("--train", action="store_true", help="benchmark end-to-end training")
    group.add_argument("--train-steps", type=int, default=2000,
                       help="agent steps measured after learning starts (default 2000)")
    group.add_argument("--train-learning-starts", type=int, default=2000,
                       help="agent steps collected before the measured part (default 2000)")


class SingleEnvLoop:
    """The peer baseline (impl ``single_env_loop``): the textbook one-env DQN loop in the style of
    CleanRL's ``dqn_atari.py`` — step one env, choose its action with a forward pass, store the
    transition in a uniform replay of stacked observations, and every 4 agent steps take one
    batch-32 Nature-DQN update (no double, no dueling, 1-step). Same wrappers, same network torso.
    Torch uses every core (the library default), as such a script does."""

    def __init__(self, learning_starts: int, capacity: int = 10_000, seed: int = 0):
        import torch

        from vecdqn.model import QNetwork
        from vecdqn.wrappers import make_env

        torch.set_num_threads(os.cpu_count() or 1)
        torch.manual_seed(seed)
        self.env = make_env(ENV_ID)
        self.q = QNetwork(int(self.env.action_space.n), dueling=False)
        self.target = QNetwork(int(self.env.action_space.n), dueling=False)
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=1e-4)
        self.obs = np.zeros((capacity, 4, 84, 84), np.uint8)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.capacity, self.size, self.learning_starts = capacity, 0, learning_starts
        self.rng = np.random.default_rng(seed)
        self.state, _ = self.env.reset(seed=seed)

    def run(self, steps: int, epsilon: float = 0.1) -> None:
        import torch
        import torch.nn.functional as F

        for _ in range(steps):
            if self.rng.random() < epsilon:
                action = int(self.rng.integers(self.env.action_space.n))
            else:
                with torch.no_grad():
                    action = int(self.q(torch.from_numpy(self.state[None])).argmax(1).item())
            next_state, reward, terminated, truncated, _ = self.env.step(action)
            i = self.size % self.capacity
            self.obs[i], self.next_obs[i], self.actions[i] = self.state, next_state, action
            self.rewards[i], self.dones[i] = np.sign(reward), float(terminated)
            self.size += 1
            self.state = self.env.reset()[0] if terminated or truncated else next_state
            if self.size > self.learning_starts and self.size % 4 == 0:
                idx = self.rng.integers(min(self.size, self.capacity), size=32)
                obs, next_obs = torch.from_numpy(self.obs[idx]), torch.from_numpy(self.next_obs[idx])
                with torch.no_grad():
                    target = torch.from_numpy(self.rewards[idx]) + 0.99 * self.target(next_obs).max(1).values * (
                        1 - torch.from_numpy(self.dones[idx]))
                q = self.q(obs).gather(1, torch.from_numpy(self.actions[idx])[:, None]).squeeze(1)
                loss = F.huber_loss(q, target)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            if self.size % 1000 == 0:
                self.target.load_state_dict(self.q.state_dict())


def trainer_learning_sps(args: argparse.Namespace, extra: list[str]) -> float:
    """Agent steps/s of the real trainer, counted from its first update."""
    import tempfile

    from vecdqn.config import parse_args
    from vecdqn.trainer import Trainer

    with tempfile.TemporaryDirectory() as log_dir:
        config = parse_args([
            "--num-envs", str(args.num_envs), "--total-steps", str(args.train_learning_starts + args.train_steps),
            "--learning-starts", str(args.train_learning_starts), "--buffer-size", "20000", "--log-dir", log_dir,
            "--eval-every", "0", "--checkpoint-every", "0", "--log-every", "1000",
            "--torch-threads", str(_threads(args)), *extra,
        ])
        summary = Trainer(config, progress=False, handle_signals=False).run()
    return summary["learning_sps"]


def single_loop_sps(args: argparse.Namespace) -> float:
    loop = SingleEnvLoop(args.train_learning_starts)
    loop.run(args.train_learning_starts)
    start = time.perf_counter()
    loop.run(args.train_steps)
    return args.train_steps / (time.perf_counter() - start)


PLAIN_DQN = ["--no-dueling", "--no-double", "--no-per", "--n-step", "1", "--train-frequency", "4", "--batch-size", "32"]


def train_section(args: argparse.Namespace) -> list[Row]:
    from vecdqn.vector import make_vector_env

    rows: list[Row] = []
    print(f"timing end-to-end training with {args.num_envs} envs ({args.train_steps} agent steps after "
          f"{args.train_learning_starts}) ...", flush=True)
    candidates = {
        "vecdqn": lambda: trainer_learning_sps(args, []),
        "vecdqn_plain": lambda: trainer_learning_sps(args, PLAIN_DQN),
        "single_env_loop": lambda: single_loop_sps(args),
    }
    result = interleaved(args.repeats, candidates, anchor="single_env_loop")
    threads = _threads(args)
    learner = {name: statistics.median(learner_updates_per_second(32, args.device, threads, dueling=d, double=d,
                                                                   seconds=2.0) for _ in range(args.repeats))
               for name, d in (("vecdqn", True), ("vecdqn_plain", False))}
    envs = make_vector_env(ENV_ID, args.num_envs)
    try:
        envs.reset(seed=0)
        rng = np.random.default_rng(1)
        env_only = statistics.median(env_steps_per_second(envs, args.num_envs, args.env_steps, rng)
                                     for _ in range(args.repeats))
    finally:
        envs.close()
    for name, (value, ratio) in result.items():
        row = {"bench": "train", "impl": name, "num_envs": 1 if name == "single_env_loop" else args.num_envs,
               "value": value, "unit": "steps/s", "ratio": ratio, "anchor": "single_env_loop"}
        if name in learner:
            bound = min(env_only, learner[name] * 4)
            row["note"] = (f"env-only {env_only:,.0f} steps/s, learner-only {learner[name]:.1f} updates/s x 4 = "
                           f"{learner[name] * 4:.0f} steps/s; {value / bound:.2f} of min")
            row["bound"] = bound
        rows.append(row)
    rows.append({"bench": "train", "impl": "env_only", "num_envs": args.num_envs, "value": env_only,
                 "unit": "steps/s", "ratio": None, "anchor": None})
    for name, value in learner.items():
        rows.append({"bench": "train", "impl": f"learner_only_{name}", "batch_size": 32, "value": value,
                     "unit": "updates/s", "ratio": None, "anchor": None, "note": f"{threads} torch thread(s)"})
    print("\ntargets:")
    for name in ("vecdqn", "vecdqn_plain"):
        row = next(r for r in rows if r["impl"] == name)
        print(f"  {name}: {row['value']:.0f} steps/s = {row['value'] / row['bound']:.2f} x min(env-only, learner-only "
              f"x train_frequency) (target >= 0.85)")
    plain = next(r for r in rows if r["impl"] == "vecdqn_plain")
    print(f"  plain DQN {plain['value']:.0f} steps/s = {plain['ratio']:.2f}x the single-env loop (target >= 1.3)\n")
    return rows


# -- main ---------------------------------------------------------------------------------------------

# name -> (add its flags, run it); other sections (--env, --learner, --train) register here.
SECTIONS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], list[Row]]]] = {
    "env": (env_arguments, env_section),
    "replay": (replay_arguments, replay_section),
    "learner": (learner_arguments, learner_section),
    "train": (train_arguments, train_section),
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
