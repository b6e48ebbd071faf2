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


def resume_json(path: str, settings: dict, fresh: bool = False) -> dict | None:
    """The JSON at `path` to resume, when it was written with `settings`: None when there is no
    file or with `fresh` (the run starts over and replaces it).

    A resumable result file keeps, at its top level, the settings its records depend on; a run
    continues it only when each key of `settings` holds the same value there, so records of two
    configurations never mix and a file of another configuration is never overwritten silently.

    Raises:
        ValueError naming `output`: the file holds other values for some of `settings` (it is
            left as it is).
    """
    if fresh or not os.path.exists(path):
        return None
    with open(path) as handle:
        old = json.load(handle)
    differ = [key for key, value in settings.items() if old.get(key) != value]
    if differ:
        raise ValueError(f"output: {path} was written with other {', '.join(differ)}; pass --fresh to "
                         f"replace it or choose another output")
    return old
