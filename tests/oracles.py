"""Test oracles: the tflite-micro runtime and ai-edge-litert's reference kernels.

They are imported lazily and only by tests; product code never depends on them.

- ``tflm_run``: tflite-micro (reference kernels), one image per invoke, as on a device. It loads
  int8 models (including person_detect.tflite, which the full runtime rejects) but refuses uint8
  (TF1-style) models ("Hybrid models are not supported").
- ``litert_run``: ai-edge-litert's Interpreter with ``OpResolverType.BUILTIN_REF`` (the reference
  kernels, no XNNPACK delegate); used for the uint8 models.
- ``*_tensors``: every tensor after one invoke, by TFLite tensor name, for per-layer debugging;
  ``sim_tensors`` / ``first_mismatch`` give the simulator's side and the first differing layer.
- ``TfliteBuilder``: writes small .tflite models (schema object API) for ops the shared models lack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DEFAULT_ARENA = 4 << 20


def _bytes(model: str | Path | bytes) -> bytes:
    return model if isinstance(model, bytes) else Path(model).read_bytes()


def tflm_interpreter(model: str | Path | bytes, arena_size: int = DEFAULT_ARENA, preserve: bool = False):
    from tflite_micro.python.tflite_micro import runtime

    config = runtime.InterpreterConfig
    config = config.kPreserveAllTensors if preserve else config.kAllocationRecording
    return runtime.Interpreter.from_bytes(_bytes(model), arena_size=arena_size, intrepreter_config=config)


def tflm_run(model: str | Path | bytes, x: np.ndarray, arena_size: int = DEFAULT_ARENA, output: int = 0) -> np.ndarray:
    """Outputs (N, ...) of one output for a batch x (N, ...) in the model's input dtype, one invoke per item."""
    interp = tflm_interpreter(model, arena_size)
    shape = tuple(interp.get_input_details(0)["shape"])
    outs = []
    for item in x:
        interp.set_input(np.ascontiguousarray(item.reshape(shape)), 0)
        interp.invoke()
        outs.append(interp.get_output(output).copy())
    return np.concatenate(outs)


def tflm_tensors(model: str | Path | bytes, x: np.ndarray, arena_size: int = DEFAULT_ARENA) -> dict[str, np.ndarray]:
    """Every tensor of subgraph 0 after one invoke on a single item x, keyed by TFLite tensor name."""
    from tinytrain.frontends.tflite.reader import read_model

    data = _bytes(model)
    interp = tflm_interpreter(data, arena_size, preserve=True)
    interp.set_input(np.ascontiguousarray(x.reshape(tuple(interp.get_input_details(0)["shape"]))), 0)
    interp.invoke()
    return {t.name: np.array(interp.GetTensor(t.index, 0)["tensor_data"]) for t in read_model(data).tensors}


def litert_interpreter(model: str | Path | bytes, preserve: bool = False):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_content=_bytes(model), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                         experimental_preserve_all_tensors=preserve)
    interp.allocate_tensors()
    return interp


def litert_run(model: str | Path | bytes, x: np.ndarray) -> np.ndarray:
    """Outputs (N, ...) of output 0 with the reference kernels, one invoke per item."""
    interp = litert_interpreter(model)
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    outs = []
    for item in x:
        interp.set_tensor(inp["index"], np.ascontiguousarray(item.reshape(inp["shape"])))
        interp.invoke()
        outs.append(interp.get_tensor(out["index"]).copy())
    return np.concatenate(outs)


