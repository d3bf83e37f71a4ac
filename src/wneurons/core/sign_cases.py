"""The four gate x up sign cases of a gated MLP's neurons (as GLUScope shows them).

In a gated MLP the neuron's output is ``act(g) * u``: ``g`` its gate pre-activation (the paper's pre-activation,
the row of ``gate_proj``) and ``u`` its up projection. Each token falls in one of four cases by the raw signs of
``g`` and ``u`` (``-``: value < 0; ``+``: value >= 0, as the explorer's histogram splits by sign). Clamping the
negative gate pre-activations to zero (the paper's ablation; SiLU and GELU map 0 to 0) removes exactly the
products of the two ``gate-`` cases; how often they arise and how large their products are says what it takes away.

:class:`SignCaseAccumulator` reduces batches of ``(g, u, act(g) * u)`` of chosen neurons ([tokens, neurons] torch
tensors, on any device) to per-neuron counts, sums of ``|act(g) * u|`` and of ``act(g) * u``, and the positions of the
``k`` largest ``|act(g) * u|`` per case; :meth:`SignCaseAccumulator.table` turns them into one row per (neuron, case).
Batches are reduced as they come (no per-token or per-neuron Python loop), so memory does not grow with the text.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import torch

# Case index = 2 * (gate < 0) + (up < 0).
CASES = ("gate+ up+", "gate+ up-", "gate- up+", "gate- up-")
GATE_SIGNS = ("+", "+", "-", "-")
UP_SIGNS = ("+", "-", "+", "-")


def case_index(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Each value's sign case (0..3, the index into :data:`CASES`): ``2 * (gate < 0) + (up < 0)``."""
    return 2 * (gate < 0).long() + (up < 0).long()


class SignCaseAccumulator:
    """Counts, sums and top positions of the four sign cases of ``n_neurons`` neurons over batches of tokens."""

    def __init__(self, n_neurons: int, k: int, device: torch.device | str = "cpu") -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.n, self.k, self.tokens = n_neurons, k, 0
        self.count = torch.zeros(n_neurons * 4, dtype=torch.int64, device=device)
        self.abs_sum = torch.zeros(n_neurons * 4, dtype=torch.float64, device=device)
        self.sum = torch.zeros(n_neurons * 4, dtype=torch.float64, device=device)
        # Per case: the k largest |product| so far [k, n], their signed products and token positions (-1: none yet).
        self.top_abs = torch.full((4, k, n_neurons), -torch.inf, dtype=torch.float32, device=device)
        self.top_product = torch.zeros((4, k, n_neurons), dtype=torch.float32, device=device)
        self.top_position = torch.full((4, k, n_neurons), -1, dtype=torch.int64, device=device)

    def update(self, gate: torch.Tensor, up: torch.Tensor, product: torch.Tensor, positions: torch.Tensor) -> None:
        """Add a batch: ``gate``, ``up``, ``product`` = act(gate) * up, each [tokens, n_neurons]; ``positions``
        [tokens], each token's position in the text (what the top positions report)."""
        if not gate.shape == up.shape == product.shape or gate.ndim != 2 or gate.shape[1] != self.n:
            shapes = [tuple(t.shape) for t in (gate, up, product)]
            raise ValueError(f"gate, up and product must be [tokens, {self.n}]; got {shapes}")
        device = self.count.device
        case = case_index(gate, up).to(device)
        product = product.to(device=device, dtype=torch.float32)
        flat = (torch.arange(self.n, device=device) * 4 + case).reshape(-1)  # each value's (neuron, case) slot
        magnitude = product.abs()
        self.count.index_add_(0, flat, torch.ones_like(flat))
        self.abs_sum.index_add_(0, flat, magnitude.reshape(-1).double())
        self.sum.index_add_(0, flat, product.reshape(-1).double())
        self.tokens += gate.shape[0]
        positions = positions.to(device=device, dtype=torch.int64)[:, None].expand(-1, self.n)
        for c in range(4):  # four cases, each one top-k over [k + tokens, neurons]
            score = torch.cat([self.top_abs[c], torch.where(case == c, magnitude, -torch.inf)])
            best, rows = torch.topk(score, self.k, dim=0)
            self.top_abs[c] = best
            self.top_product[c] = torch.cat([self.top_product[c], product]).gather(0, rows)
            position = torch.cat([self.top_position[c], positions]).gather(0, rows)
            self.top_position[c] = torch.where(best > -torch.inf, position, -1)  # a token of another case: none

    def table(self, layer: int, neurons: np.ndarray | list[int]) -> pl.DataFrame:
        """One row per (neuron, case), neurons in the order given to the accumulator: ``layer``, ``neuron``,
        ``case`` (:data:`CASES`), ``gate_sign``, ``up_sign``, ``count`` (tokens), ``fraction`` (of all tokens),
        ``mean_abs_product`` (mean |act(g) * u| over the case's tokens; null where it has none), ``abs_share`` (the
        case's part of the neuron's sum of |act(g) * u|), ``mean_product`` (signed), and ``top_positions`` /
        ``top_products``: the text positions of the case's largest |act(g) * u| and their products, largest first
        (at most k; fewer where the case has fewer tokens)."""
        neurons = np.asarray(neurons, dtype=np.int64)
        if neurons.size != self.n:
            raise ValueError(f"{neurons.size} neuron ids for an accumulator of {self.n}")
        count = self.count.reshape(self.n, 4).cpu().numpy()
        abs_sum = self.abs_sum.reshape(self.n, 4).cpu().numpy()
        total = self.sum.reshape(self.n, 4).cpu().numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_abs = np.where(count > 0, abs_sum / np.maximum(count, 1), np.nan)
            mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
            share = abs_sum / abs_sum.sum(axis=1, keepdims=True)
        positions = self.top_position.permute(2, 0, 1).reshape(-1, self.k).cpu().numpy()  # [(neuron, case), k]
        products = self.top_product.permute(2, 0, 1).reshape(-1, self.k).cpu().numpy().astype(np.float64)
        products[positions < 0] = np.nan  # slots a case with fewer than k tokens never filled
        return pl.DataFrame(
            {
                "layer": np.full(self.n * 4, layer, dtype=np.int64),
                "neuron": np.repeat(neurons, 4),
                "case": np.tile(CASES, self.n),
                "gate_sign": np.tile(GATE_SIGNS, self.n),
                "up_sign": np.tile(UP_SIGNS, self.n),
                "count": count.reshape(-1),
                "fraction": count.reshape(-1) / max(self.tokens, 1),
                "mean_abs_product": mean_abs.reshape(-1),
                "abs_share": share.reshape(-1),
                "mean_product": mean.reshape(-1),
                "top_positions": pl.Series(positions, dtype=pl.Array(pl.Int64, self.k)),
                "top_products": pl.Series(products, dtype=pl.Array(pl.Float64, self.k)),
            }
        ).with_columns(
            pl.col("mean_abs_product", "abs_share", "mean_product").fill_nan(None),
            pl.col("top_positions").arr.to_list().list.filter(pl.element() >= 0),
            pl.col("top_products").arr.to_list().list.filter(pl.element().is_not_nan()),
        )
