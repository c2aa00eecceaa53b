"""Frames to video: mp4 files, the best episode of an evaluation, and clips for TensorBoard.

Shape legend: ``T`` frames, ``H×W`` screen (210×160 for raw ALE frames). Frames are RGB
``(H, W, 3) uint8``; a TensorBoard clip is ``(1, T, 3, H, W) uint8`` (``SummaryWriter.add_video``'s
layout). Frames from `vecdqn.envs.frame_tap.FrameTap` on an ALE game are emulator frames (four per
agent step with the usual frame skip), so ``ATARI_FPS`` plays them in real time.

mp4 files are written with OpenCV's ``VideoWriter`` (codec mp4v) to a temporary file beside the
target and renamed into place, so a reader never sees half a video. GIFs (what TensorBoard's
video view shows) are encoded with Pillow.

No torch and no gymnasium: the metrics logger imports this module.
"""

from __future__ import annotations

import io
import math
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

__all__ = [
    "ATARI_FPS",
    "BestEpisodeRecorder",
    "encode_gif",
    "video_for_tensorboard",
    "write_video",
]

#: Frames per second of the Atari 2600's NTSC display: the playback rate of a raw-frame video.
ATARI_FPS = 60

Frames = np.ndarray | Sequence[np.ndarray]


def _check_rgb_shape(shape: tuple[int, ...]) -> None:
    """Raises ValueError unless ``shape`` is ``(H, W, 3)``."""
    if len(shape) != 3 or shape[2] != 3:
        raise ValueError(f"video frames must be (H, W, 3) uint8 RGB, got shape {tuple(shape)}")


def _rgb_frame(frame: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``frame`` as a C-contiguous ``(H, W, 3) uint8`` array.

    Raises:
        ValueError: the frame is not ``(H, W, 3)``, or not of ``shape`` when one is given.
    """
    frame = np.ascontiguousarray(frame, dtype=np.uint8)
    _check_rgb_shape(frame.shape)
    if shape is not None and frame.shape != shape:
        raise ValueError(f"video frame of shape {frame.shape} in a video of {shape} frames")
    return frame


def _rgb_frames(frames: Frames, what: str) -> list[np.ndarray]:
    """``(T, H, W, 3) uint8`` frames, ``T >= 1``, all of the first one's size.

    Raises:
        ValueError: no frames (``what`` names what they were for), or frames of other shapes.
    """
    if len(frames) == 0:
        raise ValueError(f"no frames {what}")
    first = _rgb_frame(frames[0])
    return [first, *(_rgb_frame(f, first.shape) for f in frames[1:])]


# ------------------------------------------------------------------------------------------------
# mp4


def _temporary_beside(path: Path) -> Path:
    """A fresh ``.mp4`` path in ``path``'s folder, so the final rename stays on one file system.

    Not made by ``tempfile.mkstemp``: OpenCV creates the file, with the usual permissions
    (mkstemp's 0600 would survive the rename).
    """
    return path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}.tmp.mp4")


class _VideoFile:
    """An OpenCV mp4v writer for RGB frames of one fixed ``(H, W, 3)`` shape.

    Raises:
        ValueError: ``shape`` is not ``(H, W, 3)``.
        OSError: OpenCV cannot open the file for writing.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], fps: float):
        _check_rgb_shape(shape)
        self.path = path
        self.shape = tuple(shape)
        height, width = shape[0], shape[1]
        self._writer = cv2.VideoWriter(
            str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (width, height)
        )
        if not self._writer.isOpened():
            self._writer.release()
            path.unlink(missing_ok=True)
            raise OSError(
                f"cannot write video {path}: OpenCV's mp4v VideoWriter did not open; "
                "use a .mp4 path in a writable folder"
            )

    def write(self, frame: np.ndarray) -> None:
        """Append one ``(H, W, 3) uint8`` RGB frame; ValueError if its shape is not the video's."""
        # OpenCV writes BGR.
        self._writer.write(cv2.cvtColor(_rgb_frame(frame, self.shape), cv2.COLOR_RGB2BGR))

    def close(self) -> None:
        self._writer.release()

    def discard(self) -> None:
        self._writer.release()
        self.path.unlink(missing_ok=True)


def write_video(path: str | os.PathLike[str], frames: Frames, fps: float = ATARI_FPS) -> Path:
    """Write RGB frames to an mp4 file (OpenCV ``VideoWriter``, codec mp4v), atomically.

    Args:
        path: the ``.mp4`` file to write; its folder must exist.
        frames: ``(T, H, W, 3) uint8`` RGB, ``T >= 1``.
        fps: playback rate in frames per second; `ATARI_FPS` plays raw Atari frames in real time.

    Returns:
        the path written.

    Raises:
        ValueError: no frames, or frames that are not ``(H, W, 3)`` of one size.
        OSError: the file cannot be written.
    """
    path = Path(path)
    if len(frames) == 0:
        raise ValueError(f"no frames to write to {path}")
    tmp = _temporary_beside(path)
    video = _VideoFile(tmp, np.shape(frames[0]), fps)
    try:
        for frame in frames:
            video.write(frame)
        video.close()
        os.replace(tmp, path)
    except BaseException:
        video.discard()
        raise
    return path


