"""The user's own trainer.py, beside their training script, as many repositories have one.

It holds the model the script trains. elastic-chaos 0.1 installed a top-level ``trainer`` package
that this name collided with; ``make user-test`` runs the script with this file next to it, so a run
that imported anything else under this name would fail at ``from trainer import build_model``.
"""
from torch import nn


def build_model(features, hidden, classes):
    """A two-layer classifier."""
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
