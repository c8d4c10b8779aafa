"""The C binding of ``add`` (ops/add.py): int8 elementwise add with rescaled inputs.

Each input's rescaled term depends on its int8 value alone, so it is a table of 256 int32 (ops/add.py input_term,
the reference's own arithmetic; 2 KB of flash per add): an element costs two table reads and the output's
requantization. Measured on qemu-m7 (mbv2-w0.35's adds, 27 K elements a step): 13 instructions per element, where
three requantizations took 39.
"""

from __future__ import annotations

import numpy as np

from tinytrain.codegen.bindings.common import rounding_suffix, rq_helper, rq_operand
from tinytrain.codegen.context import Binding, Call, Signature
from tinytrain.ir import Node
from tinytrain.ops.add import input_term

# The int8 values in the order of their bytes read unsigned: 0 .. 127, then -128 .. -1 (add.c.j2 indexes the
# tables with the input byte as is).
INT8_BYTES = np.arange(256, dtype=np.uint8).view(np.int8)


def add(node: Node, ctx) -> Call:
    a = node.attrs
    x1, x2, y = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1]), ctx.tensor(node.outputs[0])
    s = Signature()
    s.add("int8_t *out", ctx.act(y.name), "(N,)")
    s.add("const int8_t *in1", ctx.act(x1.name), "(N,)")
    s.add("const int8_t *in2", ctx.act(x2.name), "(N,)")
    for k, x in enumerate((x1, x2)):
        s.add(f"const int32_t *term{k + 1}", ctx.table(node, f"term{k + 1}",
                                                       input_term(a, k, x.quant.zp, INT8_BYTES).astype(np.int32)),
              f"(256,): input {k + 1}'s rescaled term of each int8 value, by its byte (0 .. 127, -128 .. -1)")
    s.ints(N=y.size)
    rq = rq_helper(a.output)
    s.int32s(out_zp=y.quant.zp, out_multiplier=a.output.multiplier[0],
             out_shift=int(rq_operand(rq, a.output.multiplier[0], a.output.shift[0])))
    sat = (a.act_min, a.act_max) == (-128, 127)  # the full int8 range: the clamp is a saturation (add.c.j2 "sat")
    if not sat:
        s.int32s(act_min=a.act_min, act_max=a.act_max)
    host = ctx.host and rq == "tt_requantize_single"  # add.c.j2: eight at a time in AVX2 registers (tt_rows.h)
    return s.call("add", "tt_add_s8" + rounding_suffix(a.output) + ("_sat" if sat else "") + ("_host" if host else ""),
                  dict(rq_out=rq, sat=sat, host=host))


BINDINGS: dict[str, Binding] = {
    "add": add,
}
