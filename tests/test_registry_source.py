"""The method registry is the source of behaviour: no module outside it and the rule modules tests
a method's name, and every entry's declared torch rule, drafter and family are what its factory
builds.

"Tests a method's name" (read from the source, over the AST): a string constant equal to a
registered method name is an operand of a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``),
directly or as an element of a tuple, list or set display there, or a ``match`` case value. A
name used otherwise (a label passed on, a key of a results file, an argument) is not a test.

Exempt: `verispec/reference/registry.py` itself, the tests, and the RULE MODULES: the modules that
implement one drafter's or one verifier's math and may name the variants they implement (a tree
shape, a chain's verifier choice, a selection rule's one-step law):

- the packages `verispec/reference/verifiers/`, `verispec/empirical/verifiers/` and
  `verispec/empirical/drafters/`, except the table and the engine's dispatch in
  `empirical/verifiers/` (`rule_table.py`, `nodes.py`, `__init__.py`), which read the registry;
- the reference drafter modules `verispec/reference/drafters.py`, `static_trees.py`,
  `adaptive.py` and `ouroboros.py`.

Everything else (the bench, the CLI, `empirical/methods.py`, the adapter, the testing harnesses,
the theory and formal layers) reads the entry instead.
"""

from __future__ import annotations

import ast
import os

import pytest

from verispec.reference import registry

ROOT = os.path.join(os.path.dirname(__file__), "..")
PACKAGE = os.path.join(ROOT, "verispec")
RULE_PACKAGES = ("reference/verifiers", "empirical/verifiers", "empirical/drafters")
RULE_FILES = ("reference/drafters.py", "reference/static_trees.py", "reference/adaptive.py", "reference/ouroboros.py")
#: In a rule package, but the registry's readers: held to the test.
READERS = ("empirical/verifiers/rule_table.py", "empirical/verifiers/nodes.py", "empirical/verifiers/__init__.py")


def _exempt(relative: str) -> bool:
    if relative == "reference/registry.py" or relative in RULE_FILES:
        return True
    return relative not in READERS and any(relative.startswith(package + "/") for package in RULE_PACKAGES)


def _constants(node):
    """The string constants of an operand: itself, or the elements of a tuple/list/set display."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _constants(element)


def name_tests(source: str, names) -> list[tuple[int, str]]:
    """(line, method name) of every test of a method name in `source` (module docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        else:
            continue
        found += [(node.lineno if hasattr(node, "lineno") else 0, value)
                  for operand in operands for value in _constants(operand) if value in names]
    return found


def _held_modules() -> dict[str, str]:
    """{path relative to verispec/: source} of every module held to the rule."""
    out = {}
    for root, _, files in os.walk(PACKAGE):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(root, file)
                relative = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
                if not _exempt(relative):
                    out[relative] = open(path).read()
    return out


def test_no_module_outside_the_registry_and_the_rule_modules_tests_a_method_name():
    names = set(registry.REGISTRY)
    found = [f"verispec/{path}:{line}: {name!r}" for path, source in sorted(_held_modules().items())
             for line, name in name_tests(source, names)]
    assert not found, "a method's name is tested outside the registry (read the entry instead):\n" + "\n".join(found)


def test_the_rule_modules_named_exist_and_the_readers_are_held():
    for package in RULE_PACKAGES:
        assert os.path.isdir(os.path.join(PACKAGE, package)), package
    for file in RULE_FILES + READERS:
        assert os.path.isfile(os.path.join(PACKAGE, file)), file
    held = _held_modules()
    for file in READERS + ("empirical/methods.py", "empirical/adapter.py", "cli.py", "bench/spec.py"):
        assert file in held, file


@pytest.mark.parametrize("code", ['if name in ("token", "block"):\n    pass',
                                  'x = method.name == "traversal"',
                                  'x = "spechub" != name',
                                  'match name:\n    case "gbv":\n        pass'])
def test_planted_name_tests_are_found(code):
    assert name_tests(code, set(registry.REGISTRY))


@pytest.mark.parametrize("code", ['label = "token"', 'run("gbv", 2)', 'x = {"token": 1}', 'x = name == "hf"'])
def test_a_name_used_without_a_test_is_not_reported(code):
    assert not name_tests(code, set(registry.REGISTRY))


def test_every_family_is_declared_and_every_uniforms_budget_is_at_least_one_per_node():
    assert {entry.family for entry in registry.REGISTRY.values()} == set(registry.FAMILIES)
    assert registry.names(family=registry.BASELINE) == [registry.BASELINE_METHOD]
    for entry in registry.REGISTRY.values():
        if entry.uniforms is None:  # the trie sets it
            assert entry.family == registry.PHRASE_POOL, entry.name
            continue
        for L in (1, 2, 5):
            for K in (1, 2, 3):
                assert entry.uniforms(L, K) >= L + 1, (entry.name, L, K)
    with pytest.raises(ValueError, match="family"):
        registry.names(family="forest")
    with pytest.raises(ValueError, match="family"):
        registry.MethodSpec("x", "doc", (), family="forest")


@pytest.mark.parametrize("name", registry.names("torch"))
def test_every_torch_factory_builds_the_declared_rule_and_drafter(name):
    """The entry's torch_rule and torch_drafter are what `empirical.methods.get` builds (a rule the
    `verifier` parameter picks is one of the chain rules)."""
    pytest.importorskip("torch")
    from verispec.empirical import methods as torch_methods
    from verispec.empirical.verifiers import RULES
    from verispec.empirical.verifiers.nodes import PathRule

    entry = registry.spec(name)
    method = torch_methods.get(name)
    verifier = method.verifier
    if entry.torch_rule is None:  # adaptive, hybrid: the chain rule their `verifier` names
        assert isinstance(verifier, PathRule) and verifier.chain, name
    elif isinstance(verifier, PathRule):
        assert entry.family in (registry.CHAIN, registry.MULTI_PATH), name
        assert RULES[verifier.name] is registry.resolve_factory(entry.torch_rule), name
    else:
        assert type(verifier) is registry.resolve_factory(entry.torch_rule), name
    assert type(method.drafter()) is registry.resolve_factory(entry.torch_drafter), name
