"""The data contract the C header states (codegen/templates/data_contract.h.j2): the input's and the logits'
quantization as macros, how a camera's uint8 pixel becomes the input (the input mapping, tinytrain/input_mapping.py)
and the class names, so firmware maps pixels in and logits out as the host did."""

from __future__ import annotations

import json
from dataclasses import replace

from tinytrain.codegen import cformat
from tinytrain.errors import UsageError
from tinytrain.input_mapping import from_model, guess
from tinytrain.ir import Graph

CLASSES_KEY = "tinytrain.classes"  # Graph.metadata: the class names, a JSON list (compile --classes, a plan's)


def with_classes(graph: Graph, classes) -> Graph:
    """The graph carrying ``classes`` (a name per output, the header's TT_CLASS_NAMES); unchanged for None."""
    if classes is None:
        return graph
    names = tuple(str(c) for c in classes)
    n_out = graph.tensors[graph.outputs[0]].shape[-1]
    if len(names) != n_out or len(set(names)) != len(names) or not all(names):
        raise UsageError(f"--classes: {len(names)} names ({', '.join(names)}) for the model's {n_out} outputs; give "
                         "one distinct name per output, in label order")
    return replace(graph, metadata={**graph.metadata, CLASSES_KEY: json.dumps(names)})


def class_names(graph: Graph) -> tuple[str, ...] | None:
    text = graph.metadata.get(CLASSES_KEY)
    return None if text is None else tuple(json.loads(text))


def _c_string(text: str) -> str:
    """A C string literal of ``text`` (UTF-8; quotes, backslashes and anything outside printable ASCII escaped)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        out.append("\\" + ch if ch in '"\\?' else f"\\{byte:03o}" if byte < 0x20 or byte >= 0x7F else ch)
    return '"' + "".join(out) + '"'


def header_contract(graph: Graph, input_name: str, logits_name: str, out: str) -> dict:
    """The template values: input / logits scale literals, the pixel mapping per channel (None where neither the
    user, the model nor its input quantization says it) and the class names as C strings (None: not given);
    ``out``: the macro prefix of the output (TT_OUTPUT, or the training header's TT_LOGITS)."""
    x, q = graph.tensors[input_name], graph.tensors[logits_name]
    mapping = from_model(graph) or (guess(graph) if len(x.shape) == 4 else None)
    pixel = None
    if mapping is not None and len(x.shape) == 4 and len(mapping.scale) in (1, x.shape[-1]):
        scale, offset = mapping.channels(x.shape[-1])
        pixel = {"scale": ", ".join(map(cformat.float_literal, scale)),
                 "offset": ", ".join(map(cformat.float_literal, offset)),
                 "channels": x.shape[-1], "what": cformat.comment(mapping.describe())}
    names = class_names(graph)
    return {"input_scale": cformat.float_literal(x.quant.s if x.quant else 1.0),
            "logits_scale": cformat.float_literal(q.quant.s if q.quant else 1.0),
            "pixel": pixel, "images": len(x.shape) == 4, "out": out,
            "classes": None if names is None else [_c_string(n) for n in names]}
