"""Kernel selection (issue 31): the forward convolution's variants are named units in one ordered list
(bindings/conv2d/forward.py VARIANTS), and ``tinytrain compile --explain`` prints per convolution the variant chosen
and why not the earlier ones."""

from pathlib import Path

from tinytrain import api
from tinytrain.cli import main
from tinytrain.codegen.bindings.conv2d.forward import OTHER_KIND, VARIANTS

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "mbv1-0.25-vww.onnx"
NAMES = {v.name for v in VARIANTS}


def _chosen(entry: str) -> str:
    """The variant name of one --explain entry ("node: variant (kernel, template); costs")."""
    return entry.split("\n")[0].split(": ", 1)[1].split(" (tt_")[0]


def test_compile_explain_names_each_convolutions_variant_and_why_not_the_earlier_ones(tmp_path, capsys):
    assert main(["compile", str(MODEL), "--explain", "-o", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out.split("kernel variants (")[1]
    entries = text.split("\nnode:")[1:]
    convs = [n for n in api.load_model(MODEL).nodes if n.op == "conv2d"]
    assert len(entries) == len(convs)
    order = [v.name for v in VARIANTS]
    for entry in entries:
        chosen = _chosen(entry)
        assert chosen in NAMES, entry
        assert "B of flash" in entry.split("\n")[0]
        for line in entry.split("\n")[1:]:  # every variant named as not taken comes earlier in the list
            if line.strip().startswith("not "):
                name = line.strip()[4:].split(": ")[0]
                assert order.index(name) < order.index(chosen), entry
    # a Cortex-M target takes no host variant; the small maps of the last layers take depthwise_map
    assert not any(_chosen(e).startswith("host") for e in entries)
    assert any(_chosen(e) == "depthwise map" for e in entries)


def test_a_host_build_takes_the_host_variants_and_says_why_for_the_others():
    choices = api.compile(MODEL, target="").kernel_choices
    chosen = [_chosen(": " + c.split(": ", 1)[1]) for c in choices]
    assert chosen and all(name.startswith("host") for name in chosen)
    assert all("Cortex-M" not in c for c in choices)


def test_each_kind_of_convolution_ends_with_a_variant_that_always_applies():
    """The last depthwise, pointwise and regular variants only ask for their kind: the choice never falls through."""
    for kind in ("depthwise four channels", "pointwise", "regular"):
        v = next(v for v in VARIANTS if v.name == kind)
        assert v is [u for u in VARIANTS if u.template == v.template and u.name.split()[0] == kind.split()[0]][-1]
    assert set(OTHER_KIND) >= {"not depthwise", "not pointwise", "not a regular convolution"}
