"""The pytest11 plugin: loaded via the entry point, fixtures work, profiles registered not loaded."""

import importlib.metadata


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
