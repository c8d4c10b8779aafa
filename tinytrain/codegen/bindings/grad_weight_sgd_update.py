"""A weight gradient fused with its SGD update (ops/grad_weight_sgd_update.py): the kernel that calls a
grad-weight kernel and the update kernel a block of rows at a time, or, for a pointwise gradient, the kernel that holds
the gradient 4 rows x 4 inputs at a time in registers and updates each tile at once (grad_weight_sgd_update_tiles.c.j2:
on Cortex-M the blocked form spends 7-8 instructions per multiply-add, converting each input again for each row of a
block of one or two rows and keeping its sums in memory). Each op with a fused form binds it in its own module
(``conv2d``, ``fully_connected``) through ``fused_call``.
"""

from __future__ import annotations

from tinytrain.codegen.bindings.sgd_update import update_call
from tinytrain.codegen.bindings.sgd_update_int import update_int_call
from tinytrain.codegen.context import Call, Param, Signature
from tinytrain.ir import Node
from tinytrain.ops import grad_weight_sgd_update as fused
from tinytrain.ops.sgd_update import packed


# The fused kernel (template grad_weight_sgd_update) calls the two kernels on the block of rows r0 .. r0+rows-1 of
# the selection: their parameters named here get these arguments, the others the fused kernel's parameter of the
# same name (its parameters: the union of theirs but the block's own, plus scratch and B).
_BLOCK_GRAD_ARGS = {"gw": "scratch", "c0": "c0 + r0", "Cs": "rows"}
_BLOCK_UPDATE_ARGS = {"param": "param + r0 * E", "grad": "scratch", "scale": "scale + r0",
                      "momentum": "momentum + r0 * E", "remainder": "remainder + r0 * E", "Cs": "rows", "i0": "r0 * E"}
_BLOCK_ONLY = ("gw", "grad", "i0")
_BLOCK_INT_UPDATE_ARGS = dict(_BLOCK_UPDATE_ARGS, fixed="fixed + 2 * r0")  # sgd_update_int's (M, sh) per row
# A host build's pointwise gradient sums four rows at a time (conv2d_grad_weight.c.j2, host): its fused kernel gives it
# blocks of four rows in a stack array, whatever the plan's block (the scratch a device's arena has room for).
HOST_BLOCK_ROWS = 4


def _param_name(p: Param) -> str:
    return p.decl.split()[-1].lstrip("*")


def _args(call: Call) -> dict[str, str]:
    return {_param_name(p): arg for p, arg in zip(call.kernel.params, call.args, strict=True)}


def _tiles(grad: Call, block: int) -> bool:
    """Whether the fused kernel holds the gradient 4 rows x 4 input channels at a time in registers
    (grad_weight_sgd_update_tiles.c.j2): a pointwise gradient (not a host build's, which has its own vectorized form,
    docs/design.md §4) of at least 4 rows of at least 4 inputs, whose list of pixels (5 floats each) fits the
    node's scratch (``block`` rows of Ci floats). Like the blocked form's four-row groups, the tiles skip the pixels
    where 4 rows' gz are all zero (clamp masks make many)."""
    k, args = dict(grad.kernel.consts), _args(grad)
    return (k.get("variant") == "pointwise" and not k["host"] and int(args["Cs"]) >= 4 and int(args["Ci"]) >= 4
            and 5 * int(args["P"]) <= block * int(args["Ci"]))


def _merged(node: Node, calls: tuple[Call, ...]) -> Signature:
    """The fused kernel's parameters: those of ``calls`` but the block's own, each name once."""
    s = Signature()
    args: dict[str, str] = {}
    for call in calls:
        for p, arg in zip(call.kernel.params, call.args, strict=True):
            name = _param_name(p)
            if name in _BLOCK_ONLY:
                continue
            if name in args:
                if args[name] != arg:
                    raise AssertionError(f"{node.name}: {name} is {args[name]} for the update, {arg} for the gradient")
                continue
            args[name] = arg
            s.add(p.decl, arg, p.comment)
    return s


