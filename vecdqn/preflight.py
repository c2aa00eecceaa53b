"""Checks before any env worker starts: values, the env, the run folder, memory, open files.

Every failure is one `ConfigError` naming the bad option, its value and what to change; the
command line prints it as one line and exits with code 2.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import torch

from vecdqn.checkpoint import held_run
from vecdqn.config import Config
from vecdqn.envs import check_env_options, make_env
from vecdqn.learners import learner_spec
from vecdqn.staging import check_amp, select_device
from vecdqn.tracking import check_wandb_names, require_wandb

__all__ = ["ConfigError", "available_memory_bytes", "check_ray_address", "preflight", "ray_address", "said_ray_address"]

# Resident memory of one env worker process (an ALE game; most of it shared with the parent when
# forked), counted in full so that spawned workers fit too.
WORKER_BYTES = 50 * 2**20
# Resident memory of each further game a batched worker holds (an ALE game and its wrappers' frames;
# ~5 MiB measured for Pong at 44 px, 64 games a worker).
GAME_BYTES = 8 * 2**20
# Bytes of one env's snapshot in a checkpoint (emulator state, wrapper buffers), an upper bound:
# ~110 KB measured for an ALE game at 84 px, up to ~530 KB for Catch.
SNAPSHOT_BYTES = 2**20
# File descriptors the parent holds per env worker (its pipe end, the process sentinel, slack).
FDS_PER_WORKER = 4


class ConfigError(ValueError):
    """A setting that cannot work, found before any env worker starts."""


def available_memory_bytes() -> int | None:
    """Memory available to new allocations (``MemAvailable`` of /proc/meminfo), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def preflight(config: Config, *, resuming: bool = False) -> torch.device:
    """Every check that needs no env worker: values, ``--track``'s package and W&B project name,
    env id, log folder, replay memory; with ``--actors``, the Ray instance to join
    (`check_ray_address`).

    Returns:
        the learner's device, chosen here once (`vecdqn.staging.select_device`).

    Raises:
        ConfigError: one line naming the bad value and what to change.
    """
    if config.track:
        try:
            require_wandb()
            check_wandb_names(config.to_dict())
        except (ImportError, ValueError) as err:
            raise ConfigError(str(err)) from None
    try:
        config.validate()
        check_env_options(config.env_id, config.env_options())
        device = select_device(config.device)
        check_amp(device, config.amp)
        if config.replay_device:
            check_replay_device(replay_frame_bytes(config), select_device(config.replay_device, "--replay-device"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if not resuming:
        check_first_update(config)
    check_log_dir(config, resuming=resuming)
    check_worker_limits(config)
    check_memory(config)  # before any env is made: one at a size that cannot fit would take the machine
    n_actions = check_env_starts(config)
    check_disk(config, n_actions)
    if config.actors:
        check_ray_address(config)
    return device


def check_first_update(config: Config) -> None:
    """A new run lasts until its learner's first update at least
    (`vecdqn.learners.LearnerSpec.first_update`): a shorter one would end having learned nothing."""
    spec = learner_spec(config.algo)
    first, said = spec.first_update(config) if spec.first_update else (spec.learns_from(config), "")
    if config.total_steps < first:
        after = f"{said} = {first} agent steps" if said else f"{first} agent steps"
        raise ConfigError(f"--total-steps {config.total_steps} ends the run before its first update, which comes "
                          f"after {after}; use at least {first}")


def check_env_starts(config: Config) -> int:
    """Make one env in this process and reset it (no-ops and FIRE included); returns its
    number of actions.

    Catches envs whose observations the pipeline cannot use (e.g. CartPole's vector) and options
    that cannot start a game (e.g. a ``--frame-skip`` so long that FIRE's one agent step ends it).
    """
    try:
        env = make_env(config.env_id, config.env_options())
    except ValueError as err:
        raise ConfigError(
            f"--env-id {config.env_id} cannot be used: {err}. vecdqn trains on envs with image observations, "
            "such as ALE games ('BreakoutNoFrameskip-v4') or 'vecdqn/Catch-v0'"
        ) from None
    try:
        env.reset(seed=config.seed)
        return int(env.action_space.n)
    except Exception as err:  # whatever the env raises (gymnasium's own errors included)
        raise ConfigError(
            f"--env-id {config.env_id} cannot start a game with these options ({type(err).__name__}: {err}); "
            f"check --frame-skip {config.frame_skip} (frames per agent step), --noop-max {config.noop_max} and "
            f"--max-episode-frames {config.max_episode_frames}"
        ) from None
    finally:
        env.close()


def in_use(folder: Path) -> bool:
    """Whether another process holds the run folder's lock (``flock``, taken by
    `vecdqn.run_dir.claim` for as long as the run lasts); False for a missing folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # let go of by the close below
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def check_log_dir(config: Config, *, resuming: bool) -> None:
    """The run folder is new and no running process holds it (unless resuming), and ``--log-dir``
    is writable.

    Raises:
        ConfigError: one line naming the folder or ``--log-dir`` and what to do instead.
    """
    if not config.log_dir.strip():  # Path("") is ".": the run would land in whatever folder the shell is in
        raise ConfigError(f"--log-dir {config.log_dir!r} names no folder; give one (default: runs; . for this "
                          "folder)")
    log_dir = Path(config.log_dir)
    if config.run_name and (log_dir / config.run_name).exists() and not (log_dir / config.run_name).is_dir():
        raise ConfigError(f"--run-name {config.run_name}: {log_dir / config.run_name} is a file, not a run folder; "
                          "choose another --run-name")
    folder = log_dir / config.run_name if config.run_name else None
    if folder is not None and not resuming and in_use(folder):  # a live run, before its first checkpoint too
        raise ConfigError(f"--run-name {config.run_name}: {folder} is in use by another process (a run "
                          "training there now); wait for it to end or choose another --run-name")
    held = held_run(folder) if folder is not None and not resuming else ""
    if held:
        then = f"continue it with --resume {folder}" if held == "already holds a run" else f"remove {folder}"
        raise ConfigError(f"--run-name {config.run_name}: {folder} {held}; {then} or choose another --run-name")
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        probe = log_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"--log-dir {config.log_dir} is not writable ({err.strerror}); choose a folder you can write"
        ) from None


def check_replay_device(buffer_bytes: int, device: torch.device) -> None:
    """Refuse a ``--replay-device`` CUDA device without ``buffer_bytes`` of free memory.

    Raises:
        ValueError: one line with the sizes and what to change.
    """
    if device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    if buffer_bytes > free:
        raise ValueError(f"--replay-device {device}: the frames need {buffer_bytes / 2**30:.1f} GiB but "
                         f"{free / 2**30:.1f} GiB are free there; use a smaller --buffer-size or no --replay-device")


def check_worker_limits(config: Config) -> None:
    """Refuse more env workers than the open-file limit can hold (each worker needs a pipe),
    instead of failing halfway through starting them. Counts every env worker of the run
    (`Config.env_workers`): with ``--actors`` the actors' workers, under the same limit on
    this machine (and the Ray processes that connect them hold more).

    Raises:
        ConfigError: one line with the open files needed (``FDS_PER_WORKER`` per worker and 64
            more) and the soft limit: the workers that fit, or, where not even one does, how
            far to raise the limit (``ulimit -n N``).
    """
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # no such limit on this platform
        return
    workers, said = _worker_processes(config)
    needed = workers * FDS_PER_WORKER + 64
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    most = (soft - 64) // FDS_PER_WORKER
    if most < 1:  # not even one worker fits: fewer workers cannot help
        raise ConfigError(
            f"{said} needs about {needed} open files for {workers} env workers but the open-files limit is {soft} "
            f"(ulimit -n), too low for even one env worker; raise it by {needed - soft}: ulimit -n {needed}"
        )
    raise ConfigError(
        f"{said} needs about {needed} open files for {workers} env workers but this process may open {soft} "
        f"(ulimit -n); use at most {most} env workers or raise the limit: ulimit -n {needed}"
    )


def _worker_processes(config: Config) -> tuple[int, str]:
    """``(env worker processes, the options that set them)``: the games of `Config.env_workers`
    over the envs each process steps (``--envs-per-worker``; the actors' workers step one each)."""
    games, said = config.env_workers()
    if config.actors:
        return games, said
    k = config.envs_per_worker_on(os.cpu_count() or 1)
    return games // k, said if k == 1 else f"{said} in {games // k} workers of {k}"


def check_memory(config: Config) -> None:
    """The replay and every env worker of the run (`Config.env_workers`) fit in the memory that
    is free now."""
    stored, what = learner_spec(config.algo).storage(config)
    need = stored + (replay_frame_bytes(config) if config.replay_device == "cpu" else 0)
    games, said = config.env_workers()
    count, _ = _worker_processes(config)
    # Each game's observations: its frame stack in the worker and its slot of the shared block.
    frames = games * 2 * config.frame_stack * config.screen_size**2
    workers = count * WORKER_BYTES + (games - count) * GAME_BYTES + frames
    free = available_memory_bytes()
    if free is not None and need + workers > free:
        # the remedies that alone make room (both where neither does)
        fixes = [fix for other, fix in ((workers, f"shrink {what}"), (need, f"play fewer games than {said}"))
                 if other < free]
        if need + workers - (count - 1) * (WORKER_BYTES - GAME_BYTES) <= free:  # all games in one process
            fixes.append("step more games per worker process (--envs-per-worker)")
        raise ConfigError(
            f"{what} needs {need / 2**30:.1f} GiB and {said} about {workers / 2**30:.1f} GiB for {count} env "
            f"workers, but only {free / 2**30:.1f} GiB are free; "
            + (" or ".join(fixes) or f"shrink {what} and play fewer games than {said}")
        )


def network_bytes(config: Config, n_actions: int) -> int:
    """Bytes of the learner's state in a checkpoint (`vecdqn.learners.LearnerSpec.checkpoint_bytes`:
    its networks and optimizer, PQN's rollout so far)."""
    with torch.device("meta"):
        net = learner_spec(config.algo).build_network(config, n_actions)
    return learner_spec(config.algo).checkpoint_bytes(config, sum(p.numel() for p in net.parameters()))


def checkpoint_bytes(config: Config, n_actions: int) -> int:
    """Bytes of one checkpoint file, estimated: the learner's state
    (`vecdqn.learners.LearnerSpec.checkpoint_bytes`: its networks and optimizer, PQN's rollout so
    far), plus each env's snapshot and observation (none with ``--actors``)."""
    per_env = 2 * config.frame_stack * config.screen_size**2 + SNAPSHOT_BYTES
    snapshotted = 0 if config.actors else config.num_envs  # the actors' games are not kept
    return network_bytes(config, n_actions) + snapshotted * per_env + 2**20


def check_disk(config: Config, n_actions: int) -> None:
    """``--log-dir`` has room for two checkpoints (and, with ``--save-replay``, their replays):
    the new pair is written in full before the old one is removed."""
    one = checkpoint_bytes(config, n_actions) + (replay_bytes(config) if config.save_replay else 0)
    folder = Path(config.log_dir)
    free = shutil.disk_usage(folder).free
    if 2 * one > free:
        what = "a checkpoint and its replay (--save-replay)" if config.save_replay else "a checkpoint"
        networks = network_bytes(config, n_actions)
        if 2 * networks > free:  # the networks alone are too large: that, not the disk, is the mistake
            raise ConfigError(f"--hidden-size {config.hidden_size} makes a checkpoint's networks and optimizer state "
                              f"about {networks / 2**20:,.0f} MiB, and two checkpoints must fit in the "
                              f"{free / 2**20:,.0f} MiB free in --log-dir; use a smaller --hidden-size (Mnih et al. "
                              "2015 use 512)")
        raise ConfigError(
            f"--log-dir {config.log_dir} has {free / 2**20:.0f} MiB free, but {what} takes about {one / 2**20:.0f} "
            f"MiB and two must fit while one replaces the other; free some space, choose another --log-dir"
            + (" or drop --save-replay" if config.save_replay else "")
        )


def replay_bytes(config: Config) -> int:
    """Bytes the run's transition storage allocates (`vecdqn.learners.LearnerSpec.storage`):
    DQN's replay buffer, or PQN's rollout (``T × N`` stacked observations), two with
    ``--overlap-update`` (one learned from while the other fills)."""
    return learner_spec(config.algo).storage(config)[0]


def replay_frame_bytes(config: Config) -> int:
    """Bytes of the replay's frames alone (``--replay-device`` keeps a copy of them)."""
    return config.buffer_size * config.screen_size**2


# Seconds a Ray instance to join has to accept a connection before the run is refused.
RAY_CONNECT_TIMEOUT_S = 3.0


def ray_address(option: str) -> tuple[str, str]:
    """The Ray instance a run with ``--actors`` and ``--ray-address option`` joins, as
    ``ray.init`` picks it: ``(address, where it was given)``. ``RAY_ADDRESS`` (exported on a Ray
    cluster's nodes) replaces an empty or ``auto`` option; ``("", "")``: none, the run starts a
    local instance.

    >>> ray_address("10.0.0.5:6379")
    ('10.0.0.5:6379', '--ray-address')
    """
    exported = os.environ.get("RAY_ADDRESS", "")
    if exported and option in ("", "auto"):
        return exported, "RAY_ADDRESS"
    return option, "--ray-address" if option else ""


def said_ray_address(option: str) -> str:
    """How an error names the Ray instance `ray_address` picks: ``RAY_ADDRESS=<value>`` or
    ``--ray-address <value>``.

    >>> said_ray_address("10.0.0.5:6379")
    '--ray-address 10.0.0.5:6379'
    """
    address, given = ray_address(option)
    return f"RAY_ADDRESS={address}" if given == "RAY_ADDRESS" else f"--ray-address {address}"


def ray_cluster_file() -> Path:
    """Where ``ray start --head`` records the address that ``auto`` joins (Ray's temp folder:
    ``$RAY_TMPDIR``, else on Linux ``$TMPDIR``, else ``/tmp``)."""
    if "RAY_TMPDIR" in os.environ:
        temp = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        temp = os.environ["TMPDIR"]
    elif sys.platform.startswith(("linux", "darwin")):
        temp = "/tmp"
    else:
        temp = tempfile.gettempdir()
    return Path(temp) / "ray" / "ray_current_cluster"


def check_ray_address(config: Config) -> None:
    """The Ray instance to join (`ray_address`) accepts a connection, tried for up to
    `RAY_CONNECT_TIMEOUT_S` seconds, so that a run meant for a cluster that is not there stops
    before anything starts instead of in Ray's connection retries. ``auto`` is the address that
    ``ray start --head`` recorded on this host (`ray_cluster_file`); with no record, Ray itself
    looks for a running instance. Nothing is checked without an address, or when this process
    already runs Ray (that instance is used).

    Raises:
        ConfigError: one line naming the address, where it was given (``--ray-address`` or
            ``RAY_ADDRESS``) and what to do instead.
    """
    address, given = ray_address(config.ray_address)
    ray = sys.modules.get("ray")
    if not address or address == "local" or (ray is not None and ray.is_initialized()):
        return
    said = said_ray_address(config.ray_address)
    fix = ("unset RAY_ADDRESS to let the run start its own local Ray instance, start the cluster "
           "('ray start --head'), or give a running one's address with --ray-address host:port"
           if given == "RAY_ADDRESS" else
           "start the cluster ('ray start --head'), give a running one's address, or leave --ray-address out to "
           "let the run start its own local Ray instance")
    target, where = address, ""
    if address == "auto":
        record = ray_cluster_file()
        try:
            target = record.read_text().strip()
        except OSError:
            return  # no instance recorded on this host: Ray looks for one and says so itself
        where = f" (the instance recorded in {record})"
    host, port = split_address(target)
    if port is None:
        raise ConfigError(f"{said}: {target!r} is not host:port; {fix}")
    try:
        socket.create_connection((host, port), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(f"{said}: no Ray instance answers at {host}:{port}{where} ({reason}); {fix}") from None


def split_address(address: str) -> tuple[str, int | None]:
    """``"host:port"``, ``"[v6]:port"`` or ``"ray://host:port"`` (Ray Client; its default port is
    10001) -> ``(host, port)``; the port is None when there is none to read.

    >>> split_address("ray://head:10001"), split_address("[::1]:6379"), split_address("head")
    (('head', 10001), ('::1', 6379), ('head', None))
    >>> split_address("head:²")
    ('head:²', None)
    """
    scheme, _, rest = address.rpartition("://")
    host, colon, port = rest.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()):  # int() refuses "²"
        return (rest, 10001) if scheme == "ray" and rest and ":" not in rest else (rest, None)
    return host.strip("[]"), int(port)
