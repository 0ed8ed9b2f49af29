"""Reading the JSON configs (cost profiles, acceptance curves, plan profiles, buckets) with one error style.

Configs are read strictly: a field's JSON type is its type (``"sequential": "false"`` is a string, not a bool,
and is refused rather than read as true), unknown keys are refused (a misspelt key would otherwise be silently
ignored), and every error is a ValueError that names the file and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def read_json(path: str | Path) -> Any:
    """Parse ``path`` as strict UTF-8 JSON; anything wrong is a ValueError naming the file.

    A missing file stays FileNotFoundError. A folder, an unreadable file, bytes that are not UTF-8, invalid
    JSON, a key repeated in one object (JSON parsers keep the last silently) and NaN/Infinity are ValueErrors.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a JSON file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def json_type(value: object) -> str:
    """The JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def field_path(where: str, key: str) -> str:
    """``where`` extended by one field: ``FILE: key`` at the top of a file, ``FILE: a.b.key`` below it."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


def require_object(where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a JSON object; got {json_type(value)} {value!r}")
    return value


def check_keys(where: str, data: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse keys outside ``allowed``: a misspelt key would otherwise be ignored without a word."""
    allowed = tuple(allowed)
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {list(allowed)}")


def get_bool(where: str, data: Mapping[str, Any], key: str, default: bool) -> bool:
    if key not in data:
        return default
    value = data[key]
    if not isinstance(value, bool):
        raise ValueError(
            f"{field_path(where, key)} must be a JSON bool (true or false); got {json_type(value)} {value!r}"
        )
    return value


def get_str(where: str, data: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    if key not in data or (data[key] is None and default is None):
        return default
    value = data[key]
    if not isinstance(value, str):
        raise ValueError(f"{field_path(where, key)} must be a string; got {json_type(value)} {value!r}")
    return value


def get_str_list(where: str, data: Mapping[str, Any], key: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field_path(where, key)} must be an array of strings; got {value!r}")
    return list(value)


def get_number(where: str, value: object) -> float:
    """A finite JSON number (never a bool, a string or null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number; got {json_type(value)} {value!r}")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{where} must be finite; got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{where} must be finite; got {value!r}")
    return v
