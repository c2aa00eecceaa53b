"""The learner's device: choosing it, the --amp check, and the one conversion into `DeviceBatch`."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import catch_config

from vecdqn.preflight import ConfigError, preflight
from vecdqn.staging import DeviceBatch, amp_dtype, check_amp, select_device, stage, to_device


def test_select_device():
    assert select_device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert select_device("auto").type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^--device cuda was asked for but CUDA is not available; use --device "
                                             r"cpu or auto$"):
            select_device("cuda")


@pytest.mark.parametrize("name", ["tpu", "cuda:abc", "cpu:1", "meta", "cuda:", "", "cuda:\u00b2"])
@pytest.mark.parametrize("option", ["--device", "--replay-device"])
def test_a_bad_device_name_is_named_with_the_allowed_ones(name, option):
    with pytest.raises(ValueError) as err:
        select_device(name, option)
    assert str(err.value) == f"{option} {name!r} is not one of auto, cpu, cuda, cuda:N, mps"


def test_a_bad_amp_name_is_named_with_the_allowed_ones():
    for check in (amp_dtype, lambda amp: check_amp(torch.device("cpu"), amp)):
        with pytest.raises(ValueError) as err:
            check("fp8")
        assert str(err.value) == "--amp 'fp8' is not one of off, bf16"
    assert amp_dtype("off") is None and amp_dtype("bf16") is torch.bfloat16


@pytest.mark.parametrize("option, value, message", [
    ("device", "tpu", "--device 'tpu' is not one of auto, cpu, cuda, cuda:N, mps"),
    ("replay_device", "cuda:x", "--replay-device 'cuda:x' is not one of auto, cpu, cuda, cuda:N, mps"),
    ("amp", "fp16", "--amp 'fp16' is not one of off, bf16"),
])
def test_preflight_checks_the_names_with_the_same_functions(tmp_path, option, value, message):
    with pytest.raises(ConfigError) as err:
        preflight(catch_config(tmp_path, **{option: value}))
    assert str(err.value) == message


def test_stage_makes_the_one_batch_type_with_its_dtypes():
    rng = np.random.default_rng(0)
    host = SimpleNamespace(obs=rng.integers(0, 256, (4, 4, 8, 8), dtype=np.uint8),
                           next_obs=rng.integers(0, 256, (4, 4, 8, 8), dtype=np.uint8),
                           actions=np.arange(4, dtype=np.int32), rewards=np.ones(4), discounts=np.full(4, 0.5),
                           weights=np.ones(4, np.float32), terminated=np.zeros(4, bool))
    batch = stage(host, torch.device("cpu"))
    assert type(batch) is DeviceBatch
    assert [t.dtype for t in batch] == [torch.uint8, torch.uint8, torch.int64, torch.float32, torch.float32,
                                        torch.float32]
    for name in DeviceBatch._fields:
        np.testing.assert_array_equal(getattr(batch, name).numpy(), getattr(host, name), err_msg=name)
    # on the CPU nothing is copied where the dtype is already right: the exact path costs nothing
    assert batch.obs.data_ptr() == host.obs.ctypes.data and batch.weights.data_ptr() == host.weights.ctypes.data


def test_to_device_keeps_the_dtype_unless_told():
    frames = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert to_device(frames, torch.device("cpu")).dtype == torch.uint8
    assert to_device(frames, torch.device("cpu"), np.int64).dtype == torch.int64
