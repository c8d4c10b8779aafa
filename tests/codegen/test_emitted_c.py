"""The emitted C is byte-identical to the hashes recorded before the kernel selection was restructured (issue 31,
tests/golden/emitted_c.py): every zoo model (inference and its shipped plans), the VWW TFLite models and a host
build, for each target."""

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parents[1] / "golden"
sys.path.insert(0, str(GOLDEN))
import emitted_c  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name,model,kwargs", emitted_c.cases(), ids=[c[0] for c in emitted_c.cases()])
def test_emitted_c_is_byte_identical(name, model, kwargs):
    if not Path(model).exists():
        pytest.skip(f"{model} is absent (../shared is only beside the project on developer and CI machines)")
    recorded = json.loads((GOLDEN / "emitted_c.json").read_text())["hashes"]
    for target in emitted_c.TARGETS:
        assert emitted_c.emitted_hashes(model, kwargs, target) == recorded[emitted_c.key(name, target)], target
