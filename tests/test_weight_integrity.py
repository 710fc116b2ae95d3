"""Integrity of saved folders (hf_llmsys/checkpoints/weight_integrity.py): sizes and headers on every load, the full
sha256 by `llmsys verify`, `verify_checksums=True`, LLMSYS_VERIFY_CHECKSUMS=1 and `llmsys pull`; a deliberately
edited file stays loadable leniently."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
from hf_llmsys.checkpoints import weight_integrity
from hf_llmsys.checkpoints.weight_integrity import AlteredWeightsError, safetensors_header_problem
from hf_llmsys.cli import main
from hf_llmsys.hub import transfer as hub_transfer

TINY = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)


@pytest.fixture
def saved(tmp_path) -> Path:
    torch.manual_seed(0)
    LlmsysLlamaForCausalLM(LlmsysLlamaConfig(**TINY)).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def flip_a_payload_bit(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))


def edit_deliberately(folder: Path) -> None:
    """Re-save the same tensors with other metadata: a valid file of another size (an edit made on purpose)."""
    path = folder / "model.safetensors"
    save_file(load_file(path), path, metadata={"format": "pt", "edited": "by hand, on purpose"})


def test_save_writes_both_manifests(saved):
    sizes = (saved / "checksums.sizes").read_text().split()
    assert sizes == [str((saved / "model.safetensors").stat().st_size), "model.safetensors"]
    assert (saved / "checksums.sha256").read_text().endswith("  model.safetensors\n")


def test_plain_load_hashes_nothing(saved, monkeypatch):
    def no_hashing(path):
        raise AssertionError(f"hashed {path} on a plain load")

    monkeypatch.setattr(weight_integrity, "file_sha256", no_hashing)
    monkeypatch.delenv(weight_integrity.VERIFY_ENV, raising=False)
    assert LlmsysLlamaForCausalLM.from_pretrained(saved) is not None


def test_flipped_bit_found_by_full_check_only(saved, monkeypatch, capsys):
    flip_a_payload_bit(saved)
    LlmsysLlamaForCausalLM.from_pretrained(saved)  # same size, valid header: the cheap checks pass
    with pytest.raises(AlteredWeightsError, match="model.safetensors: its sha256 differs"):
        LlmsysLlamaForCausalLM.from_pretrained(saved, verify_checksums=True)
    monkeypatch.setenv(weight_integrity.VERIFY_ENV, "1")
    with pytest.raises(AlteredWeightsError, match="llmsys verify"):
        LlmsysLlamaForCausalLM.from_pretrained(saved)
    monkeypatch.delenv(weight_integrity.VERIFY_ENV)
    assert main(["verify", str(saved)]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors: its sha256 differs" in err and "--update" in err and "Traceback" not in err


def test_intact_folder_verifies(saved, capsys):
    assert main(["verify", str(saved)]) == 0
    assert "1 weight files match checksums.sha256" in capsys.readouterr().out


def test_deliberate_edit_refused_strictly_loaded_leniently_and_accepted_by_update(saved, caplog):
    before = LlmsysLlamaForCausalLM.from_pretrained(saved).state_dict()
    edit_deliberately(saved)
    with pytest.raises(AlteredWeightsError, match=r"model.safetensors: \d+ bytes.*llmsys verify .*strict=False"):
        LlmsysLlamaForCausalLM.from_pretrained(saved)
    with caplog.at_level(logging.WARNING):
        lenient = LlmsysLlamaForCausalLM.from_pretrained(saved, strict=False)
    assert "model.safetensors" in caplog.text and "llmsys verify" in caplog.text
    assert all(torch.equal(tensor, before[name]) for name, tensor in lenient.state_dict().items())
    model, info = LlmsysLlamaForCausalLM.from_pretrained(saved, output_loading_info=True)  # transformers' report
    assert not info["missing_keys"]
    assert main(["verify", str(saved), "--update"]) == 0
    LlmsysLlamaForCausalLM.from_pretrained(saved, verify_checksums=True)  # accepted as it is now


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: data[:-7], "bytes, but its header describes"),
        (lambda data: data + b"junk", "bytes, but its header describes"),
        (lambda data: data[:5], "shorter than the 8-byte header length"),
        (lambda data: data[:8] + b"{not json" + data[17:], "not valid JSON"),
    ],
    ids=["truncated", "appended", "no-length", "bad-json"],
)
def test_broken_safetensors_named_on_every_load(saved, damage, why):
    path = saved / "model.safetensors"
    path.write_bytes(damage(path.read_bytes()))
    (saved / "checksums.sizes").unlink()  # the header check alone, as for a folder transformers saved
    assert why in safetensors_header_problem(path)
    with pytest.raises(ValueError, match=f"model.safetensors: not a complete safetensors file .*{why}"):
        LlmsysLlamaForCausalLM.from_pretrained(saved, strict=False)


def test_verify_without_manifest_is_clear(saved, capsys):
    (saved / "checksums.sha256").unlink()
    assert main(["verify", str(saved)]) == 2
    assert "no checksums.sha256" in capsys.readouterr().err


def test_pull_verifies_what_it_downloaded(saved, tmp_path, monkeypatch):
    flip_a_payload_bit(saved)

    class Info:
        sha = "0" * 40

    class Api:
        token = None

        def repo_info(self, *args, **kwargs):
            return Info()

    def fake_download(repo_id, local_dir, **kwargs):
        import shutil

        shutil.copytree(saved, local_dir)
        return local_dir

    monkeypatch.setattr(hub_transfer, "snapshot_download", fake_download)
    with pytest.raises(ValueError, match="model.safetensors: its sha256 differs"):
        hub_transfer.pull_repo("alice/model", tmp_path / "pulled", api=Api())
