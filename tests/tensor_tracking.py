"""Test helper: watch every tensor the ops below autograd return (proves that no S x S tensor is ever built)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class LargestTensor(TorchDispatchMode):
    """Records the largest numel of any tensor an op returns (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


class PeakLiveBytes(TorchDispatchMode):
    """The most bytes held at once by storages the ops below autograd made while it was active (forward and
    backward), and each new storage's shape; storages that existed before (inputs, parameters) do not count."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[object, int]] = {}  # data_ptr -> (weak reference, bytes)
        self.current = self.peak = 0
        self.made: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for ptr in [ptr for ptr, (ref, _) in self.live.items() if torch.UntypedStorage._expired(ref)]:
            self.current -= self.live.pop(ptr)[1]
        existing = {t.untyped_storage().data_ptr() for t in args if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() in existing or storage.data_ptr() in self.live or not storage.nbytes():
                continue  # an in-place op or a view of an argument
            self.live[storage.data_ptr()] = (storage._weak_ref(), storage.nbytes())
            self.current += storage.nbytes()
            self.made.append(tuple(t.shape))
        self.peak = max(self.peak, self.current)
        return out
