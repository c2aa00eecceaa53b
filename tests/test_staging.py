"""The learner's device: choosing it, the --amp check and what --amp auto resolves to, and the one conversion
into `DeviceBatch`."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import catch_config

from vecdqn import staging
from vecdqn.preflight import ConfigError, preflight
from vecdqn.staging import DeviceBatch, amp_dtype, check_amp, resolve_amp, select_device, stage, to_device


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
        assert str(err.value) == "--amp 'fp8' is not one of off, bf16, auto"
    assert amp_dtype("off") is None and amp_dtype("bf16") is torch.bfloat16


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu vme sse2 avx2 avx512f {extra}
bugs\t\t: sysret_ss_attrs

processor\t: 1
flags\t\t: fpu vme sse2 avx2 avx512f {extra}
"""


def test_cpu_flags_are_read_from_the_first_cpu_of_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO.format(extra="avx512_bf16"))
    assert staging.cpu_flags(str(info)) == {"fpu", "vme", "sse2", "avx2", "avx512f", "avx512_bf16"}
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # an Arm CPU: no x86 flags line
    assert staging.cpu_flags(str(info)) == frozenset()
    assert staging.cpu_flags(str(tmp_path / "missing")) == frozenset()  # macOS, Windows


@pytest.mark.parametrize("flags, mode", [
    ({"avx2", "avx512f", "avx512_bf16"}, "bf16"),  # AMD Zen 4, Intel Cooper Lake
    ({"avx2", "amx_bf16", "amx_tile"}, "bf16"),  # Intel Sapphire Rapids
    ({"avx2", "avx512f", "avx512_vnni"}, "off"),  # bf16 emulated: slower than fp32
    (set(), "off"),  # no /proc/cpuinfo
])
def test_amp_auto_on_the_cpu_follows_its_native_bf16(monkeypatch, flags, mode):
    monkeypatch.setattr(staging, "cpu_flags", lambda: frozenset(flags))
    cpu = torch.device("cpu")
    assert resolve_amp(cpu, "auto") == mode
    assert check_amp(cpu, "auto") is (torch.bfloat16 if mode == "bf16" else None)
    for given in ("off", "bf16"):  # a mode given explicitly is kept, whatever the CPU
        assert resolve_amp(cpu, given) == given


def test_amp_auto_says_once_what_it_chose_and_why(monkeypatch):
    cpu, lines = torch.device("cpu"), []
    monkeypatch.setattr(staging, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    assert staging.announce_amp(cpu, "auto", lines.append) == "bf16"
    monkeypatch.setattr(staging, "cpu_flags", lambda: frozenset({"avx2"}))
    assert staging.announce_amp(cpu, "auto", lines.append) == "off"
    assert staging.announce_amp(cpu, "bf16", lines.append) == "bf16"
    assert staging.announce_amp(torch.device("meta"), "auto", lines.append) == "off"
    assert lines == [
        "--amp auto: bf16 autocast, fp32 weights and loss; this CPU computes bf16 natively (avx512_bf16)",
        "--amp auto: fp32; this CPU has no native bf16 (avx512_bf16 or amx_bf16), where bf16 is slower than fp32",
        "--amp bf16: bf16 autocast, fp32 weights and loss",
        "--amp auto: fp32; bf16 autocast is not offered on meta",
    ]
    with pytest.raises(ValueError, match=r"^--amp 'fp8' is not one of off, bf16, auto$"):
        staging.announce_amp(cpu, "fp8", lines.append)
    with pytest.raises(ValueError, match=r"^--amp auto depends on the device"):
        amp_dtype("auto")


@pytest.mark.parametrize("bf16, mode", [(True, "bf16"), (False, "off")])
def test_amp_auto_on_cuda_follows_the_gpu(monkeypatch, bf16, mode):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args, **kwargs: "a GPU")
    monkeypatch.setattr(staging, "cpu_flags", lambda: frozenset({"avx512_bf16"}))  # the CPU does not decide
    lines = []
    assert staging.announce_amp(torch.device("cuda"), "auto", lines.append) == mode
    assert lines == [f"--amp auto: {'bf16 autocast, fp32 weights and loss' if bf16 else 'fp32'}; a GPU "
                     f"{'computes' if bf16 else 'cannot compute'} in bf16"]


def test_preflight_takes_amp_auto(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "cpu_flags", lambda: frozenset())
    assert preflight(catch_config(tmp_path, amp="auto", device="cpu")).type == "cpu"


@pytest.mark.parametrize("flags, mode", [(frozenset(), "off"), (frozenset({"avx512_bf16"}), "bf16")])
def test_a_run_saves_the_mode_amp_auto_chose(tmp_path, monkeypatch, capsys, flags, mode):
    import json

    from vecdqn.trainer import Trainer

    monkeypatch.setattr(staging, "cpu_flags", lambda: flags)
    config = catch_config(tmp_path, amp="auto", device="cpu", total_steps=60, learning_starts=40)
    trainer = Trainer(config, progress=False, handle_signals=False)
    trainer.run()
    saved = json.loads((trainer.core.run_dir / "config.json").read_text())
    assert saved["amp"] == mode
    assert f"--amp auto: {'bf16' if mode == 'bf16' else 'fp32'}" in capsys.readouterr().out


@pytest.mark.parametrize("option, value, message", [
    ("device", "tpu", "--device 'tpu' is not one of auto, cpu, cuda, cuda:N, mps"),
    ("replay_device", "cuda:x", "--replay-device 'cuda:x' is not one of auto, cpu, cuda, cuda:N, mps"),
    ("amp", "fp16", "--amp 'fp16' is not one of off, bf16, auto"),
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


def test_the_run_folder_line_comes_first_and_a_refused_resume_says_no_amp_line(tmp_path, capsys):
    """The first console line names the run folder (the docs say so); --amp's line follows it. A
    resume refused at the run folder (another process holds it) prints only its error."""
    import fcntl
    import os

    from vecdqn import cli

    run = tmp_path / "run"
    assert cli.main(["--preset", "catch", "--log-dir", str(tmp_path), "--run-name", "run", "--total-steps", "201",
                     "--num-envs", "2", "--learning-starts", "100", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{run}: vecdqn/Catch-v0, 201 agent steps; learner on cpu")
    assert lines[1].startswith("--amp auto: ")
    assert lines[2] == ("--total-steps 201 is not a multiple of --num-envs 2: the run ends at agent step 202, the "
                        "first vector step to reach it")
    fd = os.open(run, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert cli.main(["--resume", str(run), "--total-steps", "400"]) == 2
    finally:
        os.close(fd)
    captured = capsys.readouterr()
    assert "--amp" not in captured.out and captured.err.count("\n") == 1
