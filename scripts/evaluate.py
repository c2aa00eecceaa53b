#!/usr/bin/env python
"""Evaluate a trained agent on whole games, as papers report scores, and print them (by default
FIRE is pressed for the agent after a lost life when training did so; --no-fire-on-life-loss is
the papers' protocol).

Plays whole games (no life-loss episodes, raw rewards) with no-op starts and a small epsilon, and
prints the raw game scores and the human-normalized score ``(score − random) / (human − random)``
of the 57-game Atari table (see ``vecdqn/evaluation.py`` for the protocol, ``vecdqn/scores.py``
for the reference scores and their source)::

    python scripts/evaluate.py runs/BreakoutNoFrameskip-v4__1__1700000000 --episodes 30 \\
        --video best.mp4 --json scores.json

The checkpoint brings the env id and the preprocessing of its training run. A run folder means
its ``checkpoints/latest.pt`` if present, else ``checkpoints/final.pt``.

``--every-checkpoint`` evaluates each checkpoint a run kept (``--keep-checkpoints``) instead,
with the seed the run's own periodic evaluation would have used at that agent step, prints one
row per checkpoint and writes the results at the checkpoints' steps and save times into the run
folder's subfolder ``checkpoint-evals/``: TensorBoard shows it as a run of its own, and
``scripts/plot.py`` reads it with the run. A timed run can so train without stopping for
evaluations (``--eval-every 0``) and still show its evaluation curve::

    python scripts/evaluate.py runs/pong_s1 --every-checkpoint --episodes 10

When all are done it names the best checkpoint (the highest mean score of every evaluation of the
run so far) and the last, and ``--keep-best`` copies the best to ``checkpoints/best.pt``, which
``evaluate.py``, ``--video`` and a notebook's ``load_policy`` then take as any checkpoint file::

    python scripts/evaluate.py runs/pong_s1 --every-checkpoint --episodes 10 --keep-best
    python scripts/evaluate.py runs/pong_s1/checkpoints/best.pt --episodes 30 --video best.mp4

``--steps FIRST:LAST:EVERY`` takes some of them: those at agent steps from FIRST to LAST
(inclusive) that lie a multiple of EVERY after FIRST, e.g. ``--steps 4000000::200000`` for every
200,000th agent step from 4M on (each part optional: ``4000000:``, ``:1000000``, ``::500000``).
A checkpoint kept at the first vector step past a multiple of ``--checkpoint-every`` counts as that
multiple: 128 envs keep the one for 250,000 at 250,112, and ``::250000`` takes it.

The results are written when every checkpoint is done, merged with earlier ones (this
evaluation's steps replace theirs): an interrupted evaluation writes none and leaves the earlier
ones as they were. The run's own event files are never touched, so it may still be training. One
evaluation of a run at a time: a second one is refused (exit 2) while the first runs.

A bar on stderr counts the games where stderr is a terminal. They are played on one torch thread
unless ``--torch-threads`` says otherwise (one Pong game on two busy cores: 110 s on torch's
default of every core, 13 s on one).

Exit codes: 0 done; 2 bad input or a second evaluation of a run (one line on stderr); 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import sys
import time
from pathlib import Path

# Run from a source checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# vecdqn first: from its import on, a Ctrl-C during the (slow) imports below is one line (vecdqn.signals).
importlib.import_module("vecdqn")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from vecdqn.checkpoint import BEST, CheckpointError, Policy, keep_best, kept_checkpoints, load_policy  # noqa: E402
from vecdqn.cli import (  # noqa: E402
    OneLineErrorParser,
    UsageError,
    check_output_path,
    exit_code,
    finite_number,
    whole_number,
)
from vecdqn.config import Config, option_flag  # noqa: E402
from vecdqn.curves import EVAL_TAG, Scalars, best_point, checkpoint_evals, last_point, read_run  # noqa: E402
from vecdqn.envs import env_family  # noqa: E402
from vecdqn.evaluation import PROTOCOL_TAGS, EvalResult, evaluate, periodic_eval_seed  # noqa: E402
from vecdqn.metrics import EvalLog, EvaluationRunning  # noqa: E402
from vecdqn.scores import HUMAN_RANDOM_SCORES  # noqa: E402
from vecdqn.staging import MAX_TORCH_THREADS, select_device  # noqa: E402

PROG = "evaluate.py"
# The flags of protocol parts only the ALE's games have (no-op starts, FIRE after a lost life).
ALE_ONLY_FLAGS = ("--noop-max", "--fire-on-life-loss", "--no-fire-on-life-loss")
# Torch threads for --torch-threads 0: the one thread the trainer's Ape-X actors act on
# (vecdqn.distributed.actor), and the most that --torch-threads takes.
ACTING_THREADS = 1


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except ``None``: those options say in their help what not giving them means."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROG,
        description="Evaluate a vecdqn checkpoint on whole games; print raw and human-normalized "
        "scores.",
        formatter_class=_DefaultsFormatter,
        # "--epi 3" is an error, not --episodes: a flag added later could make it ambiguous.
        allow_abbrev=False,
    )
    parser.add_argument(
        "checkpoint",
        metavar="RUN_DIR_OR_CHECKPOINT",
        help="a run folder (uses checkpoints/latest.pt, else final.pt) or a .pt file",
    )
    parser.add_argument("--episodes", type=whole_number, default=30, help="whole games to play")
    parser.add_argument(
        "--epsilon", type=finite_number, default=0.001, help="probability of a random action per agent step"
    )
    parser.add_argument(
        "--noop-max",
        type=whole_number,
        default=30,
        help="at most this many no-op frames at the start of each game (0: none; ALE games only)",
    )
    parser.add_argument(
        "--max-episode-frames",
        type=whole_number,
        default=108_000,
        help="cap per game, in emulator frames (108000 = 30 minutes)",
    )
    parser.add_argument(
        "--video",
        metavar="PATH.mp4",
        default=None,
        help="write the best game, every raw frame in colour at the game's frame rate (60 fps for Atari), to this mp4",
    )
    parser.add_argument(
        "--seed",
        type=whole_number,
        default=None,
        help="seed of the env and the random actions (default: the run's seed)",
    )
    parser.add_argument(
        "--fire-on-life-loss",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="press FIRE for the agent after each lost life (default: as in training, i.e. when "
        "the run used both --fire-reset and --episodic-life); --no-fire-on-life-loss: the agent "
        "serves by itself, as in the papers (ALE games only)",
    )
    parser.add_argument(
        "--json", metavar="PATH", default=None, help="also write the numbers to this JSON file"
    )
    parser.add_argument(
        "--every-checkpoint",
        action="store_true",
        help="evaluate every checkpoint a run folder kept (checkpoints/step_<agent step>.pt, "
        "--keep-checkpoints), each with the seed of the run's periodic evaluation at that step "
        "unless --seed is given; one row per checkpoint. Once all are done, the results go into "
        "the run folder's checkpoint-evals/ (a TensorBoard run of its own; scripts/plot.py reads "
        "it with the run), replacing an earlier --every-checkpoint's at the same steps; an "
        "interrupted evaluation writes none there. One evaluation of a run at a time",
    )
    parser.add_argument(
        "--keep-best",
        action="store_true",
        help="with --every-checkpoint: once all are done, copy the kept checkpoint with the highest "
        "mean score of every evaluation so far (this one's and earlier ones') to the run's "
        "checkpoints/best.pt, replacing an earlier copy",
    )
    parser.add_argument(
        "--steps",
        metavar="FIRST:LAST:EVERY",
        default=None,
        help="with --every-checkpoint: only the kept checkpoints at agent steps FIRST to LAST "
        "(inclusive) that lie a multiple of EVERY agent steps after FIRST, each counted at the "
        "multiple of --checkpoint-every it was kept for (250,112 counts as 250,000); each part may "
        "be left out (FIRST 0, LAST the end, EVERY 1), e.g. 4000000::200000 (default: every kept checkpoint)",
    )
    parser.add_argument(
        "--device", default="auto", help="torch device: auto (cuda when available), cpu, cuda"
    )
    parser.add_argument(
        "--torch-threads",
        metavar="N",
        type=whole_number,
        default=0,
        help="torch intra-op threads while playing, at most 1024 (0: one, as the trainer's actors act: a "
        "forward pass of one observation gains nothing from more, and loses much on a busy machine)",
    )
    return parser


def _check_args(args: argparse.Namespace) -> None:
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed {args.seed} must be in [0, 2**32)")
    if args.episodes < 1:
        raise UsageError(f"--episodes {args.episodes} must be at least 1")
    if not (0.0 <= args.epsilon <= 1.0):
        raise UsageError(f"--epsilon {args.epsilon} must be in [0, 1]")
    if args.noop_max < 0:
        raise UsageError(f"--noop-max {args.noop_max} must be >= 0 (0: no no-op starts)")
    if not 0 <= args.torch_threads <= MAX_TORCH_THREADS:
        raise UsageError(f"--torch-threads {args.torch_threads} must be in [0, {MAX_TORCH_THREADS}] (0: one thread)")
    if args.max_episode_frames < 1:
        raise UsageError(
            f"--max-episode-frames {args.max_episode_frames} must be a positive number of frames"
        )
    if args.video is not None:
        video = Path(args.video)
        if video.suffix.lower() != ".mp4":
            raise UsageError(
                f"--video {args.video} must end in .mp4 (the mp4v codec needs an mp4 container)"
            )
        check_output_path("--video", video)
    if args.every_checkpoint:
        if args.video is not None:
            raise UsageError("--video takes one checkpoint; it cannot be combined with --every-checkpoint")
        if not Path(args.checkpoint).is_dir():
            raise UsageError(f"--every-checkpoint takes a run folder, and {args.checkpoint} is not one")
    if args.keep_best and not args.every_checkpoint:
        raise UsageError("--keep-best keeps the best of the checkpoints --every-checkpoint evaluates; add "
                         "--every-checkpoint")
    if args.steps is not None:
        if not args.every_checkpoint:
            raise UsageError("--steps selects among the checkpoints of --every-checkpoint; add --every-checkpoint")
        args.steps = parse_steps(args.steps)
    if args.json is not None:
        report = Path(args.json)
        check_output_path("--json", report)
        if report.exists() and not _is_json(report):
            raise UsageError(f"--json {report} exists and is not a JSON file; refusing to overwrite it (a "
                             "checkpoint?), choose another path")


def parse_steps(text: str) -> tuple[int, int | None, int]:
    """``--steps FIRST:LAST:EVERY`` (agent steps, parts optional) -> ``(first, last or None, every)``.

    Each part is a whole number as every count of every script takes it (`whole_number`: digits
    0-9, an optional sign, ``_`` between digits, e.g. ``1_000::2_000``).

    Raises:
        UsageError: more than three colon-separated parts, a part `whole_number` refuses (naming
            it and why: not a whole number, or one above 10**12), FIRST below 0 or after LAST, or
            EVERY < 1.
    """
    parts = text.split(":")
    if len(parts) > 3:
        raise UsageError(f"--steps {text!r} is not FIRST:LAST:EVERY (whole agent step counts, each optional), "
                         "e.g. 4000000::200000")
    values = []
    for name, part in zip(("FIRST", "LAST", "EVERY"), parts + [""] * (3 - len(parts))):
        try:
            values.append(whole_number(part) if part.strip() else None)
        except argparse.ArgumentTypeError as err:
            raise UsageError(f"--steps {text!r}: {name}: {err}") from None
    first, last, every = values
    first = 0 if first is None else first
    if first < 0:
        raise UsageError(f"--steps {text!r}: FIRST {first:,} is below 0; agent steps count from 0")
    if last is not None and last < first:
        raise UsageError(f"--steps {text!r}: LAST {last:,} is before FIRST {first:,}")
    if every is not None and every < 1:
        raise UsageError(f"--steps {text!r}: EVERY must be at least 1 agent step")
    return first, last, 1 if every is None else every


def select_steps(kept: list[tuple[int, Path]], steps: tuple[int, int | None, int],
                 checkpoint_every: int) -> list[tuple[int, Path]]:
    """The kept checkpoints ``[(agent step, path)]`` that `parse_steps`'s ``(first, last, every)`` takes.

    A run keeps a checkpoint at the first vector step at or past each multiple of its
    ``checkpoint_every`` (agent steps), e.g. at 250,112 for 250,000 with 128 envs; each counts as
    that multiple, so ``::2000000`` takes the one written for 2,000,000 at 2,000,000 + a few.
    """
    first, last, every = steps
    due = [(step - step % checkpoint_every, step, path) for step, path in kept]  # the multiple it was kept for
    end = math.inf if last is None else last
    return [(step, path) for d, step, path in due if first <= d <= end and (d - first) % every == 0]


def _is_json(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return True


def format_table(result: EvalResult, policy: Policy) -> str:
    """The printed report: one ``name  value`` line per field."""
    s = result.stats
    step = f" (agent step {policy.step})" if policy.step is not None else ""
    game = result.game
    noops = f"1..{result.noop_max} no-op frames" if result.noop_max else "no no-op starts"
    rows = [
        ("checkpoint", f"{policy.path}{step}"),
        ("env", f"{result.env_id}" + (f" (game {game})" if game else "")),
        (
            "protocol",
            f"whole games, epsilon {result.epsilon:g}, {noops}, "
            + ("FIRE after each lost life, " if result.fire_on_life_loss else "")
            + f"cap {result.max_episode_frames} {result.length_unit}, seed {result.seed}",
        ),
        ("episodes", f"{s['episodes']}"),
        ("mean ± std", f"{s['mean']:.2f} ± {s['std']:.2f}"),
        ("median", f"{s['median']:.2f}"),
        ("min", f"{s['min']:.2f}"),
        ("max", f"{s['max']:.2f}"),
        ("mean length", f"{s['mean_length']:.1f} {result.length_unit}"),
        ("truncated", f"{int(result.truncated.sum())} of {s['episodes']} games hit the frame cap"),
    ]
    if game is not None:
        random_score, human_score = HUMAN_RANDOM_SCORES[game]
        rows.append(
            (
                "human-normalized",
                f"{result.hns:.4f} (of the mean score; random {random_score:g}, "
                f"human {human_score:g}; Badia et al. 2020, Agent57)",
            )
        )
    else:
        rows.append(
            ("human-normalized", f"n/a: no random/human reference score exists for {result.env_id}")
        )
    rows.append(("scores", " ".join(f"{x:g}" for x in result.returns)))
    if result.video_path is not None:
        rows.append(
            (
                "video",
                f"{result.video_path} (game {result.best_episode + 1} of {len(result.returns)}, "
                f"score {result.returns[result.best_episode]:g})",
            )
        )
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done; 2 bad input (an option, the checkpoint, an output path) or, with
    --every-checkpoint, another evaluation of the run running, one line on stderr before any game
    is played; 130/143 stopped by SIGINT/SIGTERM (the results of the checkpoints done are kept in
    ``--json``; ``checkpoint-evals/`` is left as it was). Both signals are handled as Ctrl-C, also
    where a shell started the process in the background with SIGINT ignored."""
    return exit_code(PROG, lambda: _evaluate(argv), stop_on_signals=True,
                     bad_input=(CheckpointError, EvaluationRunning, ValueError, OSError, gym.error.Error))


