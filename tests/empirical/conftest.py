"""Shared helpers for tests/empirical.

The package needs torch and transformers. Each test module starts with
``pytest.importorskip("torch")`` / ``pytest.importorskip("transformers")`` so that, without them,
the modules are reported as skipped whether pytest is pointed at tests/ or at tests/empirical
(an importorskip at conftest level aborts the run when tests/empirical is given explicitly).
Nothing here imports torch at module level.
"""

from __future__ import annotations

import pytest

# The G-test machinery (g_test, g_test_sample_size, pooled_bins, ALPHA, POWER) is public API:
# `verispec.testing.gtest`; the statistical tests here import it from there.


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Run torch single-threaded: tiny models and small-row tensors are dominated by thread
    hand-offs on a shared 2-core CI machine (measured 10-40x slower with 2 threads under load)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _cost_models_in_a_temporary_folder(tmp_path_factory, monkeypatch):
    """The bench's measured cost models (`verispec.bench.costs`) go to a temporary folder: a test's
    tiny-model timings never land in the user cache the real bench reads."""
    monkeypatch.setenv("VERISPEC_COST_CACHE", str(tmp_path_factory.mktemp("costs")))
