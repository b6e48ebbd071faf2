"""pytest plugin for verispec (registered under the ``pytest11`` entry point as ``verispec``).

Loaded in every pytest run of an environment where verispec is installed, so it stays small and
side-effect free: it imports nothing heavy at load time, *registers* (never loads) two hypothesis
profiles, and offers fixtures that import verispec only when a test asks for them.

- hypothesis profiles ``"verispec-ci"`` (derandomized, no deadline, 100 examples) and
  ``"verispec-dev"`` (25 examples, no deadline). Opt in with ``--hypothesis-profile=verispec-ci``
  or ``settings.load_profile("verispec-ci")`` after ``import verispec.testing``; your own settings
  and profiles are never overridden.
- fixtures (request them by name in a test's arguments):

  - ``assert_lossless``: `verispec.testing.assert_lossless(method, ...)`, with the command-line
    options below as defaults for its sweeps (arguments you pass win). Raises LosslessnessError
    (an AssertionError: the laws differ) or RuleContractError (the rule is malformed).
  - ``assert_not_worse``: `verispec.testing.assert_not_worse(method, baseline, ...)`, the exact
    E[tau] comparison (catches lossless-but-slower rules).
  - ``planted_bugs``: {name: factory(draft_length) -> Method}, a copy of
    `verispec.testing.planted.BUGS`, to show that a check of yours can fail.

- command-line options ``--verispec-exact``, ``--verispec-vocab-sizes 2,3,4`` and
  ``--verispec-budget N`` (see `pytest_addoption`): defaults of the ``assert_lossless`` fixture's
  sweeps (calls without ``target`` / ``instances``).

"""

from __future__ import annotations

import functools
import sys

import pytest


def pytest_addoption(parser) -> None:
    """``--verispec-exact`` (rational models only, TV == 0 demanded; temperatures 1 and 0 unless a
    test passes its own), ``--verispec-vocab-sizes`` (default 2..6), ``--verispec-budget`` (N-token
    outcomes V**N per vocabulary size above 3, default 1000)."""
    group = parser.getgroup("verispec", "verispec: defaults of the assert_lossless fixture's sweeps")
    group.addoption("--verispec-exact", action="store_true", default=False,
                    help="sweep rational models only and demand TV == 0 (temperatures 1 and 0)")
    group.addoption("--verispec-vocab-sizes", default=None, metavar="V,V,...",
                    help="the sweep's vocabulary sizes, e.g. 2,3,4 (default 2,3,4,5,6)")
    group.addoption("--verispec-budget", default=None, metavar="N",
                    help="N-token outcomes (V**N) per vocabulary size above 3 (default 1000)")


def _parse_options(config) -> dict:
    """The fixture's defaults from the command line; pytest.UsageError names a bad option."""
    defaults = {}
    if config.getoption("verispec_exact", default=False):
        defaults["exact"] = True
    sizes = config.getoption("verispec_vocab_sizes", default=None)
    if sizes is not None:
        try:
            values = tuple(int(v) for v in sizes.split(",") if v.strip())
        except ValueError:
            raise pytest.UsageError(f"--verispec-vocab-sizes: expected comma-separated ints, got {sizes!r}") from None
        if not values or min(values) < 1:
            raise pytest.UsageError(f"--verispec-vocab-sizes: expected ints >= 1, got {sizes!r}")
        defaults["vocab_sizes"] = values
    budget = config.getoption("verispec_budget", default=None)
    if budget is not None:
        try:
            value = int(budget)
        except ValueError:
            raise pytest.UsageError(f"--verispec-budget: expected an int >= 1, got {budget!r}") from None
        if value < 1:
            raise pytest.UsageError(f"--verispec-budget: expected an int >= 1, got {budget!r}")
        defaults["budget"] = value
    return defaults


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    # Runs before hypothesis' own pytest_configure, so --hypothesis-profile=verispec-ci resolves.
    # Import hypothesis only when it is in use anyway (no start-up cost for other projects).
    config._verispec_defaults = _parse_options(config)
    profile = config.getoption("hypothesis_profile", default=None)
    if "hypothesis" in sys.modules or (isinstance(profile, str) and profile.startswith("verispec-")):
        from verispec.testing.strategies import register_profiles

        register_profiles()


@pytest.fixture
def assert_lossless(request):
    """`verispec.testing.assert_lossless`, e.g. ``assert_lossless(method, target=p, draft=q)``;
    sweeps take the ``--verispec-exact/-vocab-sizes/-budget`` options as defaults."""
    from verispec.testing import assert_lossless as function

    defaults = getattr(request.config, "_verispec_defaults", None) or {}
    if not defaults:
        return function

    @functools.wraps(function)
    def configured(method, **kwargs):
        if kwargs.get("target") is None and kwargs.get("instances") is None:  # a sweep
            options = dict(defaults)
            if options.get("exact"):
                options.setdefault("temperatures", (1, 0))  # 0.5 makes float models
            kwargs = {**options, **kwargs}
        return function(method, **kwargs)

    return configured


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
