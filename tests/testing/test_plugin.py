"""The pytest11 plugin: loaded via the entry point, fixtures work, profiles registered not loaded."""

import importlib.metadata

import pytest

from verispec.testing import assert_lossless, assert_not_worse, plugin

pytest_plugins = ["pytester"]


def test_entry_point_names_the_plugin_module():
    eps = importlib.metadata.entry_points(group="pytest11")
    assert any(ep.name == "verispec" and ep.value == "verispec.testing.plugin" for ep in eps)


def test_plugin_is_loaded_in_this_session(request):
    assert request.config.pluginmanager.has_plugin("verispec")


def test_fixtures_return_the_functions(request):
    assert request.getfixturevalue("assert_lossless") is assert_lossless
    assert request.getfixturevalue("assert_not_worse") is assert_not_worse
    bugs = request.getfixturevalue("planted_bugs")
    assert "always_accept" in bugs and callable(bugs["residual_p"])


def test_plugin_module_is_light():
    source = open(plugin.__file__).read()
    assert "import numpy" not in source and "from verispec" not in source.split("def ")[0]


def test_fixture_in_a_fresh_project(pytester):
    pytester.makepyfile(test_user="""
        from fractions import Fraction
        from verispec.reference import methods, models

        P = models.iid([Fraction(2, 3), Fraction(1, 3)])
        Q = models.iid([Fraction(1, 3), Fraction(2, 3)])

        def test_good(assert_lossless):
            report = assert_lossless(methods.token(2), target=P, draft=Q)
            assert report.num_exact == 1

        def test_bad(assert_lossless, planted_bugs):
            assert_lossless(planted_bugs["residual_p"](1), target=P, draft=Q)

        def test_slower(assert_not_worse, planted_bugs):
            assert_not_worse(planted_bugs["block_replaced_by_token"](2), methods.block(2), target=P, draft=Q)
    """)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*NOT lossless*", "*TV(method law, target law) = *", "*LOWER expected*"])


def test_profiles_usable_from_the_command_line(pytester):
    pytester.makepyfile(test_profile="""
        from hypothesis import settings

        def test_profile():
            assert settings.get_current_profile_name() == "verispec-ci"
            assert settings.default.derandomize is True
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--hypothesis-profile=verispec-ci")
    result.assert_outcomes(passed=1)


def test_users_profile_wins(pytester):
    pytester.makeconftest("""
        from hypothesis import settings
        settings.register_profile("mine", max_examples=7)
        settings.load_profile("mine")
    """)
    pytester.makepyfile(test_profile="""
        from hypothesis import settings
        import verispec.testing

        def test_profile():
            assert settings.get_current_profile_name() == "mine"
            assert settings.default.max_examples == 7
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_options_set_the_fixtures_sweep_defaults(pytester):
    pytester.makepyfile(test_opts="""
        from fractions import Fraction
        from verispec.reference import methods, models

        def test_sweep(assert_lossless):
            report = assert_lossless(methods.token(1), families=("iid",))
            assert report.vocab_sizes == (2, 4)
            assert report.num_instances == 2 + 1          # T in (1, 0) at V = 2; budget 50 -> 1 at V = 4
            assert report.num_exact == report.num_instances  # --verispec-exact: TV == 0 on every one

        def test_explicit_arguments_win(assert_lossless):
            report = assert_lossless(methods.token(1), families=("iid",), vocab_sizes=(3,), temperatures=(1,))
            assert report.vocab_sizes == (3,) and report.num_instances == 1

        def test_single_instance_ignores_the_sweep_options(assert_lossless):
            float_p, float_q = models.iid([0.25, 0.75]), models.iid([0.5, 0.5])
            assert assert_lossless(methods.token(1), target=float_p, draft=float_q).num_exact == 0
    """)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "--verispec-exact",
                                          "--verispec-vocab-sizes", "2,4", "--verispec-budget", "50")
    result.assert_outcomes(passed=3)


@pytest.mark.parametrize("option, value", [("--verispec-budget", "0"), ("--verispec-budget", "x"),
                                           ("--verispec-vocab-sizes", "2,x"), ("--verispec-vocab-sizes", "0")])
def test_bad_options_are_usage_errors_naming_the_option(pytester, option, value):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", option, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert option in (result.stderr.str() + result.stdout.str())


def test_options_are_listed_in_help(pytester):
    result = pytester.runpytest_inprocess("--help")
    result.stdout.fnmatch_lines(["*--verispec-exact*", "*--verispec-vocab-sizes*", "*--verispec-budget*"])
