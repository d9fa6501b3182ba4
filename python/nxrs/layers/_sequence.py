"""The layers of sequence models (section 15.8): token and position embeddings, causal
self-attention and the head tied to the token embedding, and ``gpt``, nanoGPT's character
model built from them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nxrs._nxrs import ConfigError
from nxrs.layers._blocks import Residual
from nxrs.layers._objects import (
    GELU,
    Dense,
    Input,
    Layer,
    LayerNorm,
    _bool,
    _init,
    _int,
    _keyword,
    _optional_real,
)


@dataclass(frozen=True, init=False, repr=False)
class Embedding(Layer):
    """Token ids to vectors (PyTorch's ``Embedding``): directly after ``Input(T)``, each of a
    sample's ``T`` ids (integers in ``0 .. vocab-1``) becomes its row of the table ``E``
    (``vocab x width``), making a ``(T, width)`` sequence. ``E`` starts from ``N(0, std)``
    (``N(0, 1)``, PyTorch's, when ``std`` is not given).

    >>> Embedding(65, 128, std=0.02).to_dict()
    {'type': 'Embedding', 'vocab': 65, 'width': 128, 'std': 0.02}
    """

    vocab: int
    width: int
    std: float | None

    def __init__(self, vocab: int, width: int, std: float | None = None) -> None:
        _init(
            self,
            vocab=_int("Embedding", "vocab", vocab),
            width=_int("Embedding", "width", width),
            std=_optional_real("Embedding", "std", std),
        )

    def _arguments(self) -> list[str]:
        return [str(self.vocab), str(self.width), *_keyword("std", self.std)]


@dataclass(frozen=True, init=False, repr=False)
class PositionalEmbedding(Layer):
    """Learned positions (GPT-2's ``wpe``): row ``t`` of the table ``P`` (``context x width``)
    added to token ``t`` of a sequence of at most ``context`` tokens.

    >>> PositionalEmbedding(64, 128)
    PositionalEmbedding(64, 128)
    """

    context: int
    width: int
    std: float | None

    def __init__(self, context: int, width: int, std: float | None = None) -> None:
        _init(
            self,
            context=_int("PositionalEmbedding", "context", context),
            width=_int("PositionalEmbedding", "width", width),
            std=_optional_real("PositionalEmbedding", "std", std),
        )

    def _arguments(self) -> list[str]:
        return [str(self.context), str(self.width), *_keyword("std", self.std)]


@dataclass(frozen=True, init=False, repr=False)
class CausalSelfAttention(Layer):
    """Causal multi-head self-attention over a ``(T, D)`` sequence (nanoGPT's): a fused
    query/key/value projection ``Wqkv`` (``3D x D``), each of ``heads`` heads attending to the
    positions up to its own (softmax of the scaled scores), and an output projection ``Wo``
    (``D x D``). No biases (``bias=True`` is refused). ``std`` draws ``Wqkv`` from ``N(0,
    std)`` and ``proj_std`` ``Wo`` (``std`` when not given).

    >>> CausalSelfAttention(4, std=0.02, proj_std=0.01).to_dict()
    {'type': 'CausalSelfAttention', 'heads': 4, 'std': 0.02, 'proj_std': 0.01}
    """

    heads: int
    std: float | None
    proj_std: float | None

    def __init__(
        self,
        heads: int,
        bias: bool = False,
        std: float | None = None,
        proj_std: float | None = None,
    ) -> None:
        if _bool("CausalSelfAttention", "bias", bias):
            raise ConfigError(
                "CausalSelfAttention: bias=True is not supported: the projections have no biases"
            )
        _init(
            self,
            heads=_int("CausalSelfAttention", "heads", heads),
            std=_optional_real("CausalSelfAttention", "std", std),
            proj_std=_optional_real("CausalSelfAttention", "proj_std", proj_std),
        )

    def _arguments(self) -> list[str]:
        return [
            str(self.heads),
            *_keyword("std", self.std),
            *_keyword("proj_std", self.proj_std),
        ]


@dataclass(frozen=True, init=False, repr=False)
class TiedHead(Layer):
    """The output head tied to the token embedding: each token's logits against the rows of
    the list's ``Embedding`` table (``x Eᵀ``), so the model has one table for both ends.

    >>> TiedHead().to_dict()
    {'type': 'TiedHead'}
    """


def gpt(
    vocab: int, context: int = 64, layers: int = 4, heads: int = 4, width: int = 128
) -> list[Layer]:
    """nanoGPT's character model (section 15.8): token and learned position embeddings, then
    ``layers`` pre-norm blocks ``x + attention(ln(x))`` and ``x + mlp(ln(x))`` (a 4x wide MLP
    with the exact GELU), a final LayerNorm and the head tied to the token embedding. No
    biases; matrices from ``N(0, 0.02)``, each block's two output projections from ``N(0,
    0.02 / sqrt(2 * layers))``.

    >>> model = gpt(65)
    >>> model[:3]
    [Input(64), Embedding(65, 128, std=0.02), PositionalEmbedding(64, 128, std=0.02)]
    >>> model[3].layers[1]
    CausalSelfAttention(4, std=0.02, proj_std=0.007071067811865475)
    >>> len(model)
    13
    """
    vocab, context = _int("gpt", "vocab", vocab), _int("gpt", "context", context)
    layers, heads = _int("gpt", "layers", layers), _int("gpt", "heads", heads)
    width = _int("gpt", "width", width)
    std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
    model: list[Layer] = [
        Input(context),
        Embedding(vocab, width, std=std),
        PositionalEmbedding(context, width, std=std),
    ]
    for _ in range(layers):
        attention = CausalSelfAttention(heads, std=std, proj_std=proj_std)
        mlp = [
            Dense(4 * width, bias=False, std=std),
            GELU(),
            Dense(width, bias=False, std=proj_std),
        ]
        model.append(Residual([LayerNorm(bias=False), attention]))
        model.append(Residual([LayerNorm(bias=False), *mlp]))
    return [*model, LayerNorm(bias=False), TiedHead()]
