"""`methods.load` / `methods.resolve`: a user's Method named as 'pkg.module:attr'."""

import sys
import textwrap

import pytest

from verispec.reference import methods


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rules_mod.py").write_text(textwrap.dedent("""
        from verispec.reference import methods
        mine = methods.block(draft_length=2)
        def factory():
            return methods.token(draft_length=3)
        def needs_args(x):
            return methods.token(draft_length=x)
        def sized(draft_length, num_paths=1):
            return methods.gbv(draft_length=draft_length, num_paths=num_paths)
        def open_ended(**params):
            return methods.gbv(**params)
        class Holder:
            inner = methods.gbv(draft_length=2, num_paths=2)
        not_a_method = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rules_mod"
    sys.modules.pop("my_rules_mod", None)


def test_load_method_factory_and_dotted_attr(user_module):
    assert methods.load(f"{user_module}:mine").params == {"draft_length": 2}
    assert methods.load(f"{user_module}:factory").params == {"draft_length": 3}
    assert methods.load(f"{user_module}:Holder.inner").name == "gbv"


def test_a_factory_gets_the_commands_sizes_it_names(user_module):
    """--draft-length / --num-paths reach a factory that names them; others keep their defaults."""
    assert methods.load(f"{user_module}:sized", draft_length=3, num_paths=2).params == {
        "draft_length": 3, "num_paths": 2}
    assert methods.resolve(f"{user_module}:sized", draft_length=2, num_paths=3).params["num_paths"] == 3
    assert methods.load(f"{user_module}:factory", draft_length=5).params == {"draft_length": 3}  # takes none
    assert methods.load(f"{user_module}:open_ended", draft_length=2, num_paths=2).params == {
        "draft_length": 2, "num_paths": 2}
    with pytest.raises(ValueError, match="cannot be called with no arguments"):  # x is not a size it gets
        methods.load(f"{user_module}:needs_args", draft_length=2)
    with pytest.raises(ValueError, match="cannot be called with num_paths=2"):
        methods.load(f"{user_module}:sized", num_paths=2)
    with pytest.raises(ValueError, match="cannot be called with no arguments"):
        methods.load(f"{user_module}:sized")


def test_resolve_accepts_objects_names_and_specs(user_module):
    m = methods.token(draft_length=2)
    assert methods.resolve(m) is m
    assert methods.resolve("gbv", draft_length=2, num_paths=3).params == {"draft_length": 2, "num_paths": 3}
    assert methods.resolve(f"{user_module}:mine").name == "block"
    with pytest.raises(TypeError, match="method"):
        methods.resolve(3)


@pytest.mark.parametrize("spec, match", [
    ("no_colon", "expected 'pkg.module:attr'"),
    ("a:b:c", "expected 'pkg.module:attr'"),
    (":attr", "expected 'pkg.module:attr'"),
    ("verispec_no_such_module_xyz:attr", "cannot import module"),
    ("{mod}:missing", "has no attribute 'missing'"),
    ("{mod}:not_a_method", "is a int, not a"),
    ("{mod}:needs_args", "cannot be called with no arguments"),
])
def test_load_bad_specs_name_the_argument(user_module, spec, match):
    with pytest.raises(ValueError, match=match) as info:
        methods.load(spec.format(mod=user_module), argument="--method")
    assert str(info.value).startswith("--method: ")
