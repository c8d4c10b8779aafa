"""``tinytrain quantize`` / ``tinytrain.quantize``: a float ONNX model quantized on calibration images
(tinytrain/quantizer.py). A small float model built with onnx.helper (BatchNormalization unfolded, a dynamic batch
dimension, as PyTorch exports write them); the accuracy of a trained MobileNetV2-style model is measured in
benchmarks/quantize_float.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tinytrain
from onnx_oracle import ir_layout
from tinytrain.cli import main
from tinytrain.errors import UsageError
from tinytrain.frontends import load_model
from tinytrain.input_mapping import KEY
from tinytrain.simulator import forward

ort = pytest.importorskip("onnxruntime")


def float_model(path, seed: int = 0):
    """x (N,1,12,12) -> Conv 3x3 (4) -> BatchNormalization -> Relu -> GlobalAveragePool -> Flatten -> Gemm (3)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w", rng.normal(0, 0.5, (4, 1, 3, 3))), ("b", rng.normal(0, 0.1, 4)), ("g", rng.uniform(0.5, 1.5, 4)),
        ("be", rng.normal(0, 0.1, 4)), ("m", rng.normal(0, 0.1, 4)), ("v", rng.uniform(0.5, 2, 4)),
        ("fw", rng.normal(0, 0.5, (3, 4))), ("fb", rng.normal(0, 0.1, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "float", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def images(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 12, 12, 1), dtype=np.uint8), rng.integers(0, 3, n)


def test_quantized_model_imports_carries_its_mapping_and_matches_onnxruntime(tmp_path):
    out = tmp_path / "m_int8.onnx"
    with pytest.warns(tinytrain.errors.Notice, match="pixel / 255"):
        done = tinytrain.quantize(float_model(tmp_path / "m.onnx"), images(40), out)
    assert (done.calibration, done.images, done.mapping.name) == ("minmax", 40, "unit")
    model = onnx.load(str(out))
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta[KEY])["name"] == "unit" and "per-channel int8 weights" in meta["tinytrain.quantized_by"]
    assert "BatchNormalization" not in {n.op_type for n in model.graph.node}  # folded before quantizing
    graph = load_model(out)
    x, _ = images(8, seed=5)
    real = (x.astype(np.float32) / np.float32(255)).transpose(0, 3, 1, 2)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    q = graph.tensors[graph.inputs[0]].quant
    xq = ir_layout(np.clip(np.rint(real / np.float32(q.s)) + q.zp, -128, 127).astype(np.int8))
    ours = np.concatenate([forward(graph, {graph.inputs[0]: xq[i:i + 1]})[graph.outputs[0]] for i in range(8)])
    oq = graph.tensors[graph.outputs[0]].quant
    theirs = np.concatenate([session.run(None, {"x": real[i:i + 1]})[0] for i in range(8)])
    want = np.clip(np.rint(theirs / np.float32(oq.s)) + oq.zp, -128, 127)
    assert np.abs(ours.astype(int) - want).max() <= 1  # the default session's float Add / pool: ties (requant.py)


def test_cli_quantize_writes_once_and_never_over_a_users_file(tmp_path, capsys):
    src = float_model(tmp_path / "m.onnx")
    x, y = images(20)
    np.savez(tmp_path / "calib.npz", x=x, y=y)
    args = ["quantize", str(src), "--data", str(tmp_path / "calib.npz"), "--input-mapping", "symmetric"]
    assert main([*args, "-o", str(tmp_path / "q.onnx")]) == 0
    assert "symmetric" not in capsys.readouterr().err
    np.savez(tmp_path / "big.npz", x=np.repeat(np.repeat(x, 2, axis=1), 2, axis=2), y=y)  # 24x24: resized, said
    big = [args[0], args[1], "--data", str(tmp_path / "big.npz"), *args[4:], "-o", str(tmp_path / "q24.onnx")]
    assert main(big) == 0
    assert "note: images resized from 24x24 to 12x12 (bilinear, aspect ratio kept)" in capsys.readouterr().out
    assert main([*args, "-o", str(tmp_path / "q.onnx")]) == 0  # its own output: replaced
    (tmp_path / "user.onnx").write_bytes(src.read_bytes())
    for target, said in (("user.onnx", "user.onnx"), ("m.onnx", "input")):
        assert main([*args, "-o", str(tmp_path / target)]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1
    assert (tmp_path / "user.onnx").read_bytes() == src.read_bytes()
    assert main([*args, "-o", str(tmp_path / "q.txt")]) == 2  # ONNX in a .txt: refused, nothing written
    assert f"would hold an ONNX model written by tinytrain, not a .txt file: name it {tmp_path / 'q.onnx'}" in \
        capsys.readouterr().err and not (tmp_path / "q.txt").exists()


def test_quantize_refuses_a_quantized_model_and_too_few_images(tmp_path):
    src = float_model(tmp_path / "m.onnx")
    tinytrain.quantize(src, images(20), tmp_path / "q.onnx", input_mapping="unit")
    with pytest.raises(UsageError, match="already quantized"):
        tinytrain.quantize(tmp_path / "q.onnx", images(20), tmp_path / "q2.onnx")
    with pytest.raises(UsageError, match="at least 10"):
        tinytrain.quantize(src, images(3), tmp_path / "q3.onnx", input_mapping="unit")
    with pytest.raises(UsageError, match="calibration=kl"):
        tinytrain.quantize(src, images(20), tmp_path / "q4.onnx", calibration="kl")
    assert not (tmp_path / "q2.onnx").exists() and not (tmp_path / "q3.onnx").exists()


def test_quantize_reads_weights_saved_as_external_data(tmp_path, capsys):
    """torch.onnx.export's default (dynamo) writes the weights to NAME.onnx.data beside the model: they were lost
    on the copy to onnxruntime's temporary folder ("float.onnx: ... should be stored in /tmp/tinytrain-quantize-...")."""
    model = onnx.load(str(float_model(tmp_path / "tmp.onnx")))
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.onnx.data",
              size_threshold=0)
    done = tinytrain.quantize(tmp_path / "m.onnx", images(20), tmp_path / "q.onnx", input_mapping="unit")
    assert done.ops > 0 and load_model(tmp_path / "q.onnx")
    (tmp_path / "m.onnx.data").unlink()
    assert main(["quantize", str(tmp_path / "m.onnx"), "--data", "fashion-mnist:train:20", "-o",
                 str(tmp_path / "q2.onnx")]) == 2
    err = capsys.readouterr().err
    assert "m.onnx.data" in err and "tinytrain-quantize" not in err and err.count("\n") == 1
    assert not (tmp_path / "q2.onnx").exists()
