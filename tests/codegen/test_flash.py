"""The report's flash is the emitted C's (tinytrain/codegen/flash.py): its constant arrays counted exactly, its code
estimated from its kernels; plain kernels where the derived tables would overflow the flash budget. Against the
linker: tests/firmware/test_persist.py (every shipped plan's firmware on qemu-m55)."""

import re

import numpy as np
import pytest

import tinytrain
from tinytrain.codegen.bindings.conv2d.layer import PLAIN
from tinytrain.codegen.context import MODEL_SOURCE
from tinytrain.codegen.flash import constant_bytes, emitted_code_bytes
from tinytrain.errors import BudgetError

from ir_builders import tiny_mobilenet

_ARRAY = re.compile(r"^static const (\w+) \w+\[(\d+)\]", re.M)
_CTYPES = {"int8_t": np.int8, "uint8_t": np.uint8, "int16_t": np.int16, "uint16_t": np.uint16, "int32_t": np.int32,
           "uint32_t": np.uint32, "float": np.float32}


def _declared_bytes(source: str) -> int:
    """The bytes of every sized constant array the source declares."""
    return sum(int(n) * np.dtype(_CTYPES[t]).itemsize for t, n in _ARRAY.findall(source))


def test_the_reports_flash_is_the_emitted_constants_plus_the_code_estimate():
    """The tables kernels derive (packed rows) and the trainable copies' initial values count; so does each kernel."""
    g, _ = tiny_mobilenet()
    c = tinytrain.compile(g, sram="256k", update="last-k:2")
    source = c.files[MODEL_SOURCE]
    assert "_weight_packed[" in source and "_init[" in source
    assert c.report.weights_flash_bytes == constant_bytes(source) == _declared_bytes(source)
    assert c.report.code_bytes == emitted_code_bytes(source) and c.report.flash_bytes > _declared_bytes(source)
    assert c.options.plain == () and c.to_json()["plain_kernels"] == []


@pytest.mark.slow
def test_tables_that_would_overflow_the_flash_budget_give_way_to_plain_kernels():
    """One byte less flash than the packed tables need: plain kernels, no table, fits, and --explain says why; one byte
    less than that: refused with the flash line."""
    g, _ = tiny_mobilenet()
    packed = tinytrain.compile(g, sram="256k", update="last-k:2").report
    c = tinytrain.compile(g, sram="256k", flash=packed.flash_bytes - 1, update="last-k:2")
    assert c.report.fits and c.report.flash_bytes < packed.flash_bytes
    assert c.options.plain and "_packed[" not in c.files[MODEL_SOURCE]
    assert c.to_json()["plain_kernels"] == list(c.options.plain)
    assert any(PLAIN in choice for choice in c.kernel_choices)
    with pytest.raises(BudgetError, match="of flash"):
        tinytrain.compile(g, sram="256k", flash=c.report.flash_bytes - 1, update="last-k:2")


def test_the_gradient_proof_runs_once_per_compile_whatever_the_flash_retries(monkeypatch):
    """compile proves the step's gradients finite once and passes the proof to every emission (EmitOptions.proof):
    at a flash budget that makes it emit again with plain kernels, still one proof."""
    from tinytrain import compilation
    from tinytrain.codegen import emit_train, flash
    from tinytrain.training import finite

    g, _ = tiny_mobilenet()
    packed = tinytrain.compile(g, sram="256k", update="last-k:2").report
    calls = []

    def counted(graph):
        calls.append(graph.name)
        return finite.gradient_bounds(graph)

    for module in (compilation, flash, emit_train):
        monkeypatch.setattr(module, "gradient_bounds", counted)
    c = tinytrain.compile(g, sram="256k", flash=packed.flash_bytes - 1, update="last-k:2")
    assert c.options.plain and c.options.proof is not None and len(calls) == 1
    assert c.nonfinite_guard == c.options.proof.to_json()
