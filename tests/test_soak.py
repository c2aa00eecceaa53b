"""Soak: a 200,000-step Catch run whose memory and open files stay flat once the replay is full."""

import os

import pytest

from vecdqn.benchmarks.soak import soak
from vecdqn.config import Config


@pytest.mark.slow
def test_a_long_run_does_not_leak_memory_or_files(tmp_path):
    samples = soak(steps=200_000, every=10_000, buffer_size=10_000, log_dir=str(tmp_path))
    assert len(samples) >= 15
    rss = [s.rss for s in samples]
    assert max(rss) <= 1.05 * min(rss), [round(r / 2**20) for r in rss]
    fds = [s.fds for s in samples]
    # No growth: the last sample has as many open files as the first, and none has more than one
    # extra (a file open for a moment, e.g. while a checkpoint or an event file is written).
    assert fds[-1] == fds[0] and max(fds) <= fds[0] + 1, fds
    assert len({s.processes for s in samples}) == 1


def test_the_soak_sampler_sees_the_workers(tmp_path):
    samples = soak(steps=3_000, every=500, buffer_size=1_000, log_dir=str(tmp_path))
    # The trainer's process and one per env worker: 4 games in W workers on this machine's cores.
    workers = 4 // Config(num_envs=4).envs_per_worker_on(os.cpu_count() or 1)
    assert [s.step for s in samples][:2] == [2_000, 2_500] and all(s.processes == 1 + workers for s in samples)
    assert all(s.fds > 0 and s.rss > 0 for s in samples)
