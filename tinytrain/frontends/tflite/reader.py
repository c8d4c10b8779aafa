"""A small, self-contained reader of the TFLite flatbuffer schema (schema.fbs, version 3).

It reads only what the importer needs: the model version, operator codes, subgraph 0 (tensors,
inputs, outputs, operators with their builtin options) and the buffers. Field access goes through
``flatbuffers.table.Table``; every offset is checked against the file first, so a truncated or
garbage file raises :class:`ModelError` with a one-line message instead of an IndexError or a
struct.error.

Slot numbers below are the field indices of schema.fbs (vtable entry = 4 + 2 * index).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flatbuffers.table import Table

from tinytrain.errors import ModelError

# TensorType enum of schema.fbs.
TENSOR_TYPES = ("FLOAT32", "FLOAT16", "INT32", "UINT8", "INT64", "STRING", "BOOL", "INT16", "COMPLEX64", "INT8",
                "FLOAT64", "COMPLEX128", "UINT64", "RESOURCE", "VARIANT", "UINT32", "UINT16", "INT4", "BFLOAT16")
NUMPY_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT32": np.int32, "UINT8": np.uint8, "INT64": np.int64,
               "BOOL": np.bool_, "INT16": np.int16, "INT8": np.int8, "FLOAT64": np.float64, "UINT64": np.uint64,
               "UINT32": np.uint32, "UINT16": np.uint16}

# BuiltinOperator enum of schema.fbs, by code (the classic TFLite ops; later codes are named by number).
BUILTIN_NAMES = tuple("""
ADD AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE EMBEDDING_LOOKUP FLOOR
FULLY_CONNECTED HASHTABLE_LOOKUP L2_NORMALIZATION L2_POOL_2D LOCAL_RESPONSE_NORMALIZATION LOGISTIC
LSH_PROJECTION LSTM MAX_POOL_2D MUL RELU RELU_N1_TO_1 RELU6 RESHAPE RESIZE_BILINEAR RNN SOFTMAX
SPACE_TO_DEPTH SVDF TANH CONCAT_EMBEDDINGS SKIP_GRAM CALL CUSTOM EMBEDDING_LOOKUP_SPARSE PAD
UNIDIRECTIONAL_SEQUENCE_RNN GATHER BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND TRANSPOSE MEAN SUB DIV SQUEEZE
UNIDIRECTIONAL_SEQUENCE_LSTM STRIDED_SLICE BIDIRECTIONAL_SEQUENCE_RNN EXP TOPK_V2 SPLIT LOG_SOFTMAX DELEGATE
BIDIRECTIONAL_SEQUENCE_LSTM CAST PRELU MAXIMUM ARG_MAX MINIMUM LESS NEG PADV2 GREATER GREATER_EQUAL
LESS_EQUAL SELECT SLICE SIN TRANSPOSE_CONV SPARSE_TO_DENSE TILE EXPAND_DIMS EQUAL NOT_EQUAL LOG SUM SQRT
RSQRT SHAPE POW ARG_MIN FAKE_QUANT REDUCE_PROD REDUCE_MAX PACK LOGICAL_OR ONE_HOT LOGICAL_AND LOGICAL_NOT
UNPACK REDUCE_MIN FLOOR_DIV REDUCE_ANY SQUARE ZEROS_LIKE FILL FLOOR_MOD RANGE RESIZE_NEAREST_NEIGHBOR
LEAKY_RELU SQUARED_DIFFERENCE MIRROR_PAD ABS SPLIT_V UNIQUE CEIL REVERSE_V2 ADD_N GATHER_ND COS WHERE RANK
ELU REVERSE_SEQUENCE MATRIX_DIAG QUANTIZE MATRIX_SET_DIAG ROUND HARD_SWISH IF WHILE NON_MAX_SUPPRESSION_V4
NON_MAX_SUPPRESSION_V5 SCATTER_ND SELECT_V2 DENSIFY SEGMENT_SUM BATCH_MATMUL
PLACEHOLDER_FOR_GREATER_OP_CODES CUMSUM CALL_ONCE BROADCAST_TO RFFT2D CONV_3D IMAG REAL COMPLEX_ABS
HASHTABLE HASHTABLE_FIND HASHTABLE_IMPORT HASHTABLE_SIZE REDUCE_ALL CONV_3D_TRANSPOSE VAR_HANDLE
READ_VARIABLE ASSIGN_VARIABLE BROADCAST_ARGS RANDOM_STANDARD_NORMAL BUCKETIZE RANDOM_UNIFORM MULTINOMIAL
GELU DYNAMIC_UPDATE_SLICE RELU_0_TO_1 UNSORTED_SEGMENT_PROD UNSORTED_SEGMENT_MAX UNSORTED_SEGMENT_SUM ATAN2
UNSORTED_SEGMENT_MIN SIGN BITCAST BITWISE_XOR RIGHT_SHIFT
""".split())
BUILTIN = {name: code for code, name in enumerate(BUILTIN_NAMES)}
CUSTOM = BUILTIN["CUSTOM"]


def builtin_name(code: int) -> str:
    return BUILTIN_NAMES[code] if 0 <= code < len(BUILTIN_NAMES) else f"builtin operator {code}"


# A builtin's options: (BuiltinOptions union type, ((field, slot, struct format, default), ...)), by builtin code; the
# readers declare theirs (ops/__init__.py TfliteRead.options).
Options = dict[int, tuple[int, tuple[tuple[str, int, str, Any], ...]]]


@dataclass(frozen=True)
class TflQuant:
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    quantized_dimension: int = 0


@dataclass(frozen=True)
class TflTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...] | None
    type: str
    buffer: int
    quant: TflQuant | None


@dataclass(frozen=True)
class TflOperator:
    index: int
    opcode: int  # builtin code (CUSTOM for custom ops)
    custom_code: str
    inputs: tuple[int, ...]  # -1 marks an omitted optional input
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(hash=False)

    @property
    def name(self) -> str:
        return f"CUSTOM({self.custom_code})" if self.opcode == CUSTOM else builtin_name(self.opcode)


@dataclass(frozen=True)
class TflModel:
    version: int
    subgraph_count: int
    tensors: tuple[TflTensor, ...]
    operators: tuple[TflOperator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    buffers: tuple[bytes, ...]  # empty bytes when a buffer holds no data

    def data(self, t: TflTensor) -> np.ndarray | None:
        """The constant data of a tensor in its dtype and shape, or None when its buffer is empty."""
        raw = self.buffers[t.buffer]
        if not raw:
            return None
        if t.type not in NUMPY_TYPES:
            raise ModelError(f"tensor {t.name!r} holds constant data of type {t.type}, which cannot be read")
        dtype = np.dtype(NUMPY_TYPES[t.type]).newbyteorder("<")
        count = int(np.prod(t.shape, dtype=np.int64))
        if len(raw) != count * dtype.itemsize:
            raise ModelError(f"tensor {t.name!r}: buffer {t.buffer} holds {len(raw)} bytes, "
                             f"shape {list(t.shape)} of {t.type} needs {count * dtype.itemsize}")
        return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("=")).reshape(t.shape)


class _Reader:
    """Bounds-checked access to tables, vectors and scalars of one flatbuffer."""

    def __init__(self, data: bytes):
        self.buf = data
        self.size = len(data)

    def fail(self, what: str) -> ModelError:
        return ModelError(f"TFLite file is truncated or corrupt ({what}; file is {self.size} bytes)")

    def check(self, off: int, length: int, what: str) -> None:
        if off < 0 or length < 0 or off + length > self.size:
            raise self.fail(f"{what} at bytes {off}..{off + length} lies outside the file")

    def u32(self, off: int, what: str) -> int:
        self.check(off, 4, what)
        return struct.unpack_from("<I", self.buf, off)[0]

    def table(self, pos: int, what: str) -> Table:
        self.check(pos, 4, what)
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        self.check(vtable, 4, f"{what} vtable")
        vt_len, obj_len = struct.unpack_from("<HH", self.buf, vtable)
        if vt_len < 4 or vt_len % 2:
            raise self.fail(f"{what} has a vtable of {vt_len} bytes")
        self.check(vtable, vt_len, f"{what} vtable")
        self.check(pos, obj_len, what)
        return Table(self.buf, pos)

    def root(self) -> Table:
        return self.table(self.u32(0, "root offset"), "model table")

    def field(self, t: Table, slot: int, size: int, what: str) -> int:
        """Absolute offset of a field (0 when absent), checked to hold ``size`` bytes."""
        off = t.Offset(4 + 2 * slot)
        if off == 0:
            return 0
        self.check(t.Pos + off, size, what)
        return t.Pos + off

    def scalar(self, t: Table, slot: int, fmt: str, default, what: str):
        off = self.field(t, slot, struct.calcsize(fmt), what)
        return default if off == 0 else struct.unpack_from(fmt, self.buf, off)[0]

    def _target(self, t: Table, slot: int, what: str) -> int:
        off = self.field(t, slot, 4, what)
        if off == 0:
            return 0
        return off + self.u32(off, what)

    def subtable(self, t: Table, slot: int, what: str) -> Table | None:
        target = self._target(t, slot, what)
        return None if target == 0 else self.table(target, what)

    def vector(self, t: Table, slot: int, elem_size: int, what: str) -> tuple[int, int]:
        """(start of data, element count) of a vector field; (0, 0) when absent."""
        target = self._target(t, slot, what)
        if target == 0:
            return 0, 0
        n = self.u32(target, what)
        self.check(target + 4, n * elem_size, what)
        return target + 4, n

    def numbers(self, t: Table, slot: int, dtype: str, what: str) -> np.ndarray | None:
        """A vector of scalars as a numpy array (None when the field is absent)."""
        dt = np.dtype(dtype)
        if self._target(t, slot, what) == 0:
            return None
        start, n = self.vector(t, slot, dt.itemsize, what)
        return np.frombuffer(self.buf, dt, n, start).copy()

    def tables(self, t: Table, slot: int, what: str) -> list[Table]:
        start, n = self.vector(t, slot, 4, what)
        return [self.table(start + 4 * i + self.u32(start + 4 * i, what), f"{what}[{i}]") for i in range(n)]

    def string(self, t: Table, slot: int, what: str) -> str:
        start, n = self.vector(t, slot, 1, what)
        return bytes(self.buf[start : start + n]).decode("utf-8", "replace") if n else ""


def read_model(data: bytes, options: Options | None = None) -> TflModel:
    """Parse a .tflite file, reading the builtin options ``options`` names (none without). Raises ModelError for
    anything that is not a well-formed TFLite flatbuffer."""
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelError("not a TFLite model (no TFL3 file identifier)")
    r = _Reader(data)
    model = r.root()
    version = r.scalar(model, 0, "<I", 0, "model version")
    if version != 3:
        raise ModelError(f"TFLite schema version {version} is not supported (expected 3)")

    opcodes: list[tuple[int, str]] = []
    for i, oc in enumerate(r.tables(model, 1, "operator codes")):
        deprecated = r.scalar(oc, 0, "<b", 0, f"operator code {i}")
        builtin = r.scalar(oc, 3, "<i", 0, f"operator code {i}")
        opcodes.append((max(deprecated, builtin), r.string(oc, 1, f"operator code {i} custom name")))

    subgraphs = r.tables(model, 2, "subgraphs")
    if not subgraphs:
        raise ModelError("TFLite model has no subgraph")

    buffers: list[bytes] = []
    for i, b in enumerate(r.tables(model, 4, "buffers")):
        start, n = r.vector(b, 0, 1, f"buffer {i} data")
        offset = r.scalar(b, 1, "<Q", 0, f"buffer {i} offset")
        size = r.scalar(b, 2, "<Q", 0, f"buffer {i} size")
        if offset > 1:  # data stored outside the flatbuffer, at an absolute file offset
            r.check(offset, size, f"buffer {i} data")
            buffers.append(bytes(data[offset : offset + size]))
        else:
            buffers.append(bytes(data[start : start + n]))

    sg = subgraphs[0]
    tensors = tuple(_read_tensor(r, t, i, len(buffers)) for i, t in enumerate(r.tables(sg, 0, "tensors")))

    def indices(t: Table, slot: int, what: str, allow_missing: bool = False) -> tuple[int, ...]:
        values = r.numbers(t, slot, "<i4", what)
        out = tuple(int(v) for v in values) if values is not None else ()
        for v in out:
            if not (0 <= v < len(tensors) or (allow_missing and v == -1)):
                raise ModelError(f"{what} refers to tensor {v}, but the subgraph has {len(tensors)} tensors")
        return out

    operators = []
    for k, op in enumerate(r.tables(sg, 3, "operators")):
        what = f"operator {k}"
        index = r.scalar(op, 0, "<I", 0, what)
        if index >= len(opcodes):
            raise ModelError(f"{what} uses operator code {index}, but the model has {len(opcodes)}")
        code, custom = opcodes[index]
        values = _read_options(r, op, code, (options or {}).get(code), what)
        operators.append(TflOperator(k, code, custom, indices(op, 1, f"{what} inputs", True),
                                     indices(op, 2, f"{what} outputs"), values))

    return TflModel(version, len(subgraphs), tensors, tuple(operators), indices(sg, 1, "subgraph inputs"),
                    indices(sg, 2, "subgraph outputs"), tuple(buffers))


def _read_tensor(r: _Reader, t: Table, i: int, n_buffers: int) -> TflTensor:
    name = r.string(t, 3, f"tensor {i} name") or f"tensor_{i}"
    what = f"tensor {i} ({name!r})"
    shape = r.numbers(t, 0, "<i4", f"{what} shape")
    signature = r.numbers(t, 7, "<i4", f"{what} shape signature")
    type_code = r.scalar(t, 1, "<b", 0, f"{what} type")
    type_name = TENSOR_TYPES[type_code] if 0 <= type_code < len(TENSOR_TYPES) else f"type {type_code}"
    buffer = r.scalar(t, 2, "<I", 0, f"{what} buffer")
    if buffer >= n_buffers:
        raise ModelError(f"{what} refers to buffer {buffer}, but the model has {n_buffers} buffers")
    quant = None
    q = r.subtable(t, 4, f"{what} quantization")
    if q is not None:
        scale = r.numbers(q, 2, "<f4", f"{what} scales")
        zero_point = r.numbers(q, 3, "<i8", f"{what} zero points")
        if scale is not None and len(scale):
            if zero_point is None or len(zero_point) != len(scale):
                raise ModelError(f"{what} has {len(scale)} scales but "
                                 f"{0 if zero_point is None else len(zero_point)} zero points")
            quant = TflQuant(tuple(float(s) for s in scale), tuple(int(z) for z in zero_point),
                             int(r.scalar(q, 6, "<i", 0, f"{what} quantized dimension")))
    return TflTensor(i, name, tuple(int(d) for d in shape) if shape is not None else (),
                     tuple(int(d) for d in signature) if signature is not None else None, type_name, buffer, quant)


def _read_options(r: _Reader, op: Table, code: int, spec, what: str) -> dict[str, Any]:
    if spec is None:
        return {}
    union_type, fields = spec
    present = r.scalar(op, 3, "<B", 0, f"{what} options type")
    opts = r.subtable(op, 4, f"{what} options") if present == union_type else None
    if present not in (0, union_type):
        raise ModelError(f"{what} ({builtin_name(code)}) carries options of union type {present}, "
                         f"expected {union_type}")
    values: dict[str, Any] = {}
    for name, slot, fmt, default in fields:
        values[name] = default if opts is None else r.scalar(opts, slot, fmt, default, f"{what} option {name}")
    return values
