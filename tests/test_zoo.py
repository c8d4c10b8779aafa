"""Model zoo: architectures, their published sizes, and the committed int8 ONNX files.

Fast (no training): builds each network, runs one forward pass, and inspects the ONNX files
that `python -m models.build` wrote next to `models/provenance.json`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

import models  # noqa: E402
from models import ZOO, build_model, count_deploy_params, count_macs, count_params  # noqa: E402

torch.set_num_threads(1)
MODELS_DIR = ROOT / "models"
PROV = json.loads((MODELS_DIR / "provenance.json").read_text())
NAMES = list(ZOO)

# Exact sizes of this code's architectures with a 1000-class ImageNet head at the published
# resolution (a regression guard), and the published figures they reproduce.
IMAGENET_REFERENCE = {
    # name: (params, MACs) with a 1000-class head at ZOO[name].published["resolution"]
    "mbv2-w0.35": (750_280, 23_499_152),
    "proxyless-w0.3": (754_280, 38_282_216),
    "mcunet-5fps": (636_232, 12_790_096),
    "mbv1-0.25-vww": (470_072, 41_030_272),
}
ALLOWED_INT8_OPS = {"QuantizeLinear", "DequantizeLinear", "Conv", "Add", "GlobalAveragePool", "ReduceMean",
                    "Flatten", "Reshape", "Gemm", "MatMul", "Relu", "Clip"}


def _load(name):
    return onnx.load(str(MODELS_DIR / ZOO[name].onnx_file))


def _inits(m):
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


# --------------------------------------------------------------------------- architectures

def test_registry_names_and_errors():
    assert NAMES == ["mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps", "mbv1-0.25-vww"]
    with pytest.raises(ValueError, match="unknown model"):
        build_model("resnet50")
    assert build_model("mbv2-w0.35").classifier.out_features == 2  # default head


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("num_classes", [2, 10])
def test_forward_shape(name, num_classes):
    m = build_model(name, num_classes).eval()
    s = ZOO[name].input_size
    assert s == (96 if name == "mbv1-0.25-vww" else 128)
    with torch.no_grad():
        y = m(torch.rand(1, 3, s, s))
    assert tuple(y.shape) == (1, num_classes)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", NAMES)
def test_sizes_match_published_architecture(name):
    pub = ZOO[name].published
    m = build_model(name, pub["num_classes"])
    params, macs = count_params(m), count_macs(m, pub["resolution"])
    assert (params, macs) == IMAGENET_REFERENCE[name]
    # MCUNet-zoo figures are given to 2-3 significant digits; the MobileNet paper's 0.5 M is rounder.
    tol = 0.07 if name == "mbv1-0.25-vww" else 0.01
    assert abs(params - pub["params"]) / pub["params"] < tol
    assert abs(macs - pub["macs"]) / pub["macs"] < 0.01


def test_block_structure_details():
    mb = build_model("mcunet-5fps")
    dw_kernels = [mod.kernel_size[0] for mod in mb.modules()
                  if isinstance(mod, torch.nn.Conv2d) and mod.groups > 1]
    assert dw_kernels == [3, 3, 3, 7, 3, 3, 7, 5, 3, 3, 7, 5, 5, 3]
    assert mb.classifier.in_features == 160
    assert build_model("mbv2-w0.35").classifier.in_features == 448
    assert build_model("mbv2-w0.35", last_channel=1280).classifier.in_features == 1280
    assert build_model("proxyless-w0.3").classifier.in_features == 384
    mv1 = build_model("mbv1-0.25-vww")
    assert not any(isinstance(mod, torch.nn.ReLU6) for mod in mv1.modules())
    assert mv1.classifier.in_features == 256


@pytest.mark.parametrize("name", NAMES)
def test_params_and_macs_match_provenance(name):
    p = PROV["models"][name]
    m = build_model(name, p["num_classes"])
    assert count_params(m) == p["params"]
    assert count_deploy_params(m) == p["deploy_params"]
    assert count_macs(m, ZOO[name].input_size) == p["macs"]


def test_bn_fold_is_exact():
    m = build_model("mcunet-5fps", 10)
    # give BN non-trivial statistics
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    m.eval()
    f = models.fold_bn(m)
    assert not any(isinstance(mod, torch.nn.BatchNorm2d) for mod in f.modules())
    x = torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        assert torch.allclose(m(x), f(x), atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- committed ONNX files

@pytest.mark.parametrize("name", NAMES)
def test_onnx_sha256_matches_provenance(name):
    p = PROV["models"][name]
    path = MODELS_DIR / p["file"]
    assert p["file"] == ZOO[name].onnx_file
    assert hashlib.sha256(path.read_bytes()).hexdigest() == p["sha256"]
    assert path.stat().st_size == p["file_bytes"]
    assert path.stat().st_size < 1_000_000


@pytest.mark.parametrize("name", NAMES)
def test_onnx_runs_in_onnxruntime(name):
    p = PROV["models"][name]
    s = ZOO[name].input_size
    sess = ort.InferenceSession(str(MODELS_DIR / p["file"]), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    (out,) = sess.get_outputs()
    assert inp.name == "input" and inp.shape == [1, 3, s, s] and inp.type == "tensor(float)"
    assert out.name == "logits" and out.shape == [1, p["num_classes"]]
    x = (np.random.default_rng(0).integers(0, 256, (1, 1, s, s)).astype(np.float32) / 255).repeat(3, 1)
    y = sess.run(None, {"input": x})[0]
    assert y.shape == (1, p["num_classes"]) and np.isfinite(y).all()


@pytest.mark.parametrize("name", NAMES)
def test_onnx_is_int8_qdq_per_channel(name):
    p = PROV["models"][name]
    m = _load(name)
    onnx.checker.check_model(m)
    inits = _inits(m)
    producers = {o: n for n in m.graph.node for o in n.output}
    ops = {n.op_type for n in m.graph.node}
    assert ops <= ALLOWED_INT8_OPS, ops - ALLOWED_INT8_OPS
    assert ops >= {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"}
    n_conv = n_gemm = 0
    for n in m.graph.node:
        if n.op_type not in ("Conv", "Gemm"):
            continue
        n_conv += n.op_type == "Conv"
        n_gemm += n.op_type == "Gemm"
        x_dq, w_dq, b_dq = (producers[i] for i in n.input[:3])
        # activations: int8, one scale / zero point per tensor
        assert x_dq.op_type == "DequantizeLinear"
        assert inits[x_dq.input[1]].shape == () and inits[x_dq.input[2]].dtype == np.int8
        # weights: int8, symmetric (zero point 0), one scale per output channel on axis 0
        assert w_dq.op_type == "DequantizeLinear"
        w, ws, wz = (inits[i] for i in w_dq.input)
        axis = next((a.i for a in w_dq.attribute if a.name == "axis"), 1)
        assert w.dtype == np.int8 and axis == 0
        assert ws.dtype == np.float32 and ws.shape == (w.shape[0],) and np.all(ws > 0)
        assert wz.dtype == np.int8 and not wz.any()
        assert w.min() >= -127  # symmetric range
        if n.op_type == "Gemm":
            assert next(a.i for a in n.attribute if a.name == "transB") == 1
        # bias: int32 with scale = s_x * s_w per channel
        assert b_dq.op_type == "DequantizeLinear"
        b, bs, _ = (inits[i] for i in b_dq.input)
        assert b.dtype == np.int32 and b.shape == (w.shape[0],)
        sx = inits[x_dq.input[1]]
        np.testing.assert_allclose(bs, sx * ws, rtol=1e-6)
    assert (n_conv, n_gemm) == (p["n_conv"], p["n_gemm"]) and n_gemm == 1
    assert sum(n.op_type == "Conv" for n in m.graph.node) == p["int8_ops"]["Conv"]


@pytest.mark.parametrize("name", NAMES)
def test_input_quantization_is_pixel_minus_128(name):
    m = _load(name)
    inits = _inits(m)
    (q,) = [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input"]
    scale, zp = inits[q.input[1]], inits[q.input[2]]
    assert scale.dtype == np.float32 and scale.shape == () and scale == np.float32(1 / 255)
    assert zp.dtype == np.int8 and zp.shape == () and int(zp) == -128
    # and onnxruntime's QuantizeLinear with exactly these parameters maps pixel/255 -> pixel - 128
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [256])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT8, [256])],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    qm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    qm.ir_version = m.ir_version
    sess = ort.InferenceSession(qm.SerializeToString(), providers=["CPUExecutionProvider"])
    pixels = np.arange(256)
    y = sess.run(None, {"x": pixels.astype(np.float32) / np.float32(255)})[0]
    np.testing.assert_array_equal(y.astype(np.int32), pixels - 128)


def test_provenance_records_accuracy_and_recipe():
    for name in NAMES:
        p = PROV["models"][name]
        assert 0.5 < p["float_acc"] <= 1 and 0.5 < p["int8_acc"] <= 1
        assert abs(p["float_acc"] - p["int8_acc"]) < 0.05
        assert p["data"]["dataset"].startswith("Fashion-MNIST")
        assert p["command"].startswith("python -m models.build")
        assert p["recipe"]["epochs"] >= 1
    assert (MODELS_DIR / "README.md").read_text().count("|") > 20


def test_builder_reports_missing_data(monkeypatch, tmp_path, capsys):
    from models import build, data
    monkeypatch.setattr(data, "DATA_DIRS", [str(tmp_path)])
    rc = build.main(["--only", "mbv1-0.25-vww", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "make setup" in err
    assert not (tmp_path / "out").exists()
