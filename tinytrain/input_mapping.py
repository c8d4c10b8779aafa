"""The input mapping: how a uint8 pixel p of channel c becomes the model's real-valued input, x = p * scale[c] +
offset[c] (docs/guide/data.md "The input mapping"; the contract of OWNERS.md).

Where it comes from, first found:
1. the user: ``--input-mapping`` (``unit``: p/255; ``symmetric``: (p-128)/128; ``imagenet``: (p/255 - mean)/std
   with ImageNet's mean and std; ``raw``: p; or ``SCALE,...:OFFSET,...`` lists, one entry per channel or one for
   all), carried by the graph (``with_mapping``);
2. the model: an ONNX ``metadata_props`` entry ``tinytrain.input_mapping`` (``{"scale": [..], "offset": [..]}``,
   written by ``tinytrain convert`` and ``train -o``), or a TFLite model's normalization options (its
   metadata), both read by the frontends into ``Graph.metadata``;
3. the model's input quantization, when its representable range [lo, hi] is one mapping's range of pixels within
   2 % of its span: [0, 1] is ``unit``, [0, 255] ``raw``, [-1, 1] ``symmetric`` — but only for a TF1 uint8 model
   or an asymmetric quantizer (zero point not 0): a symmetric int8 quantizer (zero point 0, scale 1/128 or 1/127,
   Brevitas' and onnxruntime's ActivationSymmetric) spans [-1, 1] whether its data were [0, 1] or [-1, 1].
   The guess is stated (a ``Notice``); any other range (an ImageNet mean / std calibration: about [-2.1, 2.6])
   is refused: ``for_model`` raises a UsageError naming the ``--input-mapping`` choices.
"""

from __future__ import annotations

import difflib
import json
import math
import warnings
from dataclasses import dataclass, replace

import numpy as np

from tinytrain.errors import Notice, UsageError
from tinytrain.ir import Graph

KEY = "tinytrain.input_mapping"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TOLERANCE = 0.02  # of a mapping's span: how close the input's representable range must be to its pixels' range
CHOICES = "unit (p/255), symmetric ((p-128)/128), imagenet, raw (p), SCALE,OFFSET or SCALES:OFFSETS per channel"


@dataclass(frozen=True)
class InputMapping:
    """x = p * scale[c] + offset[c] for a uint8 pixel p of channel c (one entry: every channel)."""

    scale: tuple[float, ...]
    offset: tuple[float, ...]
    name: str = ""  # unit, symmetric, imagenet, raw, or "" (given as numbers)

    def __post_init__(self) -> None:
        if len(self.scale) != len(self.offset) or not self.scale:
            raise UsageError(f"input mapping: {len(self.scale)} scales and {len(self.offset)} offsets; give one of "
                             "each per channel (or one for all)")
        if not all(math.isfinite(v) for v in self.scale + self.offset) or 0 in self.scale:
            raise UsageError("input mapping: scales must be finite and non-zero, offsets finite")

    def channels(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """(scale, offset) as float32 arrays of ``c`` channels; UsageError if the mapping has another count."""
        if len(self.scale) not in (1, c):
            raise UsageError(f"the input mapping has {len(self.scale)} channels, the model's input {c}")
        return (np.resize(np.asarray(self.scale, np.float32), c), np.resize(np.asarray(self.offset, np.float32), c))

    def real(self, pixels: np.ndarray) -> np.ndarray:
        """float32 model inputs of uint8 pixels (N, H, W, C); a named mapping as its formula is written (p / 255,
        not p * (1/255): the float32 results, and so the quantized inputs, are those of earlier versions)."""
        p = pixels.astype(np.float32)
        if self.name in _FORMULAS:
            return _FORMULAS[self.name](p)
        scale, offset = self.channels(pixels.shape[-1])
        return p * scale + offset

    def describe(self) -> str:
        if self.name:
            return {"unit": "pixel / 255", "symmetric": "(pixel - 128) / 128", "raw": "the pixel value",
                    "imagenet": "(pixel / 255 - ImageNet mean) / ImageNet std"}[self.name]
        terms = [f"pixel * {s:.6g} {'+' if o >= 0 else '-'} {abs(o):.6g}" for s, o in zip(self.scale, self.offset)]
        return terms[0] if len(terms) == 1 else "per channel " + "; ".join(terms)


NAMED = {
    "unit": InputMapping((1 / 255,), (0.0,), "unit"),
    "symmetric": InputMapping((1 / 128,), (-1.0,), "symmetric"),
    "raw": InputMapping((1.0,), (0.0,), "raw"),
    "imagenet": InputMapping(tuple(1 / (255 * s) for s in IMAGENET_STD),
                             tuple(-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD)), "imagenet"),
}


