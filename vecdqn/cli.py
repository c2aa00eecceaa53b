"""The command line of ``scripts/train.py``: parse, train, map each outcome to an exit code."""

from __future__ import annotations

import math
import signal
import sys

from vecdqn import checkpoint
from vecdqn.config import build_parser, check_given_options, explicit_options, parse_args
from vecdqn.preflight import ConfigError
from vecdqn.trainer import Interrupted, NonFiniteError, Trainer, TrainerBase
from vecdqn.vector import WorkerError

__all__ = ["main"]


def trainer_class(actors: int) -> type[TrainerBase]:
    """`Trainer` for ``--actors 0``, else the distributed trainer.

    Raises:
        ImportError: ``actors > 0`` and Ray is not installed (one line: what to install).
    """
    if actors <= 0:
        return Trainer
    from vecdqn.distributed import require_ray

    require_ray()
    from vecdqn.distributed.learner import DistributedTrainer

    return DistributedTrainer


def saved_actors(path: str) -> int:
    """``--actors`` of the run a checkpoint (file or run folder) belongs to (0 when it has none)."""
    return int(checkpoint.load_training(checkpoint.resolve_checkpoint(path))["config"].get("actors") or 0)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``scripts/train.py``).

    Exit codes: 0 done; 2 bad input or ``--actors`` without Ray installed (one line on stderr,
    nothing started); 130/143 stopped by
    SIGINT/SIGTERM after a checkpoint; 1 a worker failure or non-finite loss (message on stderr).
    """
    argv = sys.argv[1:] if argv is None else argv
    config = parse_args(argv)
    try:
        if config.resume:
            given = explicit_options(build_parser(), argv) - {"resume"}
            actors = config.actors if "actors" in given else saved_actors(config.resume)
            try:
                check_given_options(given, actors)
            except ValueError as err:
                raise ConfigError(str(err)) from None
            trainer = trainer_class(actors).from_checkpoint(config.resume, {k: getattr(config, k) for k in given})
        else:
            trainer = trainer_class(config.actors)(config)
    except ImportError as err:  # --actors without the ray extra
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (ConfigError, checkpoint.CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        summary = trainer.run()
    except Interrupted as stop:
        print(f"\nstopped by {signal.Signals(stop.signum).name} at agent step {trainer.step}; checkpoint: "
              f"{stop.checkpoint_path}\nresume with: python scripts/train.py --resume {trainer.run_dir}",
              file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        latest = trainer.run_dir / "checkpoints" / "latest.pt"
        where = f"the last checkpoint is {latest}" if latest.exists() else "no checkpoint was written yet"
        print(f"\nstopped at once at agent step {trainer.step}; {where}", file=sys.stderr)
        return 130
    except (WorkerError, NonFiniteError, checkpoint.CheckpointError) as err:
        kept = trainer.run_dir / "checkpoints" / "latest.pt"
        print(f"error: {err}\nlast checkpoint: {kept if kept.exists() else 'none written yet'}", file=sys.stderr)
        return 1
    learning = summary["learning_sps"]  # NaN when no update ran
    print(
        f"done: {summary['steps']} agent steps, {summary['updates']} updates, {summary['episodes']} games, "
        f"mean return (last 100) {summary['mean_return']:.2f}, {summary['sps']:.0f} agent steps/s"
        + (f" ({learning:.0f} while learning)" if math.isfinite(learning) else "") + "\n"
        f"run folder: {summary['run_dir']}\ncheckpoint: {summary['checkpoint']}"
    )
    return 0
