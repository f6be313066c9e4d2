"""A JSON form of vLLM scheduler objects, for field-by-field comparison across processes."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


def canon(obj: Any) -> Any:
    """Dataclasses and msgspec structs -> ``{"__type__": name, field: ...}``, recursively.

    Sets become sorted lists, tuples are tagged (a tuple of block lists is not a list).
    """
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return {"__enum__": f"{type(obj).__name__}.{obj.name}"}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {"__type__": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = canon(getattr(obj, f.name))
        return out
    struct_fields = getattr(type(obj), "__struct_fields__", None)
    if struct_fields is not None:
        out = {"__type__": type(obj).__name__}
        for name in struct_fields:
            out[name] = canon(getattr(obj, name))
        return out
    if isinstance(obj, dict):
        return {str(k): canon(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, tuple):
        return {"__tuple__": [canon(x) for x in obj]}
    if isinstance(obj, list):
        return [canon(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return {"__set__": sorted((canon(x) for x in obj), key=repr)}
    return {"__repr__": repr(obj)}