def _evaluate(argv: list[str] | None) -> None:
    args = build_parser().parse_args(argv)
    _check_args(args)
    args.ale_only = ale_only_flags(sys.argv[1:] if argv is None else argv)
    device = select_device(args.device)
    torch.set_num_threads(args.torch_threads or ACTING_THREADS)
    if args.every_checkpoint:
        _evaluate_every_checkpoint(args, device)
        return
    policy = load_policy(args.checkpoint, device)
    check_options_apply(args.ale_only, policy.config.env_id)
    check_noop_cap(args, policy.config)
    seed = policy.config.seed if args.seed is None else args.seed
    with games_bar(args.episodes) as bar:
        result = _play(policy, args, seed, device, bar)
    print(format_table(result, policy))
    if args.json is not None:
        _write_json(args.json, _record(policy, result))


def ale_only_flags(argv: list[str]) -> list[str]:
    """The flags of `ALE_ONLY_FLAGS` given on the command line ``argv``, in that order."""
    given = {token.split("=", 1)[0] for token in argv}
    return [flag for flag in ALE_ONLY_FLAGS if flag in given]


def check_options_apply(flags: list[str], env_id: str) -> None:
    """Refuse ``flags`` (`ale_only_flags`) for a checkpoint whose env ``env_id`` has no no-op
    starts or lives (e.g. ``vecdqn/Catch-v0``), as train.py refuses options its env would ignore.

    Raises:
        UsageError: one line naming the flags, the env and its family.
    """
    family = env_family(env_id)
    if not flags or family.fire_and_noop:
        return
    one = len(flags) == 1
    raise UsageError(f"{', '.join(flags)} do{'es' if one else ''} not apply to {env_id}, the checkpoint's env, of the "
                     f"{family.name} family, which has no no-op starts or lives: drop {'it' if one else 'them'}")


