"""Fused weights stored back to back by our saves and mapped, not copied, by our loads (fused_file_views.py).

For every checkpoint format with fused tensors (transformers' Llama, with and without biases, GPT-Neo, T5 v1.0 and
v1.1; GPT-2's ``c_attn`` is fused on disk already): our save puts each fused tensor's pieces next to each other in
the order the load joins them, transformers still reads the file with its own logits, and our load of it makes
every fused tensor a view of the file, bitwise equal to the joined pieces. Files whose pieces are not adjacent,
loads that cast, shards that split a group and systems without ``/proc/self/maps`` fall back to the copy.
Writing to a mapped weight never reaches the file; saving over the folder a model was mapped from works.
"""

from __future__ import annotations

import copy
import io
import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_checkpoint_formats import CASES, logits, model_inputs, reference_model

from hf_llmsys.models import fused_file_views
from hf_llmsys.models.fused_file_views import (
    FileViews,
    copy_in_order,
    fusion_order,
    permute_in_place,
    read_header,
    write_in_fusion_order,
)
from hf_llmsys.models.weight_conversion import fusion_groups
from hf_llmsys.models.weight_integrity import safetensors_header_problem, verify_folder

FUSED_CASES = sorted(case for case in CASES if case != "gpt2")
FUSED_NAMES = ("qkv_proj", "gate_up_proj", "kv_proj")


def fused_params(model) -> dict[str, torch.Tensor]:
    """The parameters a load joins from several checkpoint tensors."""
    return {name: p for name, p in model.named_parameters() if any(f".{n}." in name for n in FUSED_NAMES)}


def mapped_from(folder, tensors: dict[str, torch.Tensor]) -> dict[str, bool]:
    """name -> whether the tensor is a view of a mapping of the folder's weight file."""
    views = FileViews(sorted(folder.glob("*.safetensors")))
    return {name: views.locate(tensor) is not None for name, tensor in tensors.items()}


def data_order(path) -> list[str]:
    _, header = read_header(path)
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


@pytest.fixture(scope="module", params=FUSED_CASES)
def saved(request, tmp_path_factory):
    """(case, reference, ours loaded from the reference's folder, the folder of our save of it)."""
    case = request.param
    reference = reference_model(case)
    folder = tmp_path_factory.mktemp(case)
    reference.save_pretrained(folder / "reference")
    ours = CASES[case][1].from_pretrained(folder / "reference")
    ours.save_pretrained(folder / "ours")
    return case, reference, ours, folder / "ours"


def test_our_saves_store_each_fused_tensors_pieces_back_to_back(saved):
    case, reference, ours, folder = saved
    path = folder / "model.safetensors"
    order = data_order(path)
    groups = fusion_groups(order, ours.checkpoint_key_map())
    assert len(groups) >= len(fused_params(ours)) > 0
    for group in groups:
        start = order.index(group[0])
        assert order[start : start + len(group)] == group, group
    assert safetensors_header_problem(path) is None and verify_folder(folder) == []
    # transformers reads the file with its own logits
    theirs = type(reference).from_pretrained(folder, config=reference.config)
    inputs = model_inputs(reference)
    assert torch.equal(logits(theirs, inputs), logits(reference, inputs))


def test_loading_our_save_maps_every_fused_tensor_instead_of_copying_it(saved):
    case, reference, ours, folder = saved
    loaded = CASES[case][1].from_pretrained(folder)
    fused = fused_params(loaded)
    assert all(mapped_from(folder, fused).values()), mapped_from(folder, fused)
    for name, tensor in fused.items():
        assert tensor.untyped_storage().nbytes() == tensor.nbytes, name  # its own bytes, not the whole file's
    expected = ours.state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in loaded.state_dict().items())
    inputs = model_inputs(reference)
    torch.testing.assert_close(logits(loaded, inputs), logits(reference, inputs), atol=1e-5, rtol=0)


def test_pieces_apart_in_the_file_a_cast_or_no_proc_maps_fall_back_to_the_copy(saved, monkeypatch):
    case, reference, ours, folder = saved
    expected = fused_params(ours)
    # transformers' own save: safetensors sorts by name, so q/k/v (and T5's k/v) are apart: copied, same values
    from_theirs = fused_params(CASES[case][1].from_pretrained(folder.parent / "reference"))
    mapped = mapped_from(folder.parent / "reference", from_theirs)
    assert not any(mapped[name] for name in mapped if "qkv_proj" in name or "kv_proj" in name)
    if case == "llama":  # ... while gate_proj sorts just before up_proj: mapped even there
        assert all(mapped[name] for name in mapped if "gate_up_proj" in name)
    assert all(torch.equal(from_theirs[name], expected[name]) for name in expected)
    cast = fused_params(CASES[case][1].from_pretrained(folder, dtype=torch.float64))
    assert not any(mapped_from(folder, cast).values())
    assert all(torch.equal(cast[name], expected[name].double()) for name in expected)
    monkeypatch.setattr(FileViews, "MAPS", folder / "no-such-file")
    elsewhere = fused_params(CASES[case][1].from_pretrained(folder))
    monkeypatch.undo()
    assert not any(mapped_from(folder, elsewhere).values())
    assert all(torch.equal(elsewhere[name], expected[name]) for name in expected)

    def refuse(*args, **kwargs):
        raise RuntimeError("unable to mmap")

    monkeypatch.setattr(fused_file_views, "map_privately", refuse)  # a filesystem without private mappings
    unmappable = fused_params(CASES[case][1].from_pretrained(folder))
    monkeypatch.undo()
    assert not any(mapped_from(folder, unmappable).values())
    assert all(torch.equal(unmappable[name], expected[name]) for name in expected)


