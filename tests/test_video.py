"""Frames to video: mp4 files, the best-episode recorder, TensorBoard clips and GIFs."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image, ImageSequence
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn.metrics import MetricsLogger
from vecdqn.video import ATARI_FPS, BestEpisodeRecorder, encode_gif, video_for_tensorboard, write_video


def _frames(t: int, h: int = 210, w: int = 160) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(t, h, w, 3), dtype=np.uint8)


def _mp4_frames(path) -> tuple[int, int, int, float]:
    """``(frame count, width, height, fps)`` of an mp4."""
    capture = cv2.VideoCapture(str(path))
    try:
        assert capture.isOpened()
        return (
            int(capture.get(cv2.CAP_PROP_FRAME_COUNT)),
            int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
            int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
            capture.get(cv2.CAP_PROP_FPS),
        )
    finally:
        capture.release()


def test_video_for_tensorboard_shapes():
    frames = _frames(1000)
    clip = video_for_tensorboard(frames, max_frames=300, scale=0.5)
    assert clip.shape == (1, 250, 3, 105, 80) and clip.dtype == np.uint8  # every 4th frame
    clip = video_for_tensorboard(frames[:50], max_frames=300, scale=0.5, stride=1)
    assert clip.shape == (1, 50, 3, 105, 80)
    # Channel order survives: a pure red frame stays red in (T, C, H, W).
    red = np.zeros((1, 210, 160, 3), dtype=np.uint8)
    red[..., 0] = 255
    assert video_for_tensorboard(red)[0, 0, :, 50, 40].tolist() == [255, 0, 0]


@pytest.mark.parametrize(
    ("frames", "kwargs"),
    [
        (np.zeros((0, 210, 160, 3), np.uint8), {}),
        (np.zeros((4, 210, 160), np.uint8), {}),  # grayscale
        (np.zeros((4, 210, 160, 3), np.uint8), {"stride": 0}),
        (np.zeros((4, 210, 160, 3), np.uint8), {"scale": 0.0}),
    ],
)
def test_video_for_tensorboard_refuses_bad_input(frames, kwargs):
    with pytest.raises(ValueError):
        video_for_tensorboard(frames, **kwargs)


def test_write_video_writes_every_frame_atomically(tmp_path):
    path = write_video(tmp_path / "v.mp4", _frames(20))
    assert _mp4_frames(path) == (20, 160, 210, pytest.approx(ATARI_FPS))
    with pytest.raises(ValueError, match="no frames"):
        write_video(tmp_path / "empty.mp4", [])
    mixed = [_frames(1)[0], _frames(1, 100, 100)[0]]
    with pytest.raises(ValueError, match="shape"):
        write_video(tmp_path / "mixed.mp4", mixed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.mp4"]  # no temporary files left


def test_best_episode_recorder_keeps_the_first_best_game(tmp_path):
    video = tmp_path / "best.mp4"
    recorder = BestEpisodeRecorder(True, 3, video, fps=30)

    def play(value: int, length: int, score: float) -> None:
        recorder(None)  # a reset
        for _ in range(length):
            recorder(np.full((20, 16, 3), value, np.uint8))
        recorder.end_episode(score)

    play(10, 5, 1.0)
    play(20, 4, 3.0)
    recorder(None)  # a game discarded by a reset: never scored
    recorder(np.zeros((20, 16, 3), np.uint8))
    play(30, 6, 3.0)  # a tie: the first one stays
    play(40, 2, 2.0)
    recorder.finish()
    recorder.cleanup()
    assert recorder.best_score == 3.0
    assert len(recorder.best) == 3 and all((f == 20).all() for f in recorder.best)  # a prefix
    count, width, height, fps = _mp4_frames(video)
    assert (count, width, height, fps) == (4, 16, 20, pytest.approx(30))  # the whole game
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.mp4"]


def test_best_episode_recorder_cleanup_after_an_error(tmp_path):
    recorder = BestEpisodeRecorder(False, None, tmp_path / "best.mp4", fps=60)
    recorder(np.zeros((20, 16, 3), np.uint8))
    recorder.end_episode(1.0)
    recorder(np.zeros((20, 16, 3), np.uint8))
    with pytest.raises(ValueError, match="shape"):
        recorder(np.zeros((10, 16, 3), np.uint8))
    recorder.cleanup()
    assert recorder.best is None
    assert list(tmp_path.iterdir()) == []


def test_encode_gif_holds_every_frame_at_the_frame_rate():
    frames = np.zeros((3, 20, 16, 3), np.uint8)
    frames[0, ..., 0] = 255  # red, green, blue
    frames[1, ..., 1] = 255
    frames[2, ..., 2] = 255
    data = encode_gif(frames, fps=10)
    assert data[:6] == b"GIF89a"
    with Image.open(io.BytesIO(data)) as gif:
        assert gif.size == (16, 20)
        decoded = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(gif)]
        assert gif.info["duration"] == 100  # ms per frame
    np.testing.assert_array_equal(np.stack(decoded), frames)
    with pytest.raises(ValueError):
        encode_gif(frames[:0], fps=10)
    with pytest.raises(ValueError):
        encode_gif(frames, fps=0)


def test_metrics_logger_writes_a_clip_as_a_gif_image(tmp_path):
    logger = MetricsLogger(str(tmp_path), {"seed": 1}, total_steps=10, progress=False)
    clip = video_for_tensorboard(_frames(40), max_frames=300, scale=0.5)
    logger.video("eval/video", clip, step=7, fps=15)
    logger.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    acc.Reload()
    (image,) = acc.Images("eval/video")
    assert image.step == 7 and (image.width, image.height) == (80, 105)
    with Image.open(io.BytesIO(image.encoded_image_string)) as gif:
        assert gif.format == "GIF" and gif.n_frames == 10
