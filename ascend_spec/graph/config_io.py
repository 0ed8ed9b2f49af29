"""Reading the JSON configs (cost profiles, acceptance curves, plan profiles, buckets) with one error style."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path) -> Any:
    """Parse ``path``; invalid JSON is a ValueError that names the file (a missing file stays FileNotFoundError)."""
    path = Path(path)
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
