"""Result files: JSON written atomically, so an interrupted run never leaves half a file."""

from __future__ import annotations

import json
import os
import tempfile


def write_json_atomic(path: str, payload) -> None:
    """Write `payload` as JSON to `path` via a temporary file in the same folder and os.replace.

    The file is made world-readable (0644): results are committed and shared.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