def fused_call(node: Node, ctx, grad_weight) -> Call:
    """The fused node (ops/grad_weight_sgd_update.py): ``grad_weight`` (a grad-weight binding body) and the update,
    called per block of ``attrs.block`` rows with the block's gradient in the node's scratch; a pointwise gradient in
    tiles of registers instead where it can (``_tiles``)."""
    a = node.attrs
    names = list(node.inputs) + [""] * (fused.REMAINDER + 1 - len(node.inputs))
    grad = grad_weight(node, ctx, a.grad, (names[fused.G_Z], names[fused.X]), "", None)
    if _tiles(grad, a.block):
        update = update_call(node, ctx, a.update, names[fused.PARAM], "", names[fused.SCALE], names[fused.MOMENTUM],
                             names[fused.STEP], names[fused.REMAINDER], block=False)
        s = _merged(node, (update, grad))
        s.add("float *scratch", ctx.scratch(node), "(P,5): the listed pixels")
        name = f"{grad.kernel.name}_tiles_{update.kernel.name.removeprefix('tt_')}"
        return s.call("grad_weight_sgd_update_tiles", name, dict(update.kernel.consts))
    scratch = ctx.scratch(node)
    host_rows = HOST_BLOCK_ROWS if dict(grad.kernel.consts).get("host") else 0
    update = update_call(node, ctx, a.update, names[fused.PARAM], scratch, names[fused.SCALE], names[fused.MOMENTUM],
                         names[fused.STEP], names[fused.REMAINDER], block=True)
    block_args = dict(_BLOCK_UPDATE_ARGS, remainder="remainder + r0 * ((E + 1) / 2)") if packed(a.update.remainder_bits) \
        else _BLOCK_UPDATE_ARGS
    grad = grad_weight(node, ctx, a.grad, (names[fused.G_Z], names[fused.X]), scratch, host_rows or a.block)
    s = _merged(node, (update, grad))
    if not host_rows:
        s.add("float *scratch", scratch, "(B,E)")
        s.ints(B=a.block)
    consts = dict(grad_kernel=grad.kernel.name, update_kernel=update.kernel.name,
                  grad_args=tuple(_BLOCK_GRAD_ARGS.get(n, n) for n in map(_param_name, grad.kernel.params)),
                  update_args=tuple(block_args.get(n, n) for n in map(_param_name, update.kernel.params)),
                  host_rows=host_rows)
    return s.call("grad_weight_sgd_update", f"{grad.kernel.name}_{update.kernel.name.removeprefix('tt_')}", consts,
                  (grad.kernel, update.kernel))


def fused_int_call(node: Node, ctx, grad_weight_int) -> Call:
    """The integer step's fused node (ops/grad_weight_sgd_update.py): ``grad_weight_int`` (an integer grad-weight
    binding body) and ``sgd_update_int``'s kernel per block of ``attrs.block`` rows, the block's int32 gradient in the
    node's scratch; the same kernel as the float blocks' (grad_weight_sgd_update.c.j2)."""

    a = node.attrs
    names = list(node.inputs) + [""] * (fused.EXP + 1 - len(node.inputs))
    scratch = ctx.int_scratch(node)
    update = update_int_call(node, ctx, a.update, names[fused.PARAM], scratch, names[fused.SCALE], names[fused.STEP],
                             names[fused.REMAINDER], names[fused.EXP], block=True)
    grad = grad_weight_int(node, ctx, a.grad, (names[fused.G_Z], names[fused.X]), scratch)
    block_args = dict(_BLOCK_INT_UPDATE_ARGS, remainder="remainder + r0 * ((E + 1) / 2)") \
        if packed(a.update.remainder_bits) else _BLOCK_INT_UPDATE_ARGS
    s = _merged(node, (update, grad))
    s.add("tt_i32a *scratch", scratch, "(B,E)")
    s.ints(B=a.block)
    consts = dict(grad_kernel=grad.kernel.name, update_kernel=update.kernel.name,
                  grad_args=tuple(_BLOCK_GRAD_ARGS.get(n, n) for n in map(_param_name, grad.kernel.params)),
                  update_args=tuple(block_args.get(n, n) for n in map(_param_name, update.kernel.params)),
                  host_rows=0)
    return s.call("grad_weight_sgd_update", f"{grad.kernel.name}_{update.kernel.name.removeprefix('tt_')}", consts,
                  (grad.kernel, update.kernel))
