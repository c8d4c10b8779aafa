"""TFLite frontend: an int8 (or TF1-style uint8) .tflite model -> IR Graph, bit-exact with TFLite's kernels.

The builtin operators are read by the op modules that declare them (``TFLITE`` of ``tinytrain/ops/<op>.py``, through
the importer's methods of tensors.py); the importer itself reads QUANTIZE and DEQUANTIZE (the float boundary). Fused
NONE / RELU / RELU6 / RELU_N1_TO_1 activations become the output clamp range.

Choices (each matches what the device runs):
- Float boundary. A float32 graph input that feeds a single QUANTIZE, and a float32 graph output
  produced by a DEQUANTIZE, are dropped: the graph exchanges the int8 tensors on the other side of
  them, as the device does (users quantize with the input tensor's scale / zero point). A QUANTIZE
  between two quantized tensors becomes a ``requantize`` node.
- Requantization multipliers are computed exactly as the runtime that runs the model does:
  int8 CONV_2D / DEPTHWISE_CONV_2D (tflite-micro, per channel, also for a single scale) and every
  FULLY_CONNECTED: double(s_in) * double(s_w) / double(s_out); uint8 (TF1-style) CONV_2D /
  DEPTHWISE_CONV_2D (reference kernels, GetQuantizedConvolutionMultipler): double(float32(s_in * s_w)) /
  double(s_out). MEAN and int8->int8 QUANTIZE: s_in / s_out in double. Each rule is pinned by a test on
  scales where the two products give different outputs; for FULLY_CONNECTED the runtimes measurably use
  the double product although kernel_util.cc's GetQuantizedConvolutionMultipler reads as a float product.
- uint8 models are converted on import: activations and weights are shifted by -128 (zero points
  alike; weights keep their zero point), AVERAGE_POOL_2D rounds half up as the uint8 kernel does, and
  ``Graph.uint8_input`` / ``uint8_output`` are set for the ends that are uint8.
- Weight quantization is stored per output channel (axis 0) even when the file has one scale;
  depthwise weights (1, KH, KW, C*m) become (C*m, KH, KW, 1). Bias quantization is taken per output
  channel whatever ``quantized_dimension`` says (person_detect.tflite stores 3 for its 1-D biases,
  which tflite-micro ignores too).
- A residual ADD left in float (DEQUANTIZE both operands -> ADD -> QUANTIZE, as LiteRT-torch writes it), and a chain
  of them (ADD -> ADD, the inner sums never rounded to int8), is one ``float_add`` node per QUANTIZE: TFLite's float32
  dequantize, adds and quantize exactly (ops/float_add.py). Any other use of an inner DEQUANTIZE is refused.
- A TRANSPOSE of the input from NCHW to NHWC (LiteRT-torch's export of a PyTorch model), before or after its
  QUANTIZE, is dropped (stated): the graph's input is the NHWC tensor, as tinytrain feeds images; so is the RESHAPE
  (1, 1, H, W) -> (1, H, W, 1) LiteRT-torch writes for it on a 1-channel input (the same bytes).
- Integer ops that only compute a RESHAPE's new shape (Keras 3's Flatten: SHAPE -> STRIDED_SLICE -> PACK) are
  dropped: the RESHAPE takes its output tensor's static shape.
- Graphs are built for batch 1 (a -1 batch in shape_signature is fine); the simulator runs batches.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from tinytrain.errors import ModelError, Notice, TinyTrainError, UnsupportedModelError
from tinytrain.frontends.tflite.metadata import input_normalization
from tinytrain.frontends.tflite.reader import BUILTIN, TflModel, TflOperator, builtin_name, read_model
from tinytrain.frontends.tflite.tensors import QUANTIZED, TensorReader
from tinytrain.input_mapping import with_mapping
from tinytrain.ir import Graph, Node, Tensor
from tinytrain.ops import TfliteRead, declared
from tinytrain.ops.float_add import FloatAddAttrs
from tinytrain.ops.requantize import RequantizeAttrs
from tinytrain.quant import Requant
from tinytrain.verify import verify


def readers_of_builtins() -> dict[str, TfliteRead]:
    """Builtin operator name -> its reader: the op modules' (``TFLITE``) and the importer's own, the float boundary."""
    return {**declared("TFLITE"), "QUANTIZE": TfliteRead(_Importer.read_quantize),
            "DEQUANTIZE": TfliteRead(_Importer.read_dequantize)}


def graph_from_tflite(data: bytes, name: str, sha256: str) -> Graph:
    """Import a .tflite model (with its input normalization metadata, if any, as its input mapping). Raises
    ModelError (malformed) or UnsupportedModelError, one line each."""
    try:
        readers = readers_of_builtins()
        graph = _Importer(read_model(data, {BUILTIN[k]: r.options for k, r in readers.items() if r.options}), name,
                          sha256, readers).run()
        return with_mapping(graph, input_normalization(data))
    except TinyTrainError as e:
        raise type(e)(f"{name}: {e}") from None
    except (ValueError, OverflowError) as e:  # e.g. a scale so extreme that no fixed-point multiplier exists
        raise ModelError(f"{name}: inconsistent quantization or shapes ({e})") from None


_SHAPE_OPS = frozenset({"SHAPE", "STRIDED_SLICE", "PACK", "CONCATENATION", "GATHER", "SLICE", "CAST"})


@dataclass
class _Importer(TensorReader):
    model: TflModel
    name: str
    sha256: str

    readers: dict[str, TfliteRead]

    def __post_init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.names: dict[int, str] = {}
        self.produced: set[int] = set()
        self.skip: set[int] = set()  # operators dropped at the float boundary
        self.dequantized: dict[int, int] = {}  # float tensor of an inner DEQUANTIZE -> its int8 source
        self.float_adds: dict[int, TflOperator] = {}  # float tensor of an ADD of two of them -> that ADD
        self.permuted: dict[int, tuple[int, tuple[int, ...]]] = {}  # a dropped TRANSPOSE's output -> (input, perm)

    # ---- driver ---------------------------------------------------------------------------------
    def run(self) -> Graph:
        m = self.model
        if m.subgraph_count != 1:
            raise UnsupportedModelError(f"the model has {m.subgraph_count} subgraphs; only single-subgraph models "
                                        "(no control flow) are supported")
        if not any(t.type in QUANTIZED for t in m.tensors):
            raise UnsupportedModelError("this is a float model; quantize it to int8 first (full-integer "
                                        "post-training quantization, e.g. TFLiteConverter with "
                                        "optimizations=[DEFAULT] and a representative dataset)")
        inputs = [self._graph_input(i) for i in m.inputs]
        outputs = [self._graph_output(o) for o in m.outputs]
        self.skip |= self._shape_arithmetic() | self._pooled_transposes()
        for op in m.operators:
            if op.index not in self.skip and builtin_name(op.opcode) not in self.readers:
                if any(i >= 0 and self.tensor(i).type == "FLOAT32" for i in op.inputs):
                    raise UnsupportedModelError(f"operator {op.index} ({op.name}) computes in float (the model is not "
                                                "int8 there, as LiteRT-torch leaves what follows a residual ADD up to "
                                                "the next QUANTIZE): quantize that part of the model to int8 too")
                raise UnsupportedModelError(f"operator {op.index} is {op.name}, which is not supported: replace it in "
                                            "the model by supported ops before converting, or add the op "
                                            f"(docs/guide/adding-an-op.md); supported ops: "
                                            f"{', '.join(sorted(self.readers))}")
        self.graph_inputs, self.graph_outputs = set(inputs), set(outputs)
        for i in inputs:
            self.act(i)
        self.produced.update(inputs)
        for op in m.operators:
            if op.index not in self.skip:
                self._operator(op)
        for o in outputs:
            if o not in self.produced:
                raise ModelError(f"graph output {self.tensor(o).name!r} is never written by an operator")
        graph = Graph(self.name, self.tensors, tuple(self.nodes), tuple(self.names[i] for i in inputs),
                      tuple(self.names[o] for o in outputs), self.sha256, uint8_input=self._uint8_end("input", inputs),
                      uint8_output=self._uint8_end("output", outputs))
        try:
            verify(graph)
        except ValueError as e:
            raise ModelError(f"imported graph is inconsistent: {e}") from None
        return graph

    def _uint8_end(self, end: str, indices: list[int]) -> bool:
        """Whether the graph's inputs (or outputs) are uint8 (shifted to int8 at that boundary); one type per end."""
        types = [self.tensor(i) for i in indices]
        if len({t.type for t in types}) > 1:
            a, b = types[0], next(t for t in types if t.type != types[0].type)
            raise UnsupportedModelError(f"graph {end} {a.name!r} is {a.type.lower()} but {end} {b.name!r} is "
                                        f"{b.type.lower()}: tinytrain needs one integer type per end; convert with "
                                        f"one inference_{end}_type")
        return bool(types) and types[0].type == "UINT8"  # no outputs: refused later, naming what is missing

    def _shape_arithmetic(self) -> set[int]:
        """The integer ops (SHAPE -> STRIDED_SLICE -> PACK, as Keras 3's Flatten writes) that only compute a RESHAPE's
        new shape: dropped, the RESHAPE taking its output's static shape (batch 1)."""
        ops = {op.index: op for op in self.model.operators if builtin_name(op.opcode) in _SHAPE_OPS
               and all(self.tensor(o).type in ("INT32", "INT64") for o in op.outputs)}
        changed = True
        while changed:
            changed = False
            for k, op in list(ops.items()):
                for o in op.outputs:
                    users = [(c, c.inputs.index(o)) for c in self._consumers(o)]
                    if o in self.model.outputs or any(c.index not in ops and not (
                            builtin_name(c.opcode) == "RESHAPE" and pos == 1) for c, pos in users):
                        del ops[k]
                        changed = True
                        break
        return set(ops)

    def _pooled_transposes(self) -> set[int]:
        """The TRANSPOSEs read only by MEANs (LiteRT-torch's NHWC -> NCHW before PyTorch's ``mean((2, 3))``): dropped,
        each MEAN reading the transpose's input over the permuted axes (``through_layout``): a layout op, exact."""
        dropped = set()
        for op in self.model.operators:
            users = self._consumers(op.outputs[0]) if op.outputs else []
            if builtin_name(op.opcode) == "TRANSPOSE" and users and op.outputs[0] not in self.model.outputs and all(
                    builtin_name(u.opcode) == "MEAN" for u in users):
                perm = tuple(int(v) for v in np.asarray(self.const_data(op.inputs[1], "TRANSPOSE perm")).ravel())
                self.permuted[op.outputs[0]] = (op.inputs[0], perm)
                dropped.add(op.index)
        return dropped

    def through_layout(self, index: int) -> tuple[int, tuple[int, ...]]:
        """(the tensor a MEAN really reads, the permutation of its axes): through a dropped TRANSPOSE, if any."""
        return self.permuted.get(index, (index, (0, 1, 2, 3)))

    def _consumers(self, index: int) -> list[TflOperator]:
        return [op for op in self.model.operators if index in op.inputs]

    def _graph_input(self, index: int) -> int:
        index = self._leading_transpose(index)
        t = self.tensor(index)
        if t.type != "FLOAT32":
            return index
        users = self._consumers(index)
        if len(users) != 1 or builtin_name(users[0].opcode) != "QUANTIZE":
            raise UnsupportedModelError(f"float input {t.name!r} must feed exactly one QUANTIZE (float ops are "
                                        "not supported; quantize the model to int8)")
        self.skip.add(users[0].index)
        return self._leading_transpose(users[0].outputs[0])

    def _leading_transpose(self, index: int) -> int:
        """The NHWC tensor after the input's NCHW -> NHWC TRANSPOSE (LiteRT-torch's export of a PyTorch model: its
        input is NCHW), the TRANSPOSE dropped and stated: tinytrain feeds NHWC images, as the device would."""
        users = self._consumers(index)
        if len(users) == 1 and self._channel_reshape(index, users[0]):
            return self._dropped_layout(users[0], index, "RESHAPE")
        if len(users) != 1 or builtin_name(users[0].opcode) != "TRANSPOSE":
            return index
        op = users[0]
        perm = [int(v) for v in np.asarray(self.const_data(op.inputs[1], "TRANSPOSE perm")).ravel()]
        if perm != [0, 2, 3, 1]:
            raise UnsupportedModelError(f"operator {op.index} (TRANSPOSE) permutes the input by {perm}; only the "
                                        "NCHW -> NHWC [0, 2, 3, 1] transpose of an input is supported (export the "
                                        "model with NHWC layout)")
        return self._dropped_layout(op, index, "TRANSPOSE")

    def _channel_reshape(self, index: int, op: TflOperator) -> bool:
        """Whether ``op`` is LiteRT-torch's NCHW -> NHWC of a 1-channel input: a RESHAPE (1, 1, H, W) -> (1, H, W, 1),
        the same bytes (kept, it is a layer before the first convolution and stops the row streaming)."""
        shape = tuple(self.tensor(index).shape)
        return (builtin_name(op.opcode) == "RESHAPE" and len(shape) == 4 and shape[:2] == (1, 1)
                and tuple(self.tensor(op.outputs[0]).shape) == (1, shape[2], shape[3], 1))

    def _dropped_layout(self, op: TflOperator, index: int, kind: str) -> int:
        self.skip.add(op.index)
        shape = list(self.tensor(index).shape)
        warnings.warn(Notice(f"operator {op.index} ({kind} of the {shape} NCHW input to NHWC) dropped: the model "
                             f"takes NHWC images, as tinytrain feeds them"))
        return op.outputs[0]

    def _graph_output(self, index: int) -> int:
        t = self.tensor(index)
        if t.type != "FLOAT32":
            return index
        for op in self.model.operators:
            if index in op.outputs:
                if builtin_name(op.opcode) != "DEQUANTIZE":
                    break
                self.skip.add(op.index)
                return op.inputs[0]
        raise UnsupportedModelError(f"float output {t.name!r} must come from a DEQUANTIZE (float ops are not "
                                    "supported; quantize the model to int8)")

    def _operator(self, op: TflOperator) -> None:
        kind = builtin_name(op.opcode)
        reader = self.readers[kind]
        required = reader.required
        if not op.outputs or len(op.inputs) < required or any(i < 0 for i in op.inputs[:required]):
            raise ModelError(f"operator {op.index} ({kind}) lacks a required input or has no output")
        for pos, i in enumerate(op.inputs):
            if pos in reader.constants:
                continue  # weights, biases, shapes: checked to hold data by the op's handler
            i = self.through_layout(i)[0] if i >= 0 else i
            if i >= 0 and i not in self.produced and self.model.buffers[self.tensor(i).buffer] == b"":
                raise ModelError(f"operator {op.index} ({kind}) reads tensor {self.tensor(i).name!r} before any "
                                 "operator writes it (operators out of order or a cycle)")
        for o in op.outputs:
            if o in self.produced or self.model.buffers[self.tensor(o).buffer] != b"":
                raise ModelError(f"operator {op.index} ({kind}) writes tensor {self.tensor(o).name!r}, which is "
                                 "already written or constant")
        reader.read(self, op)
        self.produced.update(op.outputs)

    # ---- the importer's own operators: the float boundary -------------------------------------------------------
    def read_quantize(self, op: TflOperator) -> None:
        src = self.tensor(op.inputs[0])
        if op.inputs[0] in self.float_adds:
            self._quantize_float_add(op, self.float_adds[op.inputs[0]])
            return
        if src.type not in QUANTIZED:
            raise UnsupportedModelError(f"operator {op.index} (QUANTIZE) converts a {src.type} tensor inside the "
                                        "graph; only a float graph input may be quantized")
        x, out = self.act(op.inputs[0]), self.out(op)
        requant = Requant.from_scales([x.quant.s / out.quant.s])
        self.node(op, "requantize", [x.name], [out.name], RequantizeAttrs(requant))

    def read_dequantize(self, op: TflOperator) -> None:
        """An inner DEQUANTIZE: only a float ADD of two of them, quantized again, may read it (``float_add``)."""
        readers = {builtin_name(c.opcode) for c in self._consumers(op.outputs[0])}
        if readers != {"ADD"}:
            raise UnsupportedModelError(f"operator {op.index} (DEQUANTIZE) is inside the graph and read by "
                                        f"{', '.join(sorted(readers)) or 'nothing'}; float ops are not supported but "
                                        "for a float ADD of two dequantized activations (LiteRT-torch's residual "
                                        "add): quantize the model fully to int8")
        self.dequantized[op.outputs[0]] = op.inputs[0]

    def float_add(self, op: TflOperator) -> bool:
        """A float ADD of two dequantized activations (DEQUANTIZE -> ADD -> QUANTIZE, as LiteRT-torch leaves a
        residual add), or of one and a float ADD's output (a chain): recorded for the QUANTIZE after it, which emits
        the chain as one ``float_add``."""
        if not all(i in self.dequantized or i in self.float_adds for i in op.inputs[:2]):
            return False
        users = [u for u in self._consumers(op.outputs[0]) if builtin_name(u.opcode) != "ADD"]
        pooled = [m for u in users for m in (self._consumers(u.outputs[0]) if u.outputs[0] in self.permuted else [u])
                  if builtin_name(m.opcode) == "MEAN"]
        if pooled:
            raise UnsupportedModelError(f"operator {op.index} (ADD) is a residual add left in float and averaged by "
                                        f"operator {pooled[0].index} ({pooled[0].name}) before any QUANTIZE, which "
                                        "int8 arithmetic cannot round alike; end the network with a layer after the "
                                        "residual add (MobileNetV2's 1x1 head conv) or quantize the add's output")
        chained = len(users) < len(self._consumers(op.outputs[0]))  # read by a float ADD: a chain
        if (len(users) > 1 or not (users or chained) or (users and builtin_name(users[0].opcode) != "QUANTIZE")
                or op.options.get("activation", 0)):
            raise UnsupportedModelError(f"operator {op.index} (ADD) adds two dequantized activations but is not "
                                        "followed by one QUANTIZE or another float ADD (or has a fused activation); "
                                        "quantize the model fully to int8")
        self.float_adds[op.outputs[0]] = op
        return True

    def _summands(self, index: int, add: TflOperator) -> list[int]:
        """The int8 tensors whose dequantized values a float ADD chain sums, in TFLite's order: the running sum (a
        float ADD's output, never rounded to int8) first, then each ADD's dequantized operand."""
        if index in self.dequantized:
            return [self.dequantized[index]]
        inner = self.float_adds[index]
        a, b = sorted(inner.inputs[:2], key=lambda i: i not in self.float_adds)  # float32 adds commute
        if b in self.float_adds:
            raise UnsupportedModelError(f"operator {inner.index} (ADD) adds two float sums; only a chain of float "
                                        "residual adds, each adding one dequantized activation, is supported: "
                                        "quantize the model fully to int8")
        return self._summands(a, add) + [self.dequantized[b]]

    def _quantize_float_add(self, op: TflOperator, add: TflOperator) -> None:
        """The float ADD chain ending at ``add``, quantized by ``op``: one ``float_add`` node (ops/float_add.py),
        TFLite's float32 arithmetic exactly."""
        terms = [self.act(i) for i in self._summands(add.outputs[0], add)]
        out = self.out(op)
        if any(t.shape != out.shape for t in terms):
            raise UnsupportedModelError(f"operator {add.index} (ADD) broadcasts "
                                        f"{' and '.join(str(list(t.shape)) for t in terms)}; only same-shape adds "
                                        "are supported")
        self.node(add, "float_add", [t.name for t in terms], [out.name], FloatAddAttrs())
