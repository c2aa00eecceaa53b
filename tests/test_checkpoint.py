"""Finding a checkpoint from a run folder and loading its policy."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from vecdqn import checkpoint
from vecdqn.checkpoint import CheckpointError, Policy, load_policy, resolve_checkpoint
from vecdqn.model import QNetwork


def test_run_folder_resolves_to_latest_then_final(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    with pytest.raises(CheckpointError, match="latest.pt"):
        resolve_checkpoint(tmp_path)
    (folder / "final.pt").write_bytes(b"")
    assert resolve_checkpoint(tmp_path) == folder / "final.pt"
    (folder / "latest.pt").write_bytes(b"")
    assert resolve_checkpoint(tmp_path) == folder / "latest.pt"
    assert resolve_checkpoint(folder / "final.pt") == folder / "final.pt"  # a file is itself
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_checkpoint(tmp_path / "nope.pt")


def test_load_policy_rebuilds_the_saved_network(tmp_path, save_fresh_checkpoint):
    path = save_fresh_checkpoint(tmp_path / "checkpoints" / "final.pt", "BreakoutNoFrameskip-v4", 4)
    policy = load_policy(tmp_path)
    assert isinstance(policy, Policy)
    assert (policy.path, policy.step, policy.device) == (path, 1234, torch.device("cpu"))
    assert policy.config.env_id == "BreakoutNoFrameskip-v4"
    assert isinstance(policy.network, QNetwork) and not policy.network.training
    saved = torch.load(path, weights_only=False)["agent"]["online"]
    for name, tensor in policy.network.state_dict().items():
        torch.testing.assert_close(tensor, saved[name], rtol=0, atol=0)
    obs = torch.zeros((2, 4, 84, 84), dtype=torch.uint8)
    assert policy.network(obs).shape == (2, 4)


def test_network_that_does_not_fit_the_checkpoint_is_a_checkpoint_error(tmp_path, save_fresh_checkpoint):
    path = save_fresh_checkpoint(tmp_path / "c.pt", "BreakoutNoFrameskip-v4", 4)
    state = torch.load(path, weights_only=False)
    state["n_actions"] = 6  # the saved weights have 4 outputs
    checkpoint.save_atomic(state, path)
    with pytest.raises(CheckpointError, match="Q-network"):
        load_policy(path)
    state["obs_shape"] = (4, 84)
    checkpoint.save_atomic(state, path)
    with pytest.raises(CheckpointError, match="obs_shape"):
        load_policy(path)


def test_a_file_that_is_not_a_policy_checkpoint_is_a_checkpoint_error(tmp_path):
    path = checkpoint.save_atomic({"config": {}}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match="not a vecdqn checkpoint"):
        load_policy(path)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002], ids=["umask022", "umask077", "umask002"])
def test_saved_files_get_the_umask_permissions_not_the_temporary_files_0600(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = checkpoint.save_atomic({"config": {}}, tmp_path / "c.pt")
        plain = tmp_path / "plain"
        plain.write_bytes(b"")  # what any other new file here gets
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_checkpoint_with_a_flipped_bit_is_refused(tmp_path):
    """torch.load reads a record whose bytes changed on disk without a word (weights of 1e5 came
    back from a damaged Catch checkpoint); the CRC-32 the archive stores beside each record tells."""
    path = tmp_path / "latest.pt"
    weights = torch.zeros(4096)
    checkpoint.save_atomic({"config": {}, "weights": weights}, path)
    assert torch.equal(checkpoint.load(path)["weights"], weights)
    data = bytearray(path.read_bytes())
    at = bytes(data).index(b"\0" * 64)  # inside the stored (uncompressed) zeros
    data[at + 10] ^= 0x40
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=True)["weights"].abs().max() > 0  # torch itself takes it
    with pytest.raises(CheckpointError, match=r"is damaged: its record archive/data/0 fails its CRC-32 check"):
        checkpoint.load(path)


@pytest.mark.parametrize(("name", "who"), [("vecdqn-checkpoint-999", "a newer vecdqn"),
                                           ("vecdqn-checkpoint-1", "an older vecdqn"),
                                           ("something-else", "no vecdqn version")])
def test_a_checkpoint_of_another_format_is_named_for_what_it_is(tmp_path, save_fresh_checkpoint, name, who):
    """A format-999 checkpoint was refused by --resume as "written by an older vecdqn" and played by
    evaluate.py without a word; evaluate.py still plays an older one's policy where it loads."""
    path = save_fresh_checkpoint(tmp_path / "checkpoints" / "latest.pt", "BreakoutNoFrameskip-v4", 4)
    state = torch.load(path, weights_only=False)
    checkpoint.save_atomic({**state, "format": name}, path)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {path} has format '{name}', written by {who}; this "
                                              rf"version reads '{checkpoint.CHECKPOINT_FORMAT}': start a new run"):
        checkpoint.load_training(path)
    if who == "an older vecdqn":
        assert load_policy(path).step == 1234
    else:
        with pytest.raises(CheckpointError, match=rf"by {who}; .*: evaluate it with the version that wrote it$"):
            load_policy(path)
