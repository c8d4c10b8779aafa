"""The C bindings of ``conv2d`` (ops/conv2d.py): the int8 forward (``forward.py``: the first of its kernel
variants that applies, one module per family: ``host.py``, ``depthwise.py``, ``pointwise.py``, ``regular.py``; the
tables they make in ``tables.py``), the fp32 input and weight gradients and the weight gradient fused with its SGD
update (``grad.py``), and the integer input gradient (``integer.py``)."""

from tinytrain.codegen.bindings.conv2d.depthwise import planar_safe
from tinytrain.codegen.bindings.conv2d.forward import conv2d
from tinytrain.codegen.bindings.conv2d.integer import conv2d_grad_input_int
from tinytrain.codegen.bindings.conv2d.grad import (PLANE_GZ_REGS, PLANE_TAPS_REGS, conv2d_grad_input,
                                                    conv2d_grad_weight, conv2d_grad_weight_int,
                                                    conv2d_grad_weight_int_sgd_update_int,
                                                    conv2d_grad_weight_sgd_update, pointwise_tile_range)
from tinytrain.codegen.context import Binding

__all__ = ["BINDINGS", "PLANE_GZ_REGS", "PLANE_TAPS_REGS", "planar_safe", "pointwise_tile_range"]

BINDINGS: dict[str, Binding] = {
    "conv2d": conv2d,
    "conv2d_grad_input": conv2d_grad_input,
    "conv2d_grad_weight": conv2d_grad_weight,
    "conv2d_grad_weight_int": conv2d_grad_weight_int,
    "conv2d_grad_weight_int_sgd_update_int": conv2d_grad_weight_int_sgd_update_int,
    "conv2d_grad_weight_sgd_update": conv2d_grad_weight_sgd_update,
    "conv2d_grad_input_int": conv2d_grad_input_int,
}
