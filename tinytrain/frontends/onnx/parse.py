"""Reading an ONNX model's protobuf: node attributes and labels, and the model-level checks (``topo_sort``,
``static_input_shape``) that run before any conversion. Its constants: constants.py."""

from __future__ import annotations

from typing import Any

import onnx
from onnx import TensorProto

from tinytrain.errors import ModelError, UnsupportedModelError

MIN_OPSET = 10
INT_ACT_TYPES = {TensorProto.INT8: "int8", TensorProto.UINT8: "uint8"}


def elem_type_name(t: int) -> str:
    try:
        return TensorProto.DataType.Name(t).lower()
    except ValueError:
        return f"type {t}"


def one_line(msg: str) -> str:
    return " ".join(str(msg).split())


def attrs_of(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def node_label(node: onnx.NodeProto) -> str:
    if node.name or not node.output:
        return f"{node.op_type} '{node.name}'"
    return f"{node.op_type} (output '{node.output[0]}')"


def resolve_padding(attrs: dict, in_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                    dilation: tuple[int, int], label: str) -> tuple[int, int, int, int]:
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise UnsupportedModelError(f"{label}: pads {pads} are not 2-D; only 2-D (NCHW) windows are supported")
        if any(p < 0 for p in pads):
            raise UnsupportedModelError(f"{label}: negative pads {pads} are not supported; re-export without cropping")
        return (pads[0], pads[1], pads[2], pads[3])
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(2):
            o = -(-in_hw[i] // stride[i])
            total = max((o - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in_hw[i], 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return (out[0][0], out[1][0], out[0][1], out[1][1])
    raise UnsupportedModelError(f"{label}: auto_pad={auto_pad!r} is not supported (use NOTSET, VALID, SAME_UPPER or SAME_LOWER)")


def default_opset(model: onnx.ModelProto) -> int | None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return None


def graph_inputs(g: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in g.initializer}
    return [vi for vi in g.input if vi.name not in inits]


def static_input_shape(vi: onnx.ValueInfoProto, model_name: str) -> tuple[int, ...]:
    """The input shape with the batch dimension set to 1; symbolic dims elsewhere are an error."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' has no fixed shape; fix the input shape "
                                    f"(e.g. python -m onnxruntime.tools.make_dynamic_shape_fixed) and retry")
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
            continue
        if k == 0:
            dims.append(1)
            continue
        what = f"'{d.dim_param}'" if d.dim_param else "an unknown size"
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' has a symbolic dimension {what} at axis {k}; "
                                    f"fix the input shape (e.g. python -m onnxruntime.tools.make_dynamic_shape_fixed "
                                    f"--dim_param {d.dim_param or 'NAME'} --dim_value N) or re-export with a static shape")
    if not dims:
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' is a scalar; tinytrain needs a batch of tensors")
    if dims[0] != 1:
        raise UnsupportedModelError(f"{model_name}: input '{vi.name}' has a fixed batch size of {dims[0]}; export the "
                                    f"model with batch size 1 (the simulator still runs any batch)")
    return tuple(dims)


def topo_sort(model: onnx.ModelProto, model_name: str) -> None:
    """Check every node input is defined and there is no cycle; sort the nodes topologically in place."""
    g = model.graph
    available = {vi.name for vi in g.input} | {i.name for i in g.initializer} | {""}
    available |= {i.values.name for i in g.sparse_initializer}
    producer: dict[str, int] = {}
    for k, n in enumerate(g.node):
        for o in n.output:
            if o:
                if o in producer or o in available - {""}:
                    raise ModelError(f"{model_name}: tensor '{o}' is produced more than once; the model is malformed")
                producer[o] = k
    for n in g.node:
        for i in n.input:
            if i not in available and i not in producer:
                raise ModelError(f"{model_name}: {node_label(n)} reads '{i}', which is not a graph input, an initializer "
                                 f"or a node output (missing initializer?); the model is incomplete, re-export it")
    deps = [{producer[i] for i in n.input if i in producer} for n in g.node]
    order: list[int] = []
    state = [0] * len(g.node)  # 0 new, 1 on stack, 2 done
    for root in range(len(g.node)):
        if state[root]:
            continue
        stack = [(root, iter(sorted(deps[root])))]
        state[root] = 1
        while stack:
            k, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[k] = 2
                order.append(k)
                stack.pop()
            elif state[nxt] == 1:
                cycle = [g.node[j].name or g.node[j].output[0] for j, _ in stack]
                cycle = cycle[cycle.index(g.node[nxt].name or g.node[nxt].output[0]):]
                raise ModelError(f"{model_name}: the graph has a cycle through nodes {', '.join(cycle)}; "
                                 f"ONNX graphs must be acyclic, re-export the model")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
    if order != list(range(len(g.node))):
        nodes = [g.node[k] for k in order]
        copied = [onnx.NodeProto() for _ in nodes]
        for dst, src in zip(copied, nodes):
            dst.CopyFrom(src)
        del g.node[:]
        g.node.extend(copied)