_FORMULAS = {
    "unit": lambda p: p / np.float32(255),
    "symmetric": lambda p: (p - np.float32(128)) / np.float32(128),
    "raw": lambda p: p,
    "imagenet": lambda p: (p / np.float32(255) - np.asarray(IMAGENET_MEAN, np.float32)[: p.shape[-1]])
    / np.asarray(IMAGENET_STD, np.float32)[: p.shape[-1]],
}


def parse(text: str) -> InputMapping:
    """``--input-mapping``: a name of ``NAMED``, ``SCALE,OFFSET`` (every channel), or per channel
    ``SCALE,SCALE,...:OFFSET,OFFSET,...``."""
    if text in NAMED:
        return NAMED[text]
    scales, sep, offsets = text.partition(":")
    if not sep and text.count(",") == 1:
        scales, offsets = text.split(",")
    try:
        return InputMapping(tuple(float(v) for v in scales.split(",")), tuple(float(v) for v in offsets.split(",")))
    except ValueError:
        close = difflib.get_close_matches(text, list(NAMED), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"--input-mapping {text}: give {CHOICES}{hint}") from None


def to_json(mapping: InputMapping) -> str:
    """The metadata value: ``{"scale": [..], "offset": [..]}`` (and the name, when it has one)."""
    d = {"scale": list(mapping.scale), "offset": list(mapping.offset)}
    return json.dumps({**d, "name": mapping.name} if mapping.name else d)


def from_json(text: str, source: str = "the model's metadata") -> InputMapping:
    try:
        d = json.loads(text)
        mapping = InputMapping(tuple(float(v) for v in d["scale"]), tuple(float(v) for v in d["offset"]))
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{source}: {KEY} is not {{\"scale\": [..], \"offset\": [..]}} ({e})") from None
    named = NAMED.get(d.get("name"))
    same = named is not None and (named.scale, named.offset) == (mapping.scale, mapping.offset)
    return named if same else mapping


def from_model(graph: Graph) -> InputMapping | None:
    """The mapping the model carries (its metadata, or one given with ``with_mapping``), or None."""
    text = graph.metadata.get(KEY)
    return None if text is None else from_json(text, f"{graph.name}'s metadata")


def with_mapping(graph: Graph, mapping: InputMapping | str | None) -> Graph:
    """The graph carrying ``mapping`` (a name or numbers as ``parse`` reads them); unchanged for None."""
    if mapping is None:
        return graph
    mapping = parse(mapping) if isinstance(mapping, str) else mapping
    return replace(graph, metadata={**graph.metadata, KEY: to_json(mapping)})


def _range(mapping: InputMapping) -> tuple[float, float]:
    lo = min(mapping.offset)
    return lo, max(s * 255 + o for s, o in zip(mapping.scale, mapping.offset))


def guess(graph: Graph) -> InputMapping | None:
    """The mapping the input quantization's range implies (module docstring, 3.), or None where it is doubtful."""
    q = graph.tensors[graph.inputs[0]].quant
    lo, hi = (-128 - q.zp) * q.s, (127 - q.zp) * q.s
    for name in ("unit", "raw", "symmetric"):
        want_lo, want_hi = _range(NAMED[name])
        span = want_hi - want_lo
        if abs(lo - want_lo) <= TOLERANCE * span and abs(hi - want_hi) <= TOLERANCE * span:
            symmetric_quantizer = name == "symmetric" and q.zp == 0 and not graph.uint8_input
            return None if symmetric_quantizer else NAMED[name]
    return None


def for_model(graph: Graph) -> InputMapping:
    """The mapping of the model's images: given or carried, else guessed (stated in a Notice), else UsageError."""
    mapping = from_model(graph)
    if mapping is not None:
        return mapping
    mapping = guess(graph)
    q = graph.tensors[graph.inputs[0]].quant
    lo, hi = (-128 - q.zp) * q.s, (127 - q.zp) * q.s
    if mapping is None:
        zero = ", a symmetric quantizer: [0, 1] and [-1, 1] inputs both give it" if q.zp == 0 else ""
        raise UsageError(f"{graph.name}: its input quantization (scale {q.s:.6g}, zero point {q.zp}: range "
                         f"[{lo:.4g}, {hi:.4g}]{zero}) does not say how pixels become its input; give "
                         f"--input-mapping {CHOICES}")
    warnings.warn(Notice(f"input mapping: {mapping.describe()} (the input quantization's range [{lo:.4g}, {hi:.4g}]; "
                         "--input-mapping to give another)"))
    return mapping
