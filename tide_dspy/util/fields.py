"""Reading a field from a dict or an object alike (DSPy predictions and LM outputs come as either)."""

from __future__ import annotations

from typing import Any


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    """obj[name] for a mapping, else obj.name; `default` when absent."""
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)
