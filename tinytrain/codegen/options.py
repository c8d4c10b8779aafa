"""What the code generator is asked for besides the graph and its arena layout: ``EmitOptions``, owned by codegen."""

from __future__ import annotations

from dataclasses import dataclass

from tinytrain.training.finite import GradientProof


@dataclass(frozen=True)
class EmitOptions:
    """``target``: the core the C is for (tinytrain/cores.py; "" a host build). ``plain``: the convolutions whose
    kernels read the int8 weight, no table derived from it (codegen/flash.py chooses them when the tables would not
    fit the flash). ``proof``: a training step's finite-gradient proof (training/finite.py), computed once per
    compile; None: the emitter proves it itself."""

    target: str = ""
    plain: tuple[str, ...] = ()
    proof: GradientProof | None = None
