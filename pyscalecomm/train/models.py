"""The driver's models: an MLP, a small CNN, a CNN with a fully connected
head, a ResNet-18-style network and a small transformer encoder, each built
for an input shape and a class count.

``build(name, input_shape, classes, width)``: ``width`` scales the model
(hidden units of the MLP, channels of the CNNs, the ResNet's first stage,
the transformer's model dimension), so one flag sets how many bytes of
gradient each step communicates (``param_bytes``).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

MODELS = ("mlp", "cnn", "cnn-fc", "resnet", "transformer")


def mlp(input_shape, classes: int, width: int) -> nn.Module:
    n_in = 1
    for d in input_shape:
        n_in *= d
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(n_in, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, classes),
    )


def _convolutions(c: int, width: int, pooled: int) -> list[nn.Module]:
    """Two 3x3 convolutions (width, 2 x width channels) pooled to pooled x pooled, flattened."""
    return [
        nn.Conv2d(c, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(pooled),
        nn.Flatten(),
    ]


def cnn(input_shape, classes: int, width: int) -> nn.Module:
    return nn.Sequential(*_convolutions(input_shape[0], width, 2), nn.Linear(8 * width, classes))


def cnn_fc(input_shape, classes: int, width: int) -> nn.Module:
    """Two 3x3 convolutions (width, 2 x width channels) pooled to 4x4, then a
    fully connected head of two hidden layers of 4 x width units: most of the
    compute in the convolutions, most of the parameters in the head (the
    shape of AlexNet and VGG, in small)."""
    hidden = 4 * width
    return nn.Sequential(
        *_convolutions(input_shape[0], width, 4),
        nn.Linear(2 * width * 16, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


class _Block(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch norm and a shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
            nn.BatchNorm2d(c_out),
        )
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet(input_shape, classes: int, width: int) -> nn.Module:
    """ResNet-18's layout (four stages of two basic blocks, widths w, 2w, 4w,
    8w; w = 64 is ResNet-18's 11M parameters) with a 3x3 stem for small images."""
    layers = [nn.Conv2d(input_shape[0], width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    c = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        out = width * mult
        layers += [_Block(c, out, 1 if stage == 0 else 2), _Block(out, out, 1)]
        c = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers)


class _Embed(nn.Module):
    """Each token's features to width, plus a learned position."""

    def __init__(self, tokens: int, features: int, width: int):
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.position = nn.Parameter(torch.zeros(1, tokens, width))

    def forward(self, x):
        return self.embed(x) + self.position


class _PoolHead(nn.Module):
    """The pre-norm stack's final LayerNorm, the mean over tokens, then the
    classifier (without the norm the residual stream reaches the classifier
    unscaled, and SGD at the driver's learning rate diverges from width 256)."""

    def __init__(self, width: int, classes: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.norm(x).mean(1))


def transformer(input_shape, classes: int, width: int, layers: int = 2) -> nn.Sequential:
    """A pre-norm transformer encoder over a sequence of feature vectors
    (input_shape = (tokens, features)), mean-pooled into a classifier; an
    nn.Sequential (embedding, the encoder layers, pooling and classifier), so
    a pipeline can split it between layers."""
    tokens, features = input_shape
    heads = 4 if width % 4 == 0 else 1
    embed = _Embed(tokens, features, width)
    layer = nn.TransformerEncoderLayer(
        width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
    )
    blocks = [copy.deepcopy(layer) for _ in range(layers)]  # as nn.TransformerEncoder: copies of one layer
    return nn.Sequential(embed, *blocks, _PoolHead(width, classes))


def build(name: str, input_shape, classes: int, width: int) -> nn.Module:
    if name == "mlp":
        return mlp(input_shape, classes, width)
    if name == "cnn":
        return cnn(input_shape, classes, width)
    if name == "cnn-fc":
        return cnn_fc(input_shape, classes, width)
    if name == "resnet":
        return resnet(input_shape, classes, width)
    if name == "transformer":
        return transformer(input_shape, classes, width)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def param_bytes(model: nn.Module) -> int:
    """Bytes of gradient one step allreduces (all trainable parameters)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
