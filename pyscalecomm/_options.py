"""Per-group options for the scalecomm backend.

``Options`` is generated from the settings the compiled core declares
(``pyscalecomm.params()``): one field per group setting, so a setting added
in the core appears here, in ``BackendConfig`` and in the docs table at once.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from pyscalecomm import _C


def _to_ms(t) -> int:
    if isinstance(t, timedelta):
        return max(1, int(t.total_seconds() * 1000))
    return max(1, int(float(t) * 1000))


def _field_name(option: str) -> str:
    # Durations are given as timedelta (or seconds) and kept in milliseconds.
    return option[: -len("_ms")] if option.endswith("_ms") else option


def _apply_to(self, config) -> None:
    """Copies the fields that are set onto a ``_C.BackendConfig``."""
    for p in _GROUP_PARAMS:
        value = getattr(self, _field_name(p["option"]))
        if value is None:
            continue
        if p["option"].endswith("_ms"):
            value = _to_ms(value)
        elif p["size"] and isinstance(value, str):
            try:
                value = _C.parse_size(value)
            except ValueError as e:
                raise ValueError(f"Options({p['option']}={value!r}): {e}") from None
        elif p["type"] == "int":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"Options({p['option']}={value!r}): not a whole number") from None
        else:
            value = str(value)
        setattr(config, p["option"], value)


def _docstring() -> str:
    lines = [
        "Settings for one scalecomm process group, passed as ``pg_options``.",
        "",
        "Any field left as ``None`` falls back to its ``SCALECOMM_*`` environment",
        "variable, then to the built-in default (see ``pyscalecomm.params()``).",
        "",
        "Attributes:",
    ]
    for p in _GROUP_PARAMS:
        unit = " (a timedelta or seconds)" if p["option"].endswith("_ms") else ""
        default = p["default"] or "empty"
        lines.append(f"    {_field_name(p['option'])}{unit}: {p['doc']} [{p['name']}, default {default}]")
    return "\n".join(lines)


def _torch_timeout(self) -> timedelta | None:
    """The group's timeout under the name torch's own backend options use
    (``DeviceMesh`` and ``init_device_mesh(backend_override=...)`` read it)."""
    t = self.timeout
    if t is None or isinstance(t, timedelta):
        return t
    return timedelta(seconds=float(t))


_GROUP_PARAMS = [p for p in _C.params() if p["option"]]

Options = dataclasses.make_dataclass(
    "Options",
    [
        (
            _field_name(p["option"]),
            "timedelta | float | None" if p["option"].endswith("_ms") else f"{p['type']} | None",
            dataclasses.field(default=None),
        )
        for p in _GROUP_PARAMS
    ],
    namespace={"apply_to": _apply_to, "_timeout": property(_torch_timeout), "__doc__": _docstring()},
)
Options.__module__ = __name__
