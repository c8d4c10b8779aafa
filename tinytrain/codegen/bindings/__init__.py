"""C template bindings: one module per op, mirroring ``tinytrain/ops/``; a binding turns a node into a call of a
specialized kernel.

A binding decides the kernel family (a template ``codegen/templates/kernels/<family>.c.j2``), the template
parameters that specialize it (kernel size, stride, padding, variant) and the kernel's parameter list together with
the call's arguments (``context.Signature``), so signature and call come from one place. What varies per layer at
run time (sizes, zero points, clamp range) is passed as plain ints; what shapes the loops is a template parameter.
Kernels with the same name are the same code and are emitted once.

An op's module binds the op and everything derived from it: ``conv2d.py`` holds the forward, both gradients and
the weight gradient fused with its update. Each module exports ``BINDINGS`` (op name -> binding); ``BINDINGS``
here is collected from every module of this package, so adding an op adds a module and nothing is listed by hand.
``common.py`` holds what several bindings share.

Every binding reads the node and its tensors through the emitter's context (``ctx``): ``ctx.tensor(name)``,
``ctx.act(name)`` (an int8 pointer into the arena), ``ctx.const(name)`` (a frozen graph constant in flash) and
``ctx.table(node, what, values)`` (a derived table in flash). The training step's context adds ``ctx.fp(name)``
(an fp32 tensor in the arena), ``ctx.bits(name)`` (a packed uint8 clamp mask in the arena), ``ctx.state(name)`` (a
tensor the step updates in place: the SRAM copy of a trainable weight or bias, or a momentum buffer),
``ctx.scalar(name)`` (the C expression of an int32 graph input of one element: the label or the step counter) and
``ctx.scratch(node)`` (the fp32 scratch the memory plan reserved for the node's kernel, ``OpDef.scratch``).

Requantization rounds as the node's ``Requant`` says: the template parameter ``rq`` names the C helper
(``tt_requantize``, TFLite's double rounding, ``tt_requantize_single``, TFLITE_SINGLE_ROUNDING, or
``tt_requantize_fp32`` / ``tt_requantize_fp32_wide``, onnxruntime's float32 requantization in integers, the
first for shifts in -32..-2 only); single-rounding kernels carry ``_sr`` in their name, float32-rounding ones
``_f32`` (``_f32w``). Every fp32 kernel reads saved int8 activations and int8 weights and dequantizes them on the
fly, with the float32 scale of the simulator (``ops/conv2d.py: dequantize_input / dequantize_weight``).
"""

from __future__ import annotations

import importlib
import pkgutil

from tinytrain.codegen.context import Binding


def _collect() -> dict[str, Binding]:
    """Op name -> binding, from the ``BINDINGS`` of every module of this package (``common`` has none)."""
    found: dict[str, Binding] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for op, binding in getattr(module, "BINDINGS", {}).items():
            if op in found:
                raise AssertionError(f"two bindings of op {op!r} (codegen/bindings/{info.name}.py and another)")
            found[op] = binding
    return found


BINDINGS: dict[str, Binding] = _collect()
