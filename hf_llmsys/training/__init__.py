"""Training jobs (`llmsys train`)."""

from .train import main as train_main

__all__ = ["train_main"]
