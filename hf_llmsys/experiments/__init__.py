"""Experiments built on the models and the evaluation toolkit (the positional-encoding zoo)."""
