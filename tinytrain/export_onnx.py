"""IR graph -> int8 QDQ ONNX (opset 18), the form onnxruntime ``quantize_static(quant_format=QDQ)`` writes.

``graph_to_onnx(graph)`` is the inverse of the ONNX QDQ frontend (frontends/onnx_qdq.py): the result passes
``onnx.checker`` (full check), carries inferred shapes, runs in onnxruntime and imports back through
``load_model``. The model it writes:

- input: the float32 NCHW tensor (batch dimension symbolic, ``batch``), named like the IR input, followed by
  ``QuantizeLinear(s, zp)`` with the IR input's quantization. Feed it the dequantized int8 input
  ``s * (q - zp)`` and its QuantizeLinear reproduces ``q`` exactly.
- every int8 op as ``DequantizeLinear -> float op -> QuantizeLinear`` with the output tensor's scale and zero
  point. Activations are per-tensor int8 (scalar float32 scale, int8 zero point), named like their IR tensors.
  Weights are int8 initializers (Conv OIHW, Gemm (C_out, K) with transB=1) with a per-channel
  DequantizeLinear along axis 0, zero points kept (non-zero only for models imported from uint8); biases are
  int32 with scale s_x * s_w[c] and zero point 0.
- each op as its module's ``OpDef.export`` writes it (the ONNX op it is written as: docs/guide/ops.md; e.g.
  conv2d -> Conv with group = C_in for depthwise, mean -> GlobalAveragePool or ReduceMean, requantize ->
  DequantizeLinear -> QuantizeLinear; a table op as its float op, which onnxruntime recomputes in float32 from a
  TFLite import's fixed-point table: up to 1 LSB apart; ``const_affine`` as a Gather of its int8 table, exact, which
  runs in onnxruntime but does not re-import; ``float_add`` as its Adds with TFLite's QUANTIZE rounding built from
  standard ops, ``q_half_away``, exact, which does not re-import either). A fused clamp narrower than what the output quantization
  already allows (ReLU6, ReLU with zp > -128) becomes a ``Clip`` between the op and its QuantizeLinear, at the
  real values of the clamp bounds.
- reshape -> Reshape when ONNX's NCHW order and the IR's NHWC order agree (e.g. (N,1,1,C) -> (N,C));
  otherwise the data is transposed explicitly (Transpose to NHWC, Reshape, Transpose back to NCHW when the
  result is rank 4). The ONNX frontend does not read Transpose: such models run in onnxruntime but do not
  re-import.
- output: the int8 tensor after the last QuantizeLinear (no trailing DequantizeLinear), so users compare
  quantized outputs bit for bit; dequantize with the output's scale and zero point for real values.

Arithmetic: the exported model's requantization is defined by the tensors' scales (onnxruntime computes
each op in float, or in integers with a float requantization, and rounds half to even); the IR's fixed-point
multipliers are not written (the frontend derives them from the scales on import). Outputs therefore differ
from the simulator by rounding where a value lies at a rounding boundary (design.md section 4: at most
1 LSB per op; differences can compound through a deep network). A graph whose multipliers do not follow
from its scales (some synthetic test graphs) is exported with its scales' arithmetic.

uint8 graphs (``Graph.uint8_input`` / ``uint8_output``: TF1, NNCF models) are exported in their internal int8 form: activations and
weights int8 with the zero points shifted by -128 (weights keep their non-zero zero points); the real
values, and so the float input and the dequantized output, are unchanged. An int8 output equals the
source model's uint8 output minus 128.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinytrain.version import __version__
from tinytrain.errors import UnsupportedModelError
from tinytrain.frontends.onnx.values import onnx_shape, reshape_keeps_order
from tinytrain.ir import DType, Graph, Node, Tensor
from tinytrain.ops import all_ops, get_op
from tinytrain.names import unique_name
from tinytrain.outputs import write_file

OPSET = 18
IR_VERSION = 9  # onnx 1.14 / onnxruntime >= 1.15 load it; opset 18 needs >= 8
BATCH = "batch"
_ELEM = {DType.INT8: TensorProto.INT8, DType.UINT8: TensorProto.UINT8, DType.INT32: TensorProto.INT32,
         DType.FLOAT32: TensorProto.FLOAT}
TO_NCHW = (0, 3, 1, 2)


def graph_to_onnx(graph: Graph) -> onnx.ModelProto:
    """The int8 QDQ ONNX model of a forward IR graph (see the module docstring for the form).

    Graph outputs are the int8 tensors after their QuantizeLinear: compare quantized outputs; an output's
    real value is ``scale * (q - zero_point)`` with the parameters of its QuantizeLinear. Raises
    UnsupportedModelError for graphs that are not forward int8 graphs (training graphs, several inputs).
    """
    return _Exporter(graph).run()


def save_onnx(model: onnx.ModelProto, path: str | Path) -> None:
    """Write ``model`` to ``path`` all or nothing, never over a file that is not an ONNX model tinytrain wrote
    (tinytrain/outputs)."""
    write_file(path, model.SerializeToString(), "onnx")


class _Exporter:
    """Writes a graph as ONNX; each op's ``OpDef.export(exporter, node)`` writes its node with the methods below
    (``dq`` / ``q`` around the float op, ``clip`` for a narrow clamp, ``weight`` / ``bias`` for the constants,
    ``node`` / ``init`` for nodes and initializers)."""

    onnx_shape = staticmethod(onnx_shape)
    keeps_order = staticmethod(reshape_keeps_order)

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.used: set[str] = set(graph.tensors)
        self.names: dict[str, str] = {}  # IR tensor -> ONNX value holding it (int8, or float for float tensors)
        self.dq_of: dict[str, str] = {}  # IR int8 tensor -> ONNX float value of its DequantizeLinear
        self.qparams: dict[str, tuple[str, str]] = {}

    # ----- names, initializers, nodes
    def fresh(self, hint: str) -> str:
        name = unique_name(hint, self.used)
        self.used.add(name)
        return name

    def init(self, hint: str, array: np.ndarray, exact: bool = False) -> str:
        """An initializer named ``hint`` made unique, or exactly ``hint`` (an IR constant's own name)."""
        name = hint if exact else self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))  # keeps 0-d scalars
        return name

    def node(self, op: str, inputs: list[str], hint: str, label: str, output: str | None = None, **attrs) -> str:
        out = output if output is not None else self.fresh(hint)
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"{label}/{op}"), **attrs))
        return out

    def unsupported(self, msg: str) -> UnsupportedModelError:
        return UnsupportedModelError(f"{self.g.name}: cannot export to ONNX: {msg}")

    # ----- quantization
    def act_qparams(self, t: Tensor) -> tuple[str, str]:
        """Scalar scale / zero-point initializers of a per-tensor int8 activation (one pair per tensor)."""
        if t.name not in self.qparams:
            if t.dtype != DType.INT8 or t.quant is None or t.quant.per_channel:
                raise self.unsupported(f"tensor {t.name} is {t.dtype.value} "
                                       f"{'per-channel' if t.quant and t.quant.per_channel else 'unquantized'}; "
                                       f"activations must be int8 quantized per tensor")
            self.qparams[t.name] = (self.init(f"{t.name}_scale", np.array(t.quant.s, np.float32)),
                                    self.init(f"{t.name}_zero_point", np.array(t.quant.zp, np.int8)))
        return self.qparams[t.name]

    def dq(self, ir: str, label: str) -> str:
        """The float value of an IR tensor: its DequantizeLinear (shared by all consumers), or itself if float."""
        t = self.g.tensors[ir]
        if t.dtype == DType.FLOAT32:
            return self.names[ir]
        if ir not in self.dq_of:
            s, z = self.act_qparams(t)
            self.dq_of[ir] = self.node("DequantizeLinear", [self.names[ir], s, z], f"{ir}_dequantized", label)
        return self.dq_of[ir]

    def q(self, f: str, ir_out: str, label: str, output: str | None = None) -> None:
        """QuantizeLinear of float value f into the IR output tensor's int8 value (named like the IR tensor)."""
        s, z = self.act_qparams(self.g.tensors[ir_out])
        self.names[ir_out] = self.node("QuantizeLinear", [f, s, z], "", label, output=output or ir_out)

    def q_half_away(self, f: str, ir_out: str, label: str) -> None:
        """``q`` rounding ties away from zero, as TFLite's QUANTIZE does (ONNX's QuantizeLinear rounds them to
        even), from standard ops: v = f / s (float32 division, as TFLite), r = Round(v) but at an exact tie
        (|v| - Floor(|v|) == 0.5, a subtraction that is exact) Sign(v) * (Floor(|v|) + 1); then
        QuantizeLinear(r, 1, z) adds the zero point and saturates (r is an integer: no rounding left)."""
        s, z = self.act_qparams(self.g.tensors[ir_out])
        one, half = (self.init(f"{ir_out}_{k}", np.array(v, np.float32)) for k, v in (("one", 1.0), ("half", 0.5)))
        v = self.node("Div", [f, s], f"{ir_out}_scaled", label)
        a = self.node("Abs", [v], f"{ir_out}_abs", label)
        fl = self.node("Floor", [a], f"{ir_out}_floor", label)
        tie = self.node("Equal", [self.node("Sub", [a, fl], f"{ir_out}_fraction", label), half], f"{ir_out}_tie",
                        label)
        away = self.node("Mul", [self.node("Sign", [v], f"{ir_out}_sign", label),
                                 self.node("Add", [fl, one], f"{ir_out}_up", label)], f"{ir_out}_away", label)
        r = self.node("Where", [tie, away, self.node("Round", [v], f"{ir_out}_even", label)], f"{ir_out}_rounded",
                      label)
        self.names[ir_out] = self.node("QuantizeLinear", [r, one, z], "", label, output=ir_out)

    def clip(self, f: str, ir_out: str, act_min: int, act_max: int, label: str) -> str:
        """Clip to the real values of a clamp range when it is narrower than the int8 range."""
        q = self.g.tensors[ir_out].quant
        bounds = [None if act_min <= -128 else (act_min - q.zp) * q.s,
                  None if act_max >= 127 else (act_max - q.zp) * q.s]
        if bounds == [None, None]:
            return f
        ins = [f] + ["" if b is None else self.init(f"{ir_out}_clip_{k}", np.array(b, np.float32))
                     for k, b in zip(("min", "max"), bounds)]
        while ins[-1] == "":
            ins.pop()
        return self.node("Clip", ins, f"{ir_out}_clipped", label)

    def weight(self, ir: str, label: str) -> str:
        """DequantizeLinear of an int8 weight (IR (C_out,KH,KW,C_in/g) -> OIHW; (C_out,K) as is), axis 0."""
        t = self.g.tensors[ir]
        if t.dtype != DType.INT8 or t.quant is None:
            raise self.unsupported(f"weight {ir} is {t.dtype.value}{'' if t.quant else ' without quantization'}; "
                                   f"weights must be quantized int8")
        data = t.data.transpose(TO_NCHW) if t.data.ndim == 4 else t.data
        name = self.init(ir, data, exact=True)
        if t.quant.per_channel:
            if t.quant.axis != 0:
                raise self.unsupported(f"weight {ir} is quantized along axis {t.quant.axis}, not its output channels")
            s = np.asarray(t.quant.scale, np.float32)
            z = np.asarray(t.quant.zero_point, np.int8)
            attrs = {"axis": 0}
        else:
            s, z, attrs = np.array(t.quant.s, np.float32), np.array(t.quant.zp, np.int8), {}
        s_name, z_name = self.init(f"{ir}_scale", s), self.init(f"{ir}_zero_point", z)
        return self.node("DequantizeLinear", [name, s_name, z_name], f"{ir}_dequantized", label, **attrs)

    def bias(self, node: Node, label: str) -> list[str]:
        """DequantizeLinear of the int32 bias, scale s_x * s_w[c] (the IR's bias scale when it has one)."""
        if len(node.inputs) < 3 or not node.inputs[2]:
            return []
        t = self.g.tensors[node.inputs[2]]
        x, w = self.g.tensors[node.inputs[0]], self.g.tensors[node.inputs[1]]
        cout = t.shape[0]
        if t.quant is not None:
            s = np.broadcast_to(np.asarray(t.quant.scale, np.float64), (cout,))
        else:
            s = x.quant.s * np.broadcast_to(np.asarray(w.quant.scale, np.float64), (cout,))
        name = self.init(t.name, t.data.astype(np.int32).reshape(cout), exact=True)
        s_name = self.init(f"{t.name}_scale", s.astype(np.float32))
        z_name = self.init(f"{t.name}_zero_point", np.zeros(cout, np.int32))
        return [self.node("DequantizeLinear", [name, s_name, z_name], f"{t.name}_dequantized", label, axis=0)]

    # ----- driving
    def value_info(self, name: str, t: Tensor) -> onnx.ValueInfoProto:
        shape = [BATCH] + list(onnx_shape(t.shape)[1:])
        return helper.make_tensor_value_info(name, _ELEM[t.dtype], shape)

    def run(self) -> onnx.ModelProto:
        g = self.g
        if len(g.inputs) != 1:
            raise self.unsupported(f"the graph has {len(g.inputs)} inputs; only single-input forward graphs export")
        x = g.tensors[g.inputs[0]]
        if x.dtype == DType.FLOAT32:
            self.names[x.name] = x.name
            graph_input = self.value_info(x.name, x)
        else:
            float_in = x.name
            graph_input = self.value_info(float_in, Tensor(float_in, x.shape, DType.FLOAT32, x.role))
            # the float input keeps the IR name (as the frontend names the IR input), the int8 one gets a new name
            self.q(float_in, x.name, "input", output=self.fresh(f"{x.name}_quantized"))
        for n in g.nodes:
            export = get_op(n.op).export
            if export is None:
                exported = ", ".join(name for name, op in all_ops().items() if op.export)
                raise self.unsupported(f"node {n.name} is a {n.op}; only forward int8 ops export ({exported})")
            export(self, n)
        outputs = [self.value_info(self.names[o], g.tensors[o]) for o in g.outputs]
        doc = ("int8 QDQ model written by tinytrain from its IR. Input: float32 NCHW, quantized by the first "
               "QuantizeLinear. Outputs: the int8 tensors after the last QuantizeLinear (quantized values).")
        if g.uint8_input or g.uint8_output:
            ends = " and ".join(e for e, u in (("input", g.uint8_input), ("output", g.uint8_output)) if u)
            doc += f" The source model's {ends} was uint8; exported as int8 (uint8 value - 128, same real values)."
        gp = helper.make_graph(self.nodes, g.name or "tinytrain", [graph_input], outputs, self.inits, doc_string=doc)
        model = helper.make_model(gp, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tinytrain",
                                  producer_version=__version__, doc_string=doc)
        model.ir_version = IR_VERSION
        helper.set_model_props(model, {**g.metadata, "tinytrain.source_sha256": g.source_sha256,
                                       "tinytrain.source_uint8": str(g.uint8_input or g.uint8_output).lower()})
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
        onnx.checker.check_model(model, full_check=True)
        return model
