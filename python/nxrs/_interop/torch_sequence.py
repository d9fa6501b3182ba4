"""The torch modules ``to_torch`` makes of the sequence layers torch has no module for
(section 15.8): ``PositionalEmbedding``, ``CausalSelfAttention`` (nanoGPT's) and ``TiedHead``.
An ``Embedding`` is torch's own ``nn.Embedding``. Their own module, imported once torch is
known to be installed, so that each class has one importable name (``torch.save`` of a whole
model pickles it by name) and ``from_torch`` recognises it by identity."""

from __future__ import annotations

import importlib
from typing import Any

# torch is optional, and its types are not checked here: mypy would analyse all of torch.
_torch: Any = importlib.import_module("torch")
_nn: Any = _torch.nn


class PositionalEmbedding(_nn.Module):  # type: ignore[misc]
    """nxrs's ``PositionalEmbedding(context, width)``: ``x + weight[:T]`` for a ``(batch, T,
    width)`` input, ``weight`` the learned ``(context, width)`` table ``P`` (GPT-2's ``wpe``
    applied to the positions ``0 .. T-1``)."""

    def __init__(self, context: int, width: int) -> None:
        super().__init__()
        self.weight = _nn.Parameter(_torch.empty(context, width, dtype=_torch.float32))

    def forward(self, x: Any) -> Any:
        return x + self.weight[: x.shape[1]]

    def extra_repr(self) -> str:
        return f"context={self.weight.shape[0]}, width={self.weight.shape[1]}"


class CausalSelfAttention(_nn.Module):  # type: ignore[misc]
    """nxrs's ``CausalSelfAttention(heads)`` as nanoGPT writes it: ``c_attn`` (``Linear(D, 3D,
    bias=False)``, weight ``Wqkv``: the queries, keys and values, head ``a`` in their columns
    ``a*h .. a*h+h-1``), ``scaled_dot_product_attention`` with ``is_causal=True`` (scale ``1 /
    sqrt(h)``) and ``c_proj`` (``Linear(D, D, bias=False)``, weight ``Wo``)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        # Without their random initialisation: the weights are overwritten at once.
        self.c_attn = _nn.utils.skip_init(
            _nn.Linear, width, 3 * width, bias=False, dtype=_torch.float32
        )
        self.c_proj = _nn.utils.skip_init(
            _nn.Linear, width, width, bias=False, dtype=_torch.float32
        )

    def forward(self, x: Any) -> Any:
        batch, tokens, width = x.shape

        def by_head(t: Any) -> Any:  # (batch, T, D) to (batch, heads, T, h)
            return t.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = (by_head(t) for t in self.c_attn(x).split(width, dim=2))
        o = _nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(o.transpose(1, 2).reshape(batch, tokens, width))

    def extra_repr(self) -> str:
        return f"heads={self.heads}"


class TiedHead(_nn.Module):  # type: ignore[misc]
    """nxrs's ``TiedHead()``: logits ``x @ weight.T``, ``weight`` the model's
    ``nn.Embedding``'s own parameter (the same tensor, so the tie holds in training too)."""

    def __init__(self, weight: Any) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, x: Any) -> Any:
        return _nn.functional.linear(x, self.weight)
