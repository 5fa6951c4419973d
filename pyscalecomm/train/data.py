"""The driver's data: scikit-learn's digits (real, for accuracy) or synthetic
tensors (for throughput), shaped for the model.

digits: 1,797 8x8 grey images of handwritten digits, shipped inside
scikit-learn (nothing is downloaded), split 80/20 into train and test with a
fixed permutation. synthetic: random images (3x32x32) or sequences (32 x 32)
with random labels; its accuracy means nothing and is reported as such.
Images are (C, H, W); the transformer reads an image as a sequence of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DATASETS = ("digits", "synthetic")


@dataclass
class Data:
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    input_shape: tuple
    classes: int
    real: bool  # accuracy is meaningful


def _as_sequence(x: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) -> (N, H, C x W): one token per image row."""
    n, c, h, w = x.shape
    return x.permute(0, 2, 1, 3).reshape(n, h, c * w)


def digits(model: str) -> Data:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise SystemExit("the digits data set needs scikit-learn (pip install scikit-learn)") from e
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    y = torch.tensor(y, dtype=torch.int64)
    if model == "transformer":
        x = _as_sequence(x)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    split = int(0.8 * len(x))
    tr, te = perm[:split], perm[split:]
    return Data(x[tr], y[tr], x[te], y[te], tuple(x.shape[1:]), 10, True)


def synthetic(model: str, samples: int) -> Data:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples + samples // 4, 3, 32, 32, generator=g)
    if model == "transformer":
        x = _as_sequence(x)[:, :, :32]
    y = torch.randint(0, 10, (len(x),), generator=g)
    return Data(x[:samples], y[:samples], x[samples:], y[samples:], tuple(x.shape[1:]), 10, False)


def load(name: str, model: str, samples: int = 2048) -> Data:
    if name == "digits":
        return digits(model)
    if name == "synthetic":
        return synthetic(model, samples)
    raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
