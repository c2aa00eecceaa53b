"""TensorBoard logging, episode statistics and the progress bar: the one place metrics are written.

The logger only writes: it is given every value it shows. The run's own numbers (the game count,
the recent returns) live in `vecdqn.train_state.TrainState`, saved by the checkpoint.

Tags: ``charts/episodic_return`` and ``charts/episodic_length`` (whole games, raw
score, length in emulator frames), ``charts/epsilon``, ``charts/beta``, ``charts/learning_rate``,
``charts/SPS`` (agent steps per second), ``losses/td_loss``, ``losses/q_values``,
``replay/size``, ``replay/priority_max``. Every scalar's global step is the agent step.

With ``--track`` the run also goes to Weights & Biases through wandb's own TensorBoard sync
(`vecdqn.tracking`), started here right before the writer is created.
"""

from __future__ import annotations

import collections
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm import tqdm

from vecdqn import tracking
from vecdqn.video import encode_gif


class MetricsLogger:
    """Writes scalars to TensorBoard and shows a tqdm bar (agent steps, steps/s, ETA, return).
    It keeps no run state: what it shows of the games, it is given.

    Args:
        run_dir: the run's folder; event files go directly into it.
        config: the run's resolved configuration, written once as text and as hparams; with
            ``track`` set, the run is also sent to Weights & Biases (`vecdqn.tracking.start`).
        total_steps: length of the run in agent steps (the bar's total).
        initial_step: agent step the run starts at (non-zero on resume).
        progress: show the progress bar.
    """

    def __init__(
        self,
        run_dir: str,
        config: Mapping[str, Any],
        total_steps: int,
        *,
        initial_step: int = 0,
        progress: bool = True,
    ):
        # --track: wandb's TensorBoard sync must patch the writer class before the writer exists.
        self.tracking = tracking.start(run_dir, config) if config.get("track") else None
        # On resume, events a killed process wrote after the checkpoint's step are dropped, so
        # every curve has one value per step (the resumed run writes those steps again).
        self.writer = SummaryWriter(run_dir, purge_step=initial_step + 1 if initial_step else None)
        if initial_step == 0:
            self._write_config(config)
        self._loss_sums: dict[str, float] = collections.defaultdict(float)
        self._loss_count = 0
        self._total_steps = total_steps
        self._show = progress
        self._last_time = time.perf_counter()
        self._last_step = initial_step
        self._step = initial_step
        self._phase = "warm-up"  # shown until the first update
        # Redraw at most every 0.5 s on a terminal; in a log file (no TTY) every 30 s, so the file
        # stays readable. One bar from start to end: its rate is smoothed (an exponential moving
        # average), so the ETA follows the learner's rate soon after the warm-up ends.
        interactive = sys.stderr.isatty()
        self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=interactive,
                        ncols=None if interactive else 100, disable=not progress, smoothing=0.05,
                        mininterval=0.5 if interactive else 30.0)
        self.bar.set_postfix_str(self._phase, refresh=False)

    def learning_started(self, step: int) -> None:
        """The learner's first update happened: the bar drops its "warm-up" mark (the same bar
        goes on)."""
        self._phase = ""
        self.progress(step)

    def _write_config(self, config: Mapping[str, Any]) -> None:
        table = "|option|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config.items())
        self.writer.add_text("config", table, 0)
        self.writer.add_text("config_json", "```\n" + json.dumps(dict(config), indent=2) + "\n```", 0)
        clean = {k: v for k, v in config.items() if isinstance(v, (bool, int, float, str))}
        for summary in hparams(clean, {"charts/episodic_return": 0.0}):
            self.writer.file_writer.add_summary(summary)

    def episode(self, step: int, episodic_return: float, length: float) -> None:
        """Write one finished game at its own agent step: raw return and length in emulator
        frames (``charts/episodic_return``, ``charts/episodic_length``)."""
        self.writer.add_scalar("charts/episodic_return", episodic_return, step)
        self.writer.add_scalar("charts/episodic_length", length, step)

    def losses(self, metrics: Mapping[str, float]) -> None:
        """Add one update's ``td_loss`` and ``q_values`` to the means `flush_losses` writes."""
        self._loss_sums["losses/td_loss"] += metrics["td_loss"]
        self._loss_sums["losses/q_values"] += metrics["q_values"]
        self._loss_count += 1

    def flush_losses(self, step: int) -> None:
        """Write the mean loss and Q-value of the updates since the last call (if any)."""
        if self._loss_count:
            self.scalars(step, {tag: total / self._loss_count for tag, total in self._loss_sums.items()})
        self._loss_sums.clear()
        self._loss_count = 0

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Write ``{tag: value}`` at agent step ``step``.

        Evaluation results (``eval/*`` tags) are flushed to disk at once rather than up to the
        writer's two minutes later: they are rare, and what a watcher acts on (``scripts/tune.py``
        reports each one to its pruner while the run goes on).
        """
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        if any(tag.startswith("eval/") for tag in values):
            self.writer.flush()

    def video(self, tag: str, clip: np.ndarray, step: int, fps: float = 15.0) -> None:
        """Write a clip as an animated GIF (`vecdqn.video.encode_gif`), the encoding TensorBoard's
        video view expects.

        Args:
            clip: ``(1, T, 3, H, W) uint8`` RGB frames (the layout of ``add_video``, as
                `vecdqn.video.video_for_tensorboard` makes it).
            fps: playback frames per second.
        """
        frames = np.asarray(clip, dtype=np.uint8)[0].transpose(0, 2, 3, 1)
        _, h, w, _ = frames.shape
        image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=encode_gif(frames, fps))
        self.writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)

    def sps(self, step: int) -> float:
        """Agent steps per second since the previous call; writes ``charts/SPS``."""
        now = time.perf_counter()
        rate = (step - self._last_step) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_step = now, step
        self.writer.add_scalar("charts/SPS", rate, step)
        return rate

    def progress(self, step: int, mean_return: float = math.nan, games: int = 0) -> None:
        """Advance the bar to ``step``; once there are ``games`` (whole games so far), its
        postfix shows them and ``mean_return``, the recent mean raw return."""
        if games:
            self.bar.set_postfix(ret=f"{mean_return:.2f}", games=games, refresh=False)
            if self._phase:
                self.bar.postfix += f", {self._phase}"
        self.bar.update(step - self._step)
        self._step = step

    def write(self, message: str) -> None:
        """Print a line without breaking the bar."""
        tqdm.write(message)

    def close(self) -> None:
        self.bar.close()
        self.writer.flush()
        self.writer.close()
        if self.tracking is not None:  # after the writer: wandb reads its last events first
            self.tracking.finish()
            self.tracking = None


# The event file `EvalLog` writes into a run folder; its suffix tells it from the run's own.
EVAL_LOG_SUFFIX = ".checkpoint-evals"


class EvalLog:
    """Evaluations of a finished run's kept checkpoints, written into the run's folder as the
    run's own periodic evaluations would have been: ``eval/return_mean``, ``eval/return_std``
    and ``eval/hns`` at each checkpoint's agent step, stamped with the time the checkpoint was
    saved, so TensorBoard and `vecdqn.curves` (``scripts/plot.py``) place them on the run's clock.

    They go to an event file of their own (name ending in ``.checkpoint-evals``); one written by
    an earlier `EvalLog` in the same folder is removed when this one is created, so evaluating a
    run again replaces its checkpoint evaluations instead of adding a second series.

    Args:
        run_dir: the run folder (holding the run's event files).
    """

    def __init__(self, run_dir: str | os.PathLike[str]):
        run_dir = Path(run_dir)
        for old in run_dir.glob(f"*tfevents*{EVAL_LOG_SUFFIX}"):
            old.unlink()
        self.writer = SummaryWriter(str(run_dir), filename_suffix=EVAL_LOG_SUFFIX)

    def add(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        """Write ``{tag: value}`` at agent step ``step`` and Unix time ``wall_time`` (seconds),
        flushed to disk at once (an interrupted evaluation keeps the rows done)."""
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step, walltime=wall_time)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
