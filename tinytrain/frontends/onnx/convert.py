"""The converter of the ONNX frontends (the QDQ reader in qdq.py, the QOperator reader in qoperator.py).

A model is converted by walking its nodes in topological order. Every ONNX value is mapped to one of

- :class:`Act`: an integer (int8/uint8) activation of the ONNX graph, backed by an IR int8 tensor
  (ONNX rank-4 tensors are NCHW, their IR tensors NHWC; other ranks keep their layout);
- :class:`FVal`: a float value between a DequantizeLinear and a QuantizeLinear. It is lazy: a
  float op on dequantized inputs (Conv, Gemm, Add, ReduceMean, ...) becomes a :class:`Pending`
  computation that is emitted as an integer IR node only when a QuantizeLinear gives it an output
  scale and zero point (``Relu``/``Clip`` on the way tighten its clamp range, a reshape is applied
  after it). This one mechanism covers QDQ patterns (DQ -> op -> Q) and the float islands that
  onnxruntime leaves in QOperator models (DQ -> ReduceMean -> Reshape -> Q).
- :class:`SoftmaxOut`: the result of a trailing Softmax (dropped, see onnx_requant).

Arithmetic, rounding and the documented deviations from onnxruntime: see requant.py. Model reading: parse.py and
constants.py; IR emission: emit.py; what handlers read and record: reader.py; the handlers: each op's module
(``tinytrain/ops/<op>.py``: ``ONNX``, ``ONNX_QOPERATOR``) and, for the quantization boundary and the clamps,
boundary.py and clamp.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import onnx
from onnx import TensorProto

from tinytrain.errors import TinyTrainError
from tinytrain.frontends.onnx.float_output import quantized_float_output
from tinytrain.frontends.onnx.reader import Reader
from tinytrain.frontends.onnx.parse import INT_ACT_TYPES, elem_type_name, graph_inputs, node_label, static_input_shape
from tinytrain.frontends.onnx.values import Act, FVal, SoftmaxOut, ir_shape, same_quant
from tinytrain.ir import DType, Graph, Node, QuantParams, Role, Tensor
from tinytrain.verify import verify

Handler = Callable[["Converter", onnx.NodeProto], None]

class Converter(Reader):
    """Builds the IR graph from an ONNX model; the format modules (qdq.py, qoperator.py) supply the op handlers."""

    def __init__(self, model: onnx.ModelProto, name: str, sha256: str, handlers: dict[str, Handler], fmt: str):
        super().__init__(model, name)
        self.sha256 = sha256
        self.handlers = handlers
        self.fmt = fmt
        self.input_act: Act | None = None
        self.ir_names: dict[str, str] = {}  # after run(): ONNX integer tensor -> IR tensor holding it
        self.input_name = ""

    # ----- driving
    def run(self) -> Graph:
        self.load_constants()
        self._bind_input()
        for node in self.graph_proto.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                continue
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            handler = self.handlers.get(key)
            if handler is None:
                supported = ", ".join(sorted(k for k in self.handlers))
                raise self.unsupported(f"unsupported ONNX op {key} (node '{node.name or node.output[0]}'): replace "
                                       f"it in the model by supported ops before quantizing, or add the op "
                                       f"(docs/guide/adding-an-op.md); the {self.fmt} frontend supports: {supported}")
            try:
                handler(self, node)
            except TinyTrainError:
                raise
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise self.malformed(f"cannot convert {node_label(node)} ({type(e).__name__}: {e}); "
                                     f"the model may be malformed") from None
        return self._finish()

    def _bind_input(self) -> None:
        inputs = graph_inputs(self.graph_proto)
        vi = inputs[0]
        self.input_name = vi.name
        shape = static_input_shape(vi, self.name)
        et = vi.type.tensor_type.elem_type
        if et == TensorProto.FLOAT:
            self.values[vi.name] = FVal("input", source=vi.name)
            self._input_shape = shape
        elif et in INT_ACT_TYPES:
            self._used_names.add(vi.name)
            act = Act(vi.name, shape, INT_ACT_TYPES[et], None)
            self.values[vi.name] = act
            self.input_act = act
        else:
            raise self.unsupported(f"input '{vi.name}' is {elem_type_name(et)}; tinytrain takes a float32 input "
                                   f"(quantized by the model's first QuantizeLinear) or an int8/uint8 input")

    def quantize_input(self, node: onnx.NodeProto, yq: QuantParams, dtype: str) -> Act:
        """QuantizeLinear of the float graph input: its output becomes the IR graph input."""
        if self.input_act is not None:
            if not same_quant(self.input_act.quant, yq) or self.input_act.dtype != dtype:
                raise self.unsupported(f"the input '{self.input_name}' is quantized twice with different parameters "
                                       f"({node_label(node)}); quantize it once")
            return self.input_act
        name = self.fresh(self.input_name)
        self.tensors[name] = Tensor(name, ir_shape(self._input_shape), DType.INT8, Role.INPUT, yq)
        self.input_act = Act(name, self._input_shape, dtype, yq)
        return self.input_act

    def _finish(self) -> Graph:
        if self.input_act is None or self.input_act.quant is None:
            raise self.unsupported(f"the input '{self.input_name}' is never quantized (no QuantizeLinear or quantized op "
                                   f"reads it); quantize the model with onnxruntime quantize_static")
        outputs: list[str] = []
        out_names: list[str] = []
        out_types: set[str] = set()
        for vi in self.graph_proto.output:
            v = self.values.get(vi.name)
            act = self._output_act(vi.name, v)
            if act.gain is not None:
                raise self.unsupported(f"graph output '{vi.name}' is quantized per channel; tinytrain's outputs have "
                                       f"one scale: quantize it per tensor")
            out_types.add(act.dtype)
            if len(out_types) > 1:
                raise self.unsupported(f"graph output '{vi.name}' is {act.dtype} but another output is "
                                       f"{(out_types - {act.dtype}).pop()}: tinytrain needs one integer type for all "
                                       f"outputs; quantize the outputs with one activation type")
            outputs.append(act.ir)
            out_names.append(vi.name)
        self._eliminate_dead(outputs)
        renames = {}
        for ir_name, onnx_name in zip(outputs, out_names):
            t = self.tensors[ir_name]
            if t.role == Role.ACTIVATION and onnx_name not in self.tensors and ir_name not in renames:
                renames[ir_name] = onnx_name
        tensors, nodes = self._renamed(renames)
        self.ir_names = {k: renames.get(v.ir, v.ir) for k, v in self.values.items()
                         if isinstance(v, Act) and renames.get(v.ir, v.ir) in tensors}
        outputs = [renames.get(o, o) for o in outputs]
        tensors = {k: (replace(t, role=Role.OUTPUT) if k in outputs and t.role == Role.ACTIVATION else t)
                   for k, t in tensors.items()}
        graph = Graph(self.name, tensors, tuple(nodes), (self.input_act.ir,), tuple(outputs), self.sha256,
                      uint8_input=self.input_act.dtype == "uint8", uint8_output=out_types == {"uint8"})
        try:
            verify(graph)
        except ValueError as e:
            raise self.malformed(f"the converted graph is inconsistent: {e}") from None
        return graph

    def _output_act(self, name: str, v) -> Act:
        if isinstance(v, Act):
            return v
        if isinstance(v, SoftmaxOut):
            return v.act
        if isinstance(v, FVal):
            if v.kind == "dq":
                return v.act
            if v.kind == "softmax":
                return v.act
            if v.kind == "pending":
                act = quantized_float_output(self, name, v.pending, self.input_act.dtype)
                self.values[name] = act
                return act
            if v.kind == "input":
                raise self.unsupported(f"graph output '{name}' is the float input itself")
        raise self.unsupported(f"graph output '{name}' is not computed from a quantized tensor")

    def _eliminate_dead(self, outputs: list[str]) -> None:
        live = set(outputs)
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(o in live for o in node.outputs):
                kept.append(node)
                live.update(i for i in node.inputs if i)
        self.nodes = kept[::-1]
        live.add(self.input_act.ir)
        self.tensors = {k: t for k, t in self.tensors.items() if k in live}

    def _renamed(self, renames: dict[str, str]) -> tuple[dict[str, Tensor], list[Node]]:
        if not renames:
            return self.tensors, self.nodes
        tensors = {renames.get(k, k): replace(t, name=renames.get(k, k)) for k, t in self.tensors.items()}
        nodes = [replace(n, inputs=tuple(renames.get(i, i) for i in n.inputs),
                         outputs=tuple(renames.get(o, o) for o in n.outputs)) for n in self.nodes]
        return tensors, nodes
