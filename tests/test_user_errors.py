"""The CLI's last line of defence: library exceptions a user can fix become one line naming the file and cause."""

from __future__ import annotations

import errno
import sys
import types

import pytest
import torch
from huggingface_hub.utils import validate_repo_id
from safetensors.torch import load_file, save_file

from hf_llmsys import cli
from hf_llmsys.cli.errors import describe


def _raise_in_subcommand(monkeypatch, exc_factory):
    """Register a throwaway subcommand `boom` whose function raises what `exc_factory()` builds."""
    module = types.ModuleType("llmsys_test_boom")

    def run(argv):
        raise exc_factory()

    module.run = run
    monkeypatch.setitem(sys.modules, "llmsys_test_boom", module)
    monkeypatch.setitem(cli.SUBCOMMANDS, "boom", ("llmsys_test_boom:run", "test only"))


def test_missing_file_names_the_path():
    with pytest.raises(OSError) as info:
        open("/nonexistent/dir/file.txt", encoding="utf-8")
    message = describe(info.value)
    assert "/nonexistent/dir/file.txt" in message and "No such file" in message


def test_directory_given_as_file():
    with pytest.raises(OSError) as info:
        open("/tmp", encoding="utf-8")
    assert "give a file, not a folder" in describe(info.value)


@pytest.mark.parametrize(
    ("code", "hint"), [(errno.ENOSPC, "free some space"), (errno.EROFS, "read-only"), (errno.EACCES, "permissions")]
)
def test_disk_errors_name_path_and_fix(code, hint):
    err = OSError(code, errno.errorcode[code], "/out/model.safetensors")
    message = describe(err)
    assert message.startswith("/out/model.safetensors: ") and hint in message


def test_truncated_safetensors_is_described(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(64, 64)}, str(path))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(Exception) as info:
        load_file(str(path))
    assert "corrupt or truncated" in describe(info.value)


def test_invalid_repo_id_is_described():
    with pytest.raises(Exception) as info:
        validate_repo_id("not//a valid id")
    assert describe(info.value).startswith("invalid repo id")


def test_not_decodable_text():
    with pytest.raises(UnicodeDecodeError) as info:
        b"caf\xe9".decode("utf-8")
    assert "not valid utf-8 text" in describe(info.value)


def test_bugs_are_not_user_errors():
    assert describe(KeyError("x")) is None
    assert describe(ZeroDivisionError()) is None


def test_cli_prints_one_line_and_returns_2(monkeypatch, capsys):
    _raise_in_subcommand(monkeypatch, lambda: OSError(errno.ENOSPC, "No space left on device", "/out/ckpt"))
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "llmsys boom: error: /out/ckpt: No space left on device (free some space or choose another output folder)"
    )


def test_cli_keeps_traceback_for_bugs(monkeypatch):
    _raise_in_subcommand(monkeypatch, lambda: KeyError("bug"))
    with pytest.raises(KeyError):
        cli.main(["boom"])


def test_cli_debug_reraises_user_errors(monkeypatch):
    _raise_in_subcommand(monkeypatch, lambda: ValueError("--x must be positive"))
    monkeypatch.setenv("LLMSYS_DEBUG", "1")
    with pytest.raises(ValueError):
        cli.main(["boom"])


def test_cli_interrupt_returns_130(monkeypatch, capsys):
    _raise_in_subcommand(monkeypatch, KeyboardInterrupt)
    assert cli.main(["boom"]) == 130


def test_every_registered_subcommand_resolves():
    for name in cli.SUBCOMMANDS:
        assert callable(cli.resolve(name)), name