def litert_tensors(model: str | Path | bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    interp = litert_interpreter(model, preserve=True)
    inp = interp.get_input_details()[0]
    interp.set_tensor(inp["index"], np.ascontiguousarray(x.reshape(inp["shape"])))
    interp.invoke()
    result = {}
    for d in interp.get_tensor_details():
        try:
            result[d["name"]] = interp.get_tensor(d["index"]).copy()
        except ValueError:  # tensors without data (e.g. omitted)
            pass
    return result


def sim_tensors(graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every activation of the simulator for a batch x (internal int8 form), keyed by IR tensor name."""
    from tinytrain.ops import get_op

    values = {graph.inputs[0]: x}
    for node in graph.nodes:
        ins = [graph.tensors[i] if i else None for i in node.inputs]
        arrays = [(t.data if t.is_constant else values[t.name]) if t is not None else None for t in ins]
        outs = [graph.tensors[o] for o in node.outputs]
        for name, value in zip(node.outputs, get_op(node.op).reference(node.attrs, arrays, ins, outs)):
            values[name] = value
    return values


def first_mismatch(graph, ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> str | None:
    """The first node (in order) whose output differs from the oracle's tensor of the same name, described."""
    for node in graph.nodes:
        for name in node.outputs:
            if name not in theirs:
                continue
            a = ours[name].astype(np.int64)
            if theirs[name].dtype == np.uint8:  # a uint8 tensor of the source: int8 inside, + 128
                a = a + 128
            b = theirs[name].astype(np.int64).reshape(a.shape)
            if (a != b).any():
                return (f"{node.name} ({node.op}) -> {name}: {(a != b).sum()} of {a.size} values differ, "
                        f"max |diff| {np.abs(a - b).max()}")
    return None


class TfliteBuilder:
    """Writes small .tflite models with the schema's object API (test-only), for ops the shared models lack.

    ``tensor`` returns a tensor index; ``op`` appends an operator (options: a schema ``*OptionsT`` object);
    ``finish`` returns the flatbuffer bytes.
    """

    def __init__(self):
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

        self.s = schema
        self.tensors, self.buffers, self.operators, self.codes = [], [schema.BufferT()], [], []

    def tensor(self, name, shape, dtype, scale=None, zero_point=None, axis=0, data=None, signature=None) -> int:
        s = self.s
        t = s.TensorT(shape=list(shape), type=getattr(s.TensorType, dtype), name=name)
        if signature is not None:
            t.shapeSignature = list(signature)
        if scale is not None:
            scales = [float(v) for v in np.atleast_1d(np.asarray(scale, np.float32))]
            zps = np.atleast_1d(0 if zero_point is None else zero_point)
            zps = [int(v) for v in (zps if len(zps) == len(scales) else np.repeat(zps[:1], len(scales)))]
            t.quantization = s.QuantizationParametersT(scale=scales, zeroPoint=zps, quantizedDimension=axis)
        b = s.BufferT()
        if data is not None:
            b.data = np.frombuffer(np.ascontiguousarray(data, data.dtype.newbyteorder("<")).tobytes(), np.uint8)
        self.buffers.append(b)
        t.buffer = len(self.buffers) - 1
        self.tensors.append(t)
        return len(self.tensors) - 1

    def op(self, name: str, inputs, outputs, options=None) -> None:
        s = self.s
        code = getattr(s.BuiltinOperator, name)
        if code not in self.codes:
            self.codes.append(code)
        o = s.OperatorT(opcodeIndex=self.codes.index(code), inputs=list(inputs), outputs=list(outputs))
        if options is not None:
            o.builtinOptionsType = getattr(s.BuiltinOptions, type(options).__name__[:-1])
            o.builtinOptions = options
        self.operators.append(o)

    def finish(self, inputs, outputs, subgraphs: int = 1) -> bytes:
        import flatbuffers

        s = self.s
        codes = [s.OperatorCodeT(deprecatedBuiltinCode=min(c, 127), builtinCode=c, version=1) for c in self.codes]
        graph = s.SubGraphT(tensors=self.tensors, inputs=list(inputs), outputs=list(outputs),
                            operators=self.operators, name="main")
        model = s.ModelT(version=3, operatorCodes=codes, subgraphs=[graph] * subgraphs, buffers=self.buffers,
                         description="tinytrain test model")
        b = flatbuffers.Builder(1024)
        b.Finish(model.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


ORT_SATURATES = ("onnxruntime's int8 convolutions on an AVX2 CPU without VNNI sum byte pairs with VPMADDUBSW, which "
                 "saturates at 16 bits: its default session is not an exact oracle on this CPU (tinytrain sums exactly)")


def ort_int8_exact() -> bool:
    """Whether onnxruntime's integer convolutions are exact here: a CPU with VNNI, or no x86 AVX2 (unknown: True)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True
    return "avx2" not in flags or "avx512_vnni" in flags or "avx_vnni" in flags


def skip_unless_ort_int8_exact() -> None:
    """Skip a test whose oracle is onnxruntime's fused int8 kernels where those saturate (``ORT_SATURATES``)."""
    import pytest

    if not ort_int8_exact():
        pytest.skip(ORT_SATURATES)
