"""Readers of ``torch.export`` graphs' aten nodes, shared by every consumer of a traced model.

:func:`is_conv` and :func:`conv_args` read a conv node whatever its overload (``aten.conv2d``,
``aten.convolution``, ``aten.conv_transpose2d`` ...) and wherever its arguments sit (positional or keyword);
:func:`module_of` and :func:`where` name a node by the module it came from.

>>> pair(3), pair([2, 1]), padding_pair("same", (1, 1), (3, 3), (1, 1))
((3, 3), (2, 1), (1, 1))
"""

from __future__ import annotations

from typing import Any


def is_conv(target: Any) -> bool:
    """Whether an aten target is a convolution of any kind (1-D, 2-D, 3-D, transposed)."""
    return str(target).startswith(("aten.conv2d.", "aten.convolution.", "aten._convolution.", "aten.conv1d.",
                                   "aten.conv3d.", "aten.conv_transpose"))


def conv_args(node: Any) -> dict[str, Any]:
    """stride, padding, dilation, groups and transposed of a conv node, keyword arguments read and defaults
    filled in (``padding`` stays a string when the model says ``"same"`` or ``"valid"``)."""
    name = str(node.target)
    args = list(node.args) + [None] * 12
    kw = node.kwargs
    if name.startswith(("aten.convolution.", "aten._convolution.")):
        out = {"stride": args[3], "padding": args[4], "dilation": args[5], "transposed": bool(args[6]),
               "groups": args[8]}
    elif name.startswith("aten.conv_transpose"):
        out = {"stride": args[3], "padding": args[4], "dilation": args[7], "transposed": True, "groups": args[6]}
    else:
        out = {"stride": args[3], "padding": args[4], "dilation": args[5], "transposed": False, "groups": args[6]}
    for key in ("stride", "padding", "dilation", "groups"):
        if key in kw:
            out[key] = kw[key]
    defaults = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1}
    for key, default in defaults.items():
        if out[key] is None:
            out[key] = default
    for key in ("stride", "dilation"):
        out[key] = pair(out[key])
    if not isinstance(out["padding"], str):
        out["padding"] = pair(out["padding"])
    return out


def pair(value: Any) -> tuple[int, int]:
    """An int or a one- or two-element sequence as (h, w)."""
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def padding_pair(padding: Any, dilation: tuple[int, int], kernel: tuple[int, int],
                 stride: tuple[int, int]) -> tuple[int, int] | None:
    """Symmetric (ph, pw), or ``None`` when ``padding="same"`` needs an asymmetric pad."""
    if padding == "valid":
        return 0, 0
    if padding == "same":
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return None if any(t % 2 for t in totals) else (totals[0] // 2, totals[1] // 2)
    return tuple(padding)  # type: ignore[return-value]


def where(node: Any) -> str:
    """The module a node was traced in (``layer1.0.relu``), else the node's name."""
    stack = node.meta.get("nn_module_stack") or {}
    return (list(stack.values())[-1][0] if stack else "") or node.name


def module_of(node: Any) -> str:
    """The module path of a layer node: its weight's owner (``layer1.0.conv1``), else :func:`where` it is."""
    weight = node.args[1] if len(node.args) > 1 else None
    if getattr(weight, "op", None) == "get_attr" and "." in str(weight.target):
        return str(weight.target).rsplit(".", 1)[0]
    return where(node)


def arg(node: Any, index: int, name: str, default: Any = None) -> Any:
    """A node's argument by position or keyword (``default`` when absent or ``None``)."""
    value = node.args[index] if len(node.args) > index else node.kwargs.get(name)
    return default if value is None else value