class BestEpisodeRecorder:
    """Keeps the frames of the best-scoring episode: a prefix in memory and/or the whole as mp4.

    Called with each ``(H, W, 3) uint8`` RGB frame of an episode, and with ``None`` when a new
    episode starts (what was captured since belongs to a discarded game); `end_episode` then
    says the episode's score. The first of equal best scores is kept.

    In memory at most ``max_frames`` frames of each episode are kept (an ALE frame is about
    100 kB; a 108,000-frame game would take 11 GB). The video is streamed to a temporary file
    per episode, beside ``video_path``, and kept or deleted when the episode ends, so memory
    stays constant; `finish` moves the best one to ``video_path``, `cleanup` deletes what is left.

    Args:
        keep_in_memory: keep frames in `best`.
        max_frames: at most this many frames from the start of each episode in memory; None: all.
        video_path: the mp4 to write the best episode to, every frame; None: no video.
        fps: playback rate of that video, in frames per second (settable until the first frame).

    Attributes:
        best: the best episode's frames so far (a list of ``(H, W, 3) uint8``), None before the
            first episode ends or without ``keep_in_memory``.
        best_score: its score (``-inf`` before the first episode ends).

    Raises:
        ValueError, OSError: from the video file (a frame of another size; an unwritable folder).
    """

    def __init__(
        self, keep_in_memory: bool, max_frames: int | None, video_path: Path | None, fps: float
    ):
        self.keep_in_memory = keep_in_memory
        self.max_frames = max_frames
        self.video_path = Path(video_path) if video_path is not None else None
        self.fps = fps
        self.current: list[np.ndarray] = []
        self.best: list[np.ndarray] | None = None
        self.best_score = -math.inf
        self._writer: _VideoFile | None = None
        self._best_file: Path | None = None

    def __call__(self, frame: np.ndarray | None) -> None:
        if frame is None:  # a reset: whatever was captured belongs to a discarded game
            self.current = []
            if self._writer is not None:
                self._writer.discard()
                self._writer = None
            return
        if self.keep_in_memory and (self.max_frames is None or len(self.current) < self.max_frames):
            self.current.append(frame)
        if self.video_path is not None:
            if self._writer is None:
                self._writer = _VideoFile(_temporary_beside(self.video_path), frame.shape, self.fps)
            self._writer.write(frame)

    def end_episode(self, score: float) -> None:
        """Keep this episode's frames if it scored more than every earlier one."""
        better = score > self.best_score
        if better:
            self.best_score = score
            if self.keep_in_memory:
                self.best = self.current
        self.current = []
        if self._writer is not None:
            self._writer.close()
            if better:
                if self._best_file is not None:
                    self._best_file.unlink(missing_ok=True)
                self._best_file = self._writer.path
            else:
                self._writer.path.unlink(missing_ok=True)
            self._writer = None

    def finish(self) -> None:
        """Move the best episode's video to ``video_path``."""
        if self.video_path is not None and self._best_file is not None:
            os.replace(self._best_file, self.video_path)
            self._best_file = None

    def cleanup(self) -> None:
        """Delete temporary files (after an error, or what `finish` did not move)."""
        if self._writer is not None:
            self._writer.discard()
            self._writer = None
        if self._best_file is not None:
            self._best_file.unlink(missing_ok=True)
            self._best_file = None


# ------------------------------------------------------------------------------------------------
# TensorBoard


def video_for_tensorboard(
    frames: Frames,
    max_frames: int = 300,
    scale: float = 0.5,
    *,
    stride: int = 4,
) -> np.ndarray:
    """RGB frames as a small clip for ``SummaryWriter.add_video`` or `encode_gif`.

    Every ``stride``-th frame from the start, at most ``max_frames`` of them, each resized by
    ``scale`` (``cv2.INTER_AREA``). With raw Atari frames and ``stride=4`` (one frame per agent
    step) 300 frames cover the first 20 s of the game; play them at ``fps = 60 / stride``.

    Args:
        frames: ``(T, H, W, 3) uint8`` RGB.

    Returns:
        ``(1, T', 3, round(H·scale), round(W·scale)) uint8``,
        ``T' = min(max_frames, ceil(T / stride))``.

    Raises:
        ValueError: no frames, frames that are not ``(H, W, 3)`` of one size, or a non-positive
            ``max_frames``, ``scale`` or ``stride``.
    """
    if max_frames < 1 or stride < 1 or not scale > 0:
        raise ValueError(
            f"max_frames={max_frames} and stride={stride} must be >= 1 and scale={scale} > 0"
        )
    chosen = _rgb_frames(frames[::stride][:max_frames], "to make a video of")
    height, width = chosen[0].shape[:2]
    size = (max(1, round(width * scale)), max(1, round(height * scale)))  # cv2 wants (W, H)
    small = np.stack([cv2.resize(f, size, interpolation=cv2.INTER_AREA) for f in chosen])
    return np.ascontiguousarray(small.transpose(0, 3, 1, 2)[None])


def encode_gif(frames: Frames, fps: float) -> bytes:
    """An animated GIF (looping) of RGB frames, the encoding TensorBoard's video view expects.

    ``SummaryWriter.add_video`` would need moviepy for the same encoding; Pillow (already
    required by TensorBoard) does it here. A GIF's frame delay is a whole number of hundredths
    of a second, so the playback rate is ``fps`` only approximately.

    Args:
        frames: ``(T, H, W, 3) uint8`` RGB, ``T >= 1`` (a clip of `video_for_tensorboard` is
            ``clip[0].transpose(0, 2, 3, 1)``).
        fps: playback rate in frames per second, ``> 0``.

    Returns:
        the GIF file's bytes (``b"GIF89a..."``).

    Raises:
        ValueError: no frames, frames that are not ``(H, W, 3)`` of one size, or ``fps <= 0``.
    """
    if not fps > 0:
        raise ValueError(f"fps={fps} must be > 0")
    images = [Image.fromarray(f) for f in _rgb_frames(frames, "to encode as a GIF")]
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=max(1, round(1000 / fps)),
        loop=0,
    )
    return buffer.getvalue()
