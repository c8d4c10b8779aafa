"""The search space of ``tinytrain plan`` and the separable gain model over it.

A point (``Choice``) is: the biases of the last ``k`` layers (k >= 1: the classifier's bias is always
updated), a ratio r_i in {0, 1/8, 1/4, 1/2, 1} of output channels for each layer i below the classifier,
whose weights are always updated in full, and the remainder bits every trained int8 weight keeps (0, 4 or 8: a
whole-plan choice, its bytes counted by the memory check; the gain model does not see it, the finalists' training
does). Its plan is a version-1 plan (training/sparse.py); which channels
a ratio selects is ``sparse.select_channels``, the function the simulator and the code generator use.

The gain model (MCUNetV3 eq. 2): gain(choice) = Δb[k] + Σ_i Δw[i, r_i] with Δb[1] = 0 and Δw[i, 0] = 0,
each Δ measured alone over the classifier-only baseline (measure.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.training.sparse import DEFAULT_REMAINDER_BITS, RATIOS, Plan, WeightUpdate, layers

WEIGHT_RATIOS = tuple(sorted(RATIOS))  # 1/8, 1/4, 1/2, 1


def default_bias_ks(n: int) -> tuple[int, ...]:
    """The k values whose bias contribution is measured: every k up to 6, even k up to 16, every 4th up to
    n, and n (all layers) — the gain of bias updates grows smoothly with k, a fine grid near the output
    (where budgets allow it) is what matters."""
    ks = set(range(1, min(n, 6) + 1)) | set(range(8, min(n, 16) + 1, 2)) | set(range(20, n + 1, 4)) | {n}
    return tuple(sorted(ks))


@dataclass(frozen=True)
class Choice:
    k: int = 1
    weights: tuple[tuple[int, float], ...] = ()  # (layer, ratio), sorted by layer, ratio > 0, no classifier
    bits: int = DEFAULT_REMAINDER_BITS  # the plan's remainder_bits

    def key(self) -> str:
        bits = "" if self.bits == DEFAULT_REMAINDER_BITS else f"|r{self.bits}"
        return f"b{self.k}" + "".join(f"|w{i}:{r:g}" for i, r in self.weights) + bits


@dataclass(frozen=True)
class Space:
    """The layers of a model a plan may touch. ``classifier`` is the last layer, updated by every plan."""

    n_layers: int
    bias_ks: tuple[int, ...]
    weight_layers: tuple[int, ...]  # layers (below the classifier) whose weights may be updated

    @property
    def classifier(self) -> int:
        return self.n_layers - 1

    @classmethod
    def of(cls, graph, bias_ks: tuple[int, ...] | None = None) -> Space:
        n = len(layers(graph))
        ks = tuple(k for k in (bias_ks or default_bias_ks(n)) if 1 <= k <= n)
        return cls(n, tuple(sorted(set(ks) | {1})), tuple(range(n - 1)))

    def plan(self, choice: Choice, lr: float, bias_lr: float | None = None, head_lr: float | None = None) -> Plan:
        weights = tuple(WeightUpdate(i, float(r)) for i, r in choice.weights) + (WeightUpdate(self.classifier, 1.0),)
        return Plan(choice.k, tuple(sorted(weights, key=lambda w: w.conv)), "first", lr, bias_lr, head_lr,
                    remainder_bits=choice.bits)

    def last_k(self, n: int, bits: int = DEFAULT_REMAINDER_BITS, ratio: float = 1.0) -> Choice:
        """The ``last-k:N`` preset: biases of the last n layers and the weights of ``ratio`` of each one's output
        channels (n = 1: the classifier alone; its weights are always updated in full)."""
        return Choice(n, tuple((i, float(ratio)) for i in range(self.n_layers - n, self.classifier)), bits)

    # the single-option plans the contributions are measured with
    def bias_option(self, k: int) -> Choice:
        return Choice(k)

    def weight_option(self, layer: int, ratio: float) -> Choice:
        return Choice(1, ((layer, float(ratio)),))


@dataclass(frozen=True)
class Gains:
    """Measured contributions (accuracy points as fractions): ``bias[k]``, ``weight[(layer, ratio)]``.
    Options that were not measured (over the budget alone, or out of time) are absent: not in the space."""

    bias: dict[int, float]
    weight: dict[tuple[int, float], float]

    def score(self, choice: Choice) -> float:
        return self.bias[choice.k] + sum(self.weight[(i, r)] for i, r in choice.weights)

    def options(self, layer: int) -> list[float]:
        """Measured ratios of a layer (ascending)."""
        return sorted(r for (i, r) in self.weight if i == layer)

    @property
    def layers(self) -> list[int]:
        return sorted({i for i, _ in self.weight})