def check_noop_cap(args: argparse.Namespace, config: Config) -> None:
    """Refuse ``--noop-max`` and ``--max-episode-frames`` where the env's own check refuses them
    (`vecdqn.envs.EnvOptions.validate`: no-op starts as long as an ALE game's frame cap), naming the
    flags as train.py does; the env, made without names, would say ``noop_max=5000``.

    Raises:
        UsageError: one line naming both flags and the most no-op frames the cap leaves.
    """
    if not env_family(config.env_id).fire_and_noop:  # its envs have neither
        return
    options = dataclasses.replace(config.env_options(), noop_max=args.noop_max,
                                  max_episode_frames=args.max_episode_frames)
    try:
        options.validate(option_flag)
    except ValueError as err:
        raise UsageError(str(err)) from None


def games_bar(total: int) -> tqdm:
    """A bar over ``total`` games on stderr where it is a terminal (disabled in a pipe or a log
    file), cleared once done so the table stands alone."""
    interactive = sys.stderr.isatty()
    return tqdm(total=total, unit="game", desc="games", leave=False, file=sys.stderr, disable=not interactive,
                dynamic_ncols=True)


def _play(policy: Policy, args: argparse.Namespace, seed: int, device: torch.device, bar: tqdm) -> EvalResult:
    """`evaluate` as the command line asks, advancing ``bar`` by each game (its last score shown)."""

    def game_over(score: float) -> None:
        bar.set_postfix(score=f"{score:g}", refresh=False)
        bar.update()

    return evaluate(
        policy.network,
        policy.config,
        episodes=args.episodes,
        epsilon=args.epsilon,
        seed=seed,
        device=device,
        noop_max=args.noop_max,
        max_episode_frames=args.max_episode_frames,
        video_path=args.video,
        fire_on_life_loss=args.fire_on_life_loss,
        on_game=game_over,
    )


