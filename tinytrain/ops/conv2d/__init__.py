"""2-D convolution, int8: regular, depthwise (groups = C_in, any channel multiplier) and pointwise.

x (N,H,W,C_in) int8, w (C_out,KH,KW,C_in/groups) int8, bias (C_out,) int32 or absent.
acc[n,y,x,o] = bias[o] + sum (x - zx) * (w - zw); y = clamp(MBQM(acc, m[o], shift[o]) + zy).

Backward (fp32, real values; forward saves int8 x and y): g_z = clamp_mask(g_y, y);
conv2d_grad_input: g_x = conv^T(g_z, s_w (w - zw)); conv2d_grad_weight: g_w[o] = sum g_z[..o] * s_x (x - zx)
over the selected output channels; bias_grad: g_b = sum g_z.

The package: forward.py (the int8 forward and its memory promises), backward.py (the fp32 gradients), integer.py
(the integer forms of the gradients: plan "backward": "int"), importers.py (the ONNX and TFLite readers, the exporter,
the twin).
"""

from __future__ import annotations

from tinytrain.ops import OpDef, OpDoc, Resize, TfliteRead, integer_form
from tinytrain.ops.conv2d import importers, integer
from tinytrain.ops.conv2d.backward import (BLOCK_SCRATCH_BYTES, Conv2dGradInputAttrs, Conv2dGradWeightAttrs, backward,
                                           dequantize_input, dequantize_weight, grad_input_block, grad_input_bound,
                                           grad_input_macs, grad_input_min_read, grad_input_overwrites,
                                           grad_input_reference, grad_input_scratch, grad_input_shapes,
                                           grad_weight_bound, grad_weight_macs, grad_weight_reference,
                                           grad_weight_shapes, input_magnitude, weight_factors, weight_magnitude)
from tinytrain.ops.conv2d.forward import (Conv2dAttrs, accumulate, infer_shapes, macs, min_read, output_hw,
                                          reference, row_window)

__all__ = ["BLOCK_SCRATCH_BYTES", "Conv2dAttrs", "Conv2dGradInputAttrs", "Conv2dGradWeightAttrs", "OPS", "accumulate",
           "dequantize_input", "dequantize_weight", "grad_input_block", "grad_input_min_read", "input_magnitude",
           "output_hw", "weight_factors", "weight_magnitude"]

DOC = OpDoc("CONV_2D, DEPTHWISE_CONV_2D", "Conv / QLinearConv", "int32 acc, requantize", "input and weight gradients",
            "input (int8), output as a 1-bit clamp mask", in_place="depthwise")
OP = OpDef("conv2d", Conv2dAttrs, infer_shapes, reference, macs, backward=backward, min_read=min_read,
           rows=row_window, resize=Resize(stride=lambda a, shape: a.stride), export=importers.export,
           twin=importers.twin, doc=DOC, layer=True)
GRAD_INPUT = OpDef("conv2d_grad_input", Conv2dGradInputAttrs, grad_input_shapes, grad_input_reference, grad_input_macs,
                   min_read=grad_input_min_read, scratch=grad_input_scratch, overwrites=grad_input_overwrites,
                   bound=grad_input_bound, integer=integer.conv_input_gradient)
GRAD_WEIGHT = OpDef("conv2d_grad_weight", Conv2dGradWeightAttrs, grad_weight_shapes, grad_weight_reference,
                    grad_weight_macs, bound=grad_weight_bound,
                    integer=integer_form("conv2d_grad_weight_int", integer.weight_gradient_scale))
GRAD_WEIGHT_INT = OpDef("conv2d_grad_weight_int", Conv2dGradWeightAttrs, integer.grad_weight_int_shapes,
                        integer.grad_weight_int_reference, grad_weight_macs, bound=integer.grad_weight_int_bound)
GRAD_INPUT_INT = OpDef("conv2d_grad_input_int", integer.Conv2dGradInputIntAttrs, integer.shapes, integer.reference,
                       integer.macs, bound=integer.bound)
OPS = (OP, GRAD_INPUT, GRAD_WEIGHT, GRAD_WEIGHT_INT, GRAD_INPUT_INT)

ONNX = {"Conv": importers.onnx_conv}
ONNX_QOPERATOR = {"QLinearConv": importers.onnx_qlinear_conv}
TFLITE = {"CONV_2D": TfliteRead(importers.tflite_conv, importers._CONV_OPTIONS, required=2, constants=(1, 2)),
          "DEPTHWISE_CONV_2D": TfliteRead(importers.tflite_depthwise_conv, importers._DEPTHWISE_OPTIONS, required=2,
                                          constants=(1, 2))}
