"""The engine and the peer call transformers' current cache API (``cache=``, ``out.cache``): one
decode of a tiny model, target-only, speculative and through assisted generation, shows a user no
FutureWarning / DeprecationWarning and logs no deprecation notice from transformers."""

from __future__ import annotations

import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.bench.peer import hf_assisted  # noqa: E402
from verispec.empirical import engine, methods  # noqa: E402

from .test_decode_tiny import tiny  # noqa: E402


class _Notices(logging.Handler):
    """Collects the records of transformers' own logger (its deprecation notices go there)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_one_decode_emits_no_transformers_deprecation():
    target, draft = tiny(64, 0), tiny(64, 0, noise=0.1)
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    notices, logger = _Notices(), logging.getLogger("transformers")
    logger.addHandler(notices)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # a notice shown before in this process is shown again
            engine.decode(target, None, prompt, engine.target_only_method(), 6)
            engine.decode(target, draft, prompt, methods.get("block", draft_length=3), 6)
            hf_assisted(target, draft, prompt, 6)
    finally:
        logger.removeHandler(notices)
    deprecations = [f"{w.category.__name__}: {w.message}" for w in caught
                    if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    assert deprecations == []
    assert [m for m in notices.messages if "deprecated" in m] == []