def _record(policy: Policy, result: EvalResult) -> dict:
    return {"checkpoint": str(policy.path), "checkpoint_step": policy.step, **result.to_dict()}


def _write_json(path: str, record: dict | list) -> None:
    Path(path).write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")


ROW = "{:>12}  {:>19}  {:>15}  {:>7}  {:>7}  {:>7}  {:>7}"


def _evaluate_every_checkpoint(args: argparse.Namespace, device: torch.device) -> None:
    """One evaluation per kept checkpoint, oldest first, a row printed after each; the results
    go into the run's ``checkpoint-evals/`` once all are done (`EvalLog`).

    Raises:
        CheckpointError: the run kept no checkpoints, or one of them is unreadable (before any game).
        EvaluationRunning: another evaluation of the run is running (before any game).
        UsageError: ``--steps`` selects none of the kept checkpoints, or an ALE-only flag was given
            for a run of another env (`check_options_apply`; both before any game).
    """
    kept = kept_checkpoints(args.checkpoint)
    if not kept:
        raise CheckpointError(f"{args.checkpoint} kept no checkpoints (step_*.pt, one per --checkpoint-every agent "
                              "steps with --keep-checkpoints); evaluate its last without --every-checkpoint")
    if args.steps is not None:
        chosen = select_steps(kept, args.steps, load_policy(kept[-1][1]).config.checkpoint_every)
        if not chosen:
            raise UsageError(f"--steps selects none of the {len(kept)} kept checkpoints of {args.checkpoint} "
                             f"(agent steps {kept[0][0]:,} to {kept[-1][0]:,})")
        kept = chosen
    for _, path in kept:  # every file checked before the first game
        config = load_policy(path).config
        check_options_apply(args.ale_only, config.env_id)
        check_noop_cap(args, config)
    records = []
    with EvalLog(args.checkpoint) as log:
        print(ROW.format("agent step", "saved", "mean ± std", "median", "min", "max", "HNS"))
        try:
            with games_bar(len(kept) * args.episodes) as bar:
                for step, path in kept:
                    records.append(_evaluate_one(args, step, path, device, bar, log))
                    if args.json is not None:  # rewritten after each checkpoint: an interrupt keeps what is done
                        _write_json(args.json, records)
        except KeyboardInterrupt:
            print(f"{PROG}: {log.folder} left as it was: results go there only once every checkpoint is done",
                  file=sys.stderr)
            raise
        log.save()
    print()
    print(best_and_last(args.checkpoint, keep=args.keep_best))