def test_a_group_split_across_shards_loads_by_copy(tmp_path):
    reference = reference_model("llama")
    reference.save_pretrained(tmp_path / "reference")
    ours = CASES["llama"][1].from_pretrained(tmp_path / "reference")
    ours.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 2
    loaded = CASES["llama"][1].from_pretrained(tmp_path / "sharded")
    expected = ours.state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in loaded.state_dict().items())


def test_writing_to_a_mapped_weight_leaves_the_file_alone_and_saving_over_the_source_works(saved, tmp_path):
    case, reference, ours, folder = saved
    target = tmp_path / "copy"
    ours.save_pretrained(target)
    model = CASES[case][1].from_pretrained(target)
    name, weight = next(iter(fused_params(model).items()))
    assert mapped_from(target, {name: weight})[name]
    before = load_file(target / "model.safetensors")
    with torch.no_grad():
        weight.add_(1.0)  # what an optimizer step does
    assert all(torch.equal(t, before[k]) for k, t in load_file(target / "model.safetensors").items())
    assert verify_folder(target) == []
    model.save_pretrained(target)  # over the folder its weights are mapped from
    reloaded = CASES[case][1].from_pretrained(target)
    assert torch.equal(reloaded.get_parameter(name), weight)
    # a copy of the model or its state holds the tensor's bytes, not the whole mapped file
    assert copy.deepcopy(weight).untyped_storage().nbytes() == weight.nbytes
    buffer = io.BytesIO()
    torch.save({name: weight}, buffer)
    assert len(buffer.getvalue()) < weight.nbytes + 4096


def test_fusion_order_moves_each_group_to_its_first_members_place():
    keys = ["a.k", "a.o", "a.q", "a.v", "b.k", "b.q", "b.v"]
    groups = [["a.q", "a.k", "a.v"], ["b.q", "b.k", "b.v"], ["c.q", "c.k"]]  # c: not in this file, left alone
    assert fusion_order(keys, groups) == ["a.q", "a.k", "a.v", "a.o", "b.q", "b.k", "b.v"]


def test_in_place_and_copying_rewrites_give_the_same_valid_file(tmp_path):
    torch.manual_seed(0)
    tensors = {
        "x.k": torch.randn(3, 4),
        "x.o": torch.randn(4, 4),
        "x.q": torch.randn(5, 4),
        "x.v": torch.randn(3, 4),
        "x.n": torch.randn(4).to(torch.bfloat16),
        "y.k": torch.randn(2, 4),
        "y.q": torch.randn(2, 4),
    }
    for way in ("in_place", "copy", "public"):
        path = tmp_path / f"{way}.safetensors"
        save_file(tensors, path, metadata={"format": "pt"})
        data_start, header = read_header(path)
        entries = {k: v for k, v in header.items() if k != "__metadata__"}
        keys = data_order(path)
        groups = [["x.q", "x.k", "x.v"], ["y.q", "y.k"], ["x.n", "x.o"]]  # x.n: another dtype, left alone
        order = fusion_order(keys, groups[:2])
        if way == "public":
            assert write_in_fusion_order(path, groups) and not write_in_fusion_order(path, groups)
        else:
            new_header = {"__metadata__": header["__metadata__"]}
            offset = 0
            for key in order:
                size = entries[key]["data_offsets"][1] - entries[key]["data_offsets"][0]
                new_header[key] = {**entries[key], "data_offsets": [offset, offset + size]}
                offset += size
            encoded = json.dumps(new_header, separators=(",", ":")).encode()
            if way == "in_place":
                permute_in_place(path, keys, order, entries, encoded.ljust(data_start - 8))
            else:
                copy_in_order(path, order, entries, data_start, encoded + b" " * (-len(encoded) % 8))
        assert safetensors_header_problem(path) is None
        assert data_order(path) == order and order.index("x.k") == order.index("x.q") + 1
        loaded = load_file(path)
        assert all(torch.equal(loaded[k], t) for k, t in tensors.items())
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
        assert (8 + length) % 8 == 0
    assert not list(tmp_path.glob(".*reordering"))


def test_copy_range_mixes_kernel_and_buffered_copies_in_order(tmp_path, monkeypatch):
    """Where ``copy_file_range`` fails part-way (another filesystem, no such call), the buffered fallback appends
    at the same place the kernel copy would: the bytes come out in order either way."""
    source_bytes = bytes(range(256)) * 64
    (tmp_path / "source").write_bytes(source_bytes)
    kernel_copy, calls = fused_file_views.os.copy_file_range, []

    def flaky(src, dst, count, offset_src=None, *args):
        calls.append(offset_src)
        if len(calls) % 2 == 0:
            raise OSError(18, "Invalid cross-device link")
        return kernel_copy(src, dst, min(count, 1000), offset_src, *args)

    monkeypatch.setattr(fused_file_views.os, "copy_file_range", flaky)
    monkeypatch.setattr(fused_file_views, "COPY_BLOCK_BYTES", 700)  # kernel and buffered copies alternate
    pieces = [(5000, 3000), (0, 2500), (9000, 7000)]
    with open(tmp_path / "source", "rb") as source, open(tmp_path / "target", "wb") as target:
        target.write(b"header")
        target.flush()
        for offset, count in pieces:
            fused_file_views.copy_range(source, target, offset, count)
    expected = b"header" + b"".join(source_bytes[offset : offset + count] for offset, count in pieces)
    assert (tmp_path / "target").read_bytes() == expected and len(calls) > 4
