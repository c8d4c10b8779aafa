"""The real quantizers, where installed (Brevitas, NNCF: skipped cleanly without them; the fixture forms of
tests/quantizers/ are checked without them in test_quantize_zoo.py): a small model quantized by each imports, its
forward equals onnxruntime's byte for byte, and a last-k:2 step compiles in 256 KB and trains alike on sim and C."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

import tinytrain
from onnx_oracle import ir_layout
from tinytrain.frontends import load_model
from tinytrain.simulator import forward

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quantizers"))
import make_zoo  # noqa: E402

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore")


def _matches_onnxruntime(path: Path, xs: np.ndarray, lsb: int = 0) -> None:
    """Against onnxruntime's default session (what users run)."""
    import onnxruntime as ort

    graph = load_model(path)
    q, oq = graph.tensors[graph.inputs[0]].quant, graph.tensors[graph.outputs[0]].quant
    xq = ir_layout(np.clip(np.rint(xs / np.float32(q.s)) + q.zp, -128, 127).astype(np.int8))
    ours = forward(graph, {graph.inputs[0]: xq})[graph.outputs[0]].astype(np.int64)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    y = np.concatenate([session.run(None, {name: xs[i:i + 1]})[0] for i in range(len(xs))])
    theirs = np.clip(np.rint(y / np.float32(oq.s)) + oq.zp, -128, 127).astype(np.int64)
    assert np.abs(ours - theirs).max() <= lsb
    assert (ours == theirs).mean() >= 0.99
    assert len(np.unique(ours, axis=0)) > 10


def _trains(path: Path) -> None:
    assert tinytrain.compile(path, update="last-k:2", sram="256k").plan is not None
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (3, 16, 16, 3), dtype=np.uint8), rng.integers(0, 4, 3)
    sim, c = (tinytrain.train(path, data, update="last-k:2", steps=3, engine=e, input_mapping="unit")
              for e in ("sim", "c"))
    assert np.array_equal(sim.losses, c.losses)
    assert all(np.array_equal(v, c.state.tensors[k]) for k, v in sim.state.tensors.items())


def brevitas_qcdq(path: Path) -> Path:
    """A Brevitas 8-bit model (input quantizer, QuantConv2d, QuantReLU, pool, QuantLinear, int32 biases),
    calibrated in train mode on seeded inputs, exported with export_onnx_qcdq."""
    import torch
    from brevitas import nn as qnn
    from brevitas.export import export_onnx_qcdq
    from brevitas.quant import Int8ActPerTensorFloat, Int32Bias

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            act = dict(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
            self.inp, self.r1, self.q2 = qnn.QuantIdentity(**act), qnn.QuantReLU(**act), qnn.QuantIdentity(**act)
            self.c1 = qnn.QuantConv2d(3, 8, 3, stride=2, padding=1, bias=True, bias_quant=Int32Bias,
                                      return_quant_tensor=True)
            self.fc = qnn.QuantLinear(8, 4, bias=True, bias_quant=Int32Bias)
            self.out = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat)

        def forward(self, x):
            y = self.r1(self.c1(self.inp(x)))
            return self.out(self.fc(self.q2(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))))

    torch.manual_seed(0)
    model = Model().train()
    with torch.no_grad():
        for x in make_zoo.inputs(32, 7).reshape(4, 8, 3, 16, 16):
            model(torch.from_numpy(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_onnx_qcdq(model.eval(), torch.zeros(1, 3, 16, 16), export_path=str(path), opset_version=13,
                         dynamo=False)
    return path


def test_brevitas_qcdq_imports_exactly_and_trains(tmp_path):
    pytest.importorskip("brevitas")
    pytest.importorskip("onnxoptimizer")  # Brevitas' ONNX export needs it
    path = brevitas_qcdq(tmp_path / "brevitas.onnx")
    assert "Clip" in {n.op_type for n in onnx.load(str(path)).graph.node}
    _matches_onnxruntime(path, make_zoo.inputs(200, 11))
    _trains(path)


def nncf_onnx(path: Path, per_channel: bool | None) -> Path:
    """make_zoo's float network quantized by NNCF's ONNX backend (16 seeded calibration inputs); per_channel
    False: activations per tensor (``activations_quantization_params``), None: NNCF's default."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, QuantizationParameters

    logging.getLogger("nncf").setLevel(logging.ERROR)
    advanced = None if per_channel is None else AdvancedQuantizationParameters(
        activations_quantization_params=QuantizationParameters(per_channel=per_channel))
    dataset = nncf.Dataset(list(make_zoo.inputs(16, 7)), lambda x: {"x": x[None]})
    onnx.save(nncf.quantize(make_zoo.float_model(), dataset, subset_size=16, advanced_parameters=advanced), str(path))
    return path


def test_nncf_onnx_backend_imports_exactly_and_trains(tmp_path):
    """Activations per tensor; the classifier's output float (NNCF's default: quantized to its reachable range)."""
    pytest.importorskip("nncf")
    path = nncf_onnx(tmp_path / "nncf.onnx", per_channel=False)
    _matches_onnxruntime(path, make_zoo.inputs(200, 11))
    _trains(path)


def test_nncf_default_per_channel_activations_import_within_one_lsb_and_train(tmp_path):
    """NNCF's default quantizes the depthwise Conv's input per channel: taken exactly into the Convs on both sides
    (frontends/onnx/channels.py); onnxruntime cannot fuse a per-channel output quantization into an integer kernel
    and computes that Conv in float32, so values within float32 error of a rounding tie may differ by one LSB."""
    pytest.importorskip("nncf")
    path = nncf_onnx(tmp_path / "nncf_default.onnx", per_channel=None)
    scales = [i for i in onnx.load(str(path)).graph.initializer if "scale_r1" in i.name]
    assert scales and scales[0].dims == [8]  # per channel, as NNCF writes it
    _matches_onnxruntime(path, make_zoo.inputs(200, 11), lsb=1)
    _trains(path)