def _evaluate_one(args: argparse.Namespace, step: int, path: Path, device: torch.device, bar: tqdm,
                  log: EvalLog) -> dict:
    """One kept checkpoint of `_evaluate_every_checkpoint`: its games, its row printed (above
    ``bar``), its results added to ``log``; returns its JSON record."""
    policy = load_policy(path, device)
    seed = periodic_eval_seed(policy.config.seed, step) if args.seed is None else args.seed
    result = _play(policy, args, seed, device, bar)
    s = result.stats
    log.add(step, result.scalars | result.protocol, wall_time=policy.saved_at)
    saved = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(policy.saved_at))
    hns = f"{result.hns:.3f}" if result.hns is not None else "n/a"
    with tqdm.external_write_mode():  # the bar steps aside for the row
        print(ROW.format(f"{step:,}", saved, f"{s['mean']:.2f} ± {s['std']:.2f}", f"{s['median']:g}",
                         f"{s['min']:g}", f"{s['max']:g}", hns), flush=True)
    return _record(policy, result)


def best_and_last(run_dir: str | Path, keep: bool = False) -> str:
    """Lines naming the run's best and last evaluated checkpoints (over every evaluation in its
    ``checkpoint-evals/``, earlier ones included) and, with ``keep``, copying the best to
    ``checkpoints/best.pt`` (`keep_best`).

    Raises:
        CheckpointError: ``keep`` and the best checkpoint's file is gone, or the copy failed.
    """
    evals = read_run(run_dir).evals  # on the run's clock
    logged = checkpoint_evals(Path(run_dir))
    checked = np.isin(evals.steps, [e.step for e in logged.get(EVAL_TAG, [])])
    evals = Scalars(evals.steps[checked], evals.minutes[checked], evals.values[checked])  # not the run's own
    best, last = best_point(evals), last_point(evals)
    if best is None or last is None:
        return "no evaluation of a kept checkpoint recorded"
    by_step = {tag: {e.step: e.value for e in logged.get(tag, [])} for tag in PROTOCOL_TAGS}
    protocols = {}  # settings -> how many checkpoints were evaluated with them (none logged before protocol/*)
    for step in evals.steps:
        settings = tuple(by_step[tag].get(int(step)) for tag in PROTOCOL_TAGS)
        if any(value is not None for value in settings):
            protocols[settings] = protocols.get(settings, 0) + 1
    share = f"{last.value / best.value:.1%} of the best" if best.value > 0 else f"best {best.value:g}"
    lines = [f"best: agent step {best.step:,} ({best.minutes:.1f} min of training), mean {best.value:.2f} "
             f"(of {len(evals.steps)} evaluated checkpoint{'s' * (len(evals.steps) != 1)})",
             f"last: agent step {last.step:,} ({last.minutes:.1f} min of training), mean {last.value:.2f} ({share})"]
    if len(protocols) > 1:  # name the settings that differ
        differ = [i for i in range(len(PROTOCOL_TAGS)) if len({settings[i] for settings in protocols}) > 1]
        kinds = "; ".join(f"{count} with " + ", ".join(f"{PROTOCOL_TAGS[i].split('/')[1]} {settings[i] or 0:g}"
                                                       for i in differ) for settings, count in protocols.items())
        lines.append(f"note: best and last compare evaluations played with different settings ({kinds})")
    if keep:
        source = keep_best(run_dir, best.step)
        lines.append(f"kept: {Path(run_dir) / BEST} (a copy of checkpoints/{source.name})")
    else:
        lines.append(f"--keep-best copies it to {Path(run_dir) / BEST}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
