"""Import a script that is not in a package (benchmarks/*.py, examples/*.py) as a module."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load_script(path: str):
    """The module at `path` (relative to the repository root, or absolute), executed once per call."""
    path = path if os.path.isabs(path) else os.path.join(ROOT, path)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
