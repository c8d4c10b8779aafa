"""``tinytrain quantize MODEL --data CALIB -o MODEL_int8.onnx``: a float ONNX model quantized for training
(tinytrain/quantizer.py; docs/guide/bring-your-own-model.md)."""

from __future__ import annotations

import argparse

from tinytrain.calibration import CALIBRATIONS
from tinytrain.input_mapping import CHOICES


def cmd_quantize(args: argparse.Namespace) -> None:
    from tinytrain.quantizer import quantize  # lazy: onnxruntime's quantizer takes seconds to load

    print(quantize(args.model, args.data, args.output, calibration=args.calibration,
                   input_mapping=args.input_mapping).text())


def add_quantize_command(sub) -> None:
    s = sub.add_parser("quantize", help="quantize a float ONNX model to int8 QDQ (onnxruntime quantize_static) on "
                       "calibration images")
    s.add_argument("model")
    s.add_argument("--data", required=True, help="CALIB: calibration images (DATA; a few hundred representative "
                   "images, e.g. fashion-mnist:train:200)")
    s.add_argument("--calibration", choices=CALIBRATIONS, default="minmax",
                   help="how each activation's range is chosen from the calibration images")
    s.add_argument("--input-mapping", metavar="MAPPING", help=f"how a pixel p becomes the model's input: {CHOICES} "
                   "(default: the model's tinytrain.input_mapping metadata, else unit); recorded in the output")
    s.add_argument("-o", "--output", required=True, help="MODEL_int8.onnx")
    s.set_defaults(func=cmd_quantize)
