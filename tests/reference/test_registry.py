"""The method registry: each method declared once, and every twin holds to the declaration."""

from __future__ import annotations

import inspect

import pytest

from verispec.reference import methods, registry


def _signature(factory) -> dict:
    return {name: p.default for name, p in inspect.signature(factory).parameters.items()}


def _holds(entry: registry.MethodSpec, backend: str) -> None:
    factory = registry.resolve_factory(getattr(entry, backend))
    signature = _signature(factory)
    fixed = dict(entry.torch_fixed) if backend == "torch" else {}
    # the cost policy's options are applied by the backend's get, not passed to the factory
    declared = {k: v for k, v in entry.defaults(backend).items() if k not in registry.POLICY_OPTIONS}
    assert set(signature) - set(fixed) == set(declared), (entry.name, backend)
    if "name" in fixed:  # a builder shared by several methods (paths, trees, walks): get() passes every value
        return
    for name, default in declared.items():
        if signature[name] is not inspect.Parameter.empty:  # a factory default must be the registry's
            assert signature[name] == default, (entry.name, backend, name)


@pytest.mark.parametrize("name", registry.names("reference"))
def test_every_reference_factory_takes_the_declared_parameters_and_defaults(name):
    _holds(registry.spec(name), "reference")
    assert methods.get(name).name == name  # the registry's defaults build it


@pytest.mark.parametrize("name", registry.names("torch"))
def test_every_torch_method_has_its_reference_twin_with_the_same_parameters(name):
    pytest.importorskip("torch")
    entry = registry.spec(name)
    if entry.reference is None:  # only with the stated reason (a stateful pool), never silently
        assert entry.no_twin.startswith("no reference twin: "), name
        _holds(entry, "torch")
        return
    assert not entry.no_twin
    _holds(entry, "torch")
    reference = set(entry.defaults("reference"))
    assert reference | set(entry.torch_only) == set(entry.defaults("torch"))
    from verispec.empirical import methods as torch_methods

    assert torch_methods.get(name).name == name


def test_the_methods_without_a_reference_twin_are_the_phrase_pools():
    assert [n for n in registry.names("torch") if registry.spec(n).reference is None] == [
        "ouroboros", "ouroboros_phrase", "lookahead"]


def test_short_keys_name_one_parameter_each_and_the_drifted_defaults_agree():
    for entry in registry.REGISTRY.values():
        keys = [p.key for p in entry.params if p.key]
        assert len(keys) == len(set(keys)), entry.name
    assert registry.spec("prompt_lookup").defaults("reference")["max_ngram"] == 3
    assert methods.get("prompt_lookup", draft_length=2).params["max_ngram"] == 3


def test_registry_refuses_unknown_names_parameters_and_backends():
    with pytest.raises(ValueError, match="name: unknown method 'nope'"):
        methods.get("nope")
    with pytest.raises(TypeError, match="name"):
        registry.spec(3)
    with pytest.raises(TypeError, match="num_paths: not a parameter of method 'block'"):
        methods.get("block", draft_length=2, num_paths=2)
    with pytest.raises(TypeError, match="draft_temperature: not a parameter of method 'token'"):
        methods.get("token", draft_temperature=1.0)  # an engine option of the torch twin only
    with pytest.raises(ValueError, match="backend"):
        registry.names("jax")


def test_importing_the_reference_and_its_registry_loads_no_torch_z3_or_cvxpy():
    import subprocess
    import sys

    code = ("import sys, verispec.reference, verispec.reference.registry as r; r.names(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'z3', 'cvxpy', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_docs_carry_the_registry_table():
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "algorithms.md")
    assert registry.markdown_table() in open(path).read()
