"""The calibration methods ``tinytrain quantize`` offers (tinytrain/quantizer.py says what each does), in a module
of their own so that the command line names them without loading onnxruntime."""

CALIBRATIONS = ("minmax", "percentile", "entropy")
