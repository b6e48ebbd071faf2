"""pytest plugin for verispec (registered under the ``pytest11`` entry point as ``verispec``).

Loaded in every pytest run of an environment where verispec is installed, so it stays small and
side-effect free: it imports nothing heavy at load time, *registers* (never loads) two hypothesis
profiles, and offers fixtures that import verispec only when a test asks for them.

- hypothesis profiles ``"verispec-ci"`` (derandomized, no deadline, 100 examples) and
  ``"verispec-dev"`` (25 examples, no deadline). Opt in with ``--hypothesis-profile=verispec-ci``
  or ``settings.load_profile("verispec-ci")`` after ``import verispec.testing``; your own settings
  and profiles are never overridden.
- fixtures ``assert_lossless`` and ``assert_not_worse`` (the functions of `verispec.testing`) and
  ``planted_bugs`` (a copy of the `verispec.testing.planted.BUGS` registry).
"""

from __future__ import annotations

import sys

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    # Runs before hypothesis' own pytest_configure, so --hypothesis-profile=verispec-ci resolves.
    # Import hypothesis only when it is in use anyway (no start-up cost for other projects).
    profile = config.getoption("hypothesis_profile", default=None)
    if "hypothesis" in sys.modules or (isinstance(profile, str) and profile.startswith("verispec-")):
        from verispec.testing.strategies import register_profiles

        register_profiles()


@pytest.fixture
def assert_lossless():
    """`verispec.testing.assert_lossless`, e.g. ``assert_lossless(method, target=p, draft=q)``."""
    from verispec.testing import assert_lossless as function

    return function


@pytest.fixture
def assert_not_worse():
    """`verispec.testing.assert_not_worse`: exact E[tau] comparison with a baseline method."""
    from verispec.testing import assert_not_worse as function

    return function


@pytest.fixture
def planted_bugs():
    """{name: factory(draft_length) -> Method}: the planted bugs of `verispec.testing.planted`."""
    from verispec.testing import planted

    return dict(planted.BUGS)
