"""`prove`: lossless for every target/draft pair at a fixed size, or a confirmed counterexample.

Default tests are the cheap sizes (well under a second each on the symbolic side); the matrix of
every built-in method and the larger planted-bug refutations are marked slow.
"""

import json
import sys
import textwrap
from fractions import Fraction

import pytest

from verispec import cli
from verispec.formal import prove
from verispec.formal import splitting
from verispec.reference import exact, methods
from verispec.testing import LosslessnessError, ProofError, assert_lossless, assert_proved, planted

#: Generous: a verdict must not depend on how busy the machine is (timing lives in the benchmark).
TIMEOUT = 600


def _refuted(result):
    """A counterexample that the exact engine confirmed, and whose printed code reproduces it."""
    assert result.verdict == "counterexample", result.summary()
    cx = result.counterexample
    assert cx.confirmed and cx.tv_iteration > 0
    assert cx.method_probability != cx.target_probability
    namespace = {}
    exec(cx.code.replace("assert_lossless(method", "# "), namespace)  # the models as printed
    law = exact.output_distribution(namespace["target"], namespace["draft"], _method_of(result), result.context,
                                    result.num_tokens)
    target_law = exact.target_distribution(namespace["target"], result.context, result.num_tokens)
    assert exact.total_variation(law, target_law) == cx.tv_loop
    return cx


_METHODS = {}


def _method_of(result):
    return _METHODS[result.method]


def _prove(method, V, L, K=1, **kw):
    """prove without the point search (unless asked): the counterexample must come from a SAT query."""
    kw.setdefault("point_trials", 0)
    result = prove(method, V, L, K, timeout=TIMEOUT, **kw)
    _METHODS[result.method] = method
    return result


@pytest.mark.parametrize("name, V, L, K", [("token", 2, 1, 1), ("token", 2, 2, 1), ("block", 2, 1, 1),
                                           ("token", 3, 1, 1), ("nss", 2, 1, 2), ("rrsw", 2, 1, 2),
                                           ("point_mass", 2, 1, 1)])
def test_builtin_methods_are_proved_at_small_sizes(name, V, L, K):
    result = prove(name, V, L, K, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert result.branch_points > 0 and result.leaves > 0
    assert len(result.queries) == V ** (L + 1) and all(q.result == "unsat" for q in result.queries)
    assert "for every target/draft pair" in result.claim


CHEAP_BUGS = ["always_accept", "residual_p", "bonus_from_q", "bonus_off_by_one", "greedy_draft_soft_q", "u_zero"]


@pytest.mark.parametrize("name", CHEAP_BUGS)
def test_planted_bugs_are_refuted_with_a_confirmed_counterexample(name):
    _refuted(_prove(planted.BUGS[name](1), 2, 1))


def test_temperature_bug_is_refuted_against_every_greedy_target():
    bug = planted.BUGS["temperature_ignored"](1)
    assert _prove(bug, 2, 1).verdict == "proved"  # at T = 1 it is token verification
    _refuted(_prove(bug, 2, 1, target_temperature=0))


@pytest.mark.parametrize("name", sorted(planted.SWEEP_PASSES))
def test_narrow_bugs_that_the_sweep_passes_are_refuted(name):
    cx = _refuted(_prove(planted.NARROW[name](1), 2, 1))
    assert cx.output


def test_tie_half_is_lossless_at_v2_and_refuted_at_v3():
    bug = planted.NARROW["tie_half"](1)
    assert _prove(bug, 2, 1).verdict == "proved"  # p(x) = q(x) forces p = q when V = 2


@pytest.mark.slow
def test_tie_half_is_refuted_at_v3():
    _refuted(_prove(planted.NARROW["tie_half"](1), 3, 1))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(planted.SWEEP_PASSES))
def test_narrow_bugs_pass_the_default_sweep(name):
    assert_lossless(planted.NARROW[name](1))


#: (V, L) at which each planted bug is refuted, where the default (V=2, its MIN_DRAFT_LENGTH) is not enough.
BUG_SIZES = {"topk_draft_raw_q": (3, 1), "spechub_stale_hub_target": (3, 1), "topk3_draft_raw_q": (4, 1)}
#: Refuted by the point search: their symbolic exploration (L = 2 with K = 3; V = 4 for a top-3 draft)
#: does not finish in minutes.
POINT_SEARCH_ONLY = {"traversal_leaf_order", "topk3_draft_raw_q"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(planted.LOSSY))
def test_every_planted_bug_is_refuted(name):
    V, L = BUG_SIZES.get(name, (2, planted.MIN_DRAFT_LENGTH.get(name, 1)))
    bug = planted.BUGS[name](L)
    kw = {"target_temperature": 0} if name == "temperature_ignored" else {}
    if name in POINT_SEARCH_ONLY:
        kw["point_trials"] = 32
    _refuted(_prove(bug, V, L, bug.params.get("num_paths", 1), **kw))


@pytest.mark.parametrize("name, V, L", [("traversal_leaf_order", 2, 2), ("topk3_draft_raw_q", 4, 1)])
def test_point_search_refutes_bugs_at_sizes_the_exploration_does_not_reach(name, V, L):
    bug = planted.BUGS[name](L)
    result = prove(bug, V, L, bug.params.get("num_paths", 1), timeout=TIMEOUT)
    _METHODS[result.method] = bug
    cx = _refuted(result)
    assert cx.found_by == "point search" and result.branch_points == 0  # no symbolic run was needed
    assert "point search" in result.summary()


def test_point_search_finds_nothing_on_a_lossless_rule_and_the_proof_follows():
    result = prove("token", 2, 1, timeout=TIMEOUT, point_trials=64)
    assert result.verdict == "proved" and result.branch_points > 0


def _inverse_ratio_accept(p, q, x, rand):
    return rand.bernoulli(1 / max(1, q[x] / p[x]))  # = min(1, p/q), but divides by p(x), 0 at some pairs


def test_a_division_by_zero_on_a_branch_is_a_confirmed_contract_error():
    from verispec.reference.contract import RuleContractError
    from verispec.reference.probability import residual
    from verispec.testing.planted_narrow import _method, _token_rule

    rule = _method("inverse_ratio", _token_rule(_inverse_ratio_accept, residual), 1)
    with pytest.raises(RuleContractError, match="ZeroDivisionError") as info:
        prove(rule, 2, 1, timeout=TIMEOUT, point_trials=0)
    message = str(info.value)
    assert "division by a symbolic value that is 0" in message and "confirmed by the exact engine" in message
    namespace = {}
    code = message[message.index("from fractions"):message.index("assert_lossless(method")]
    exec(textwrap.dedent("    " + code), namespace)
    with pytest.raises(RuleContractError, match="ZeroDivisionError"):  # the printed pair reproduces it
        exact.output_distribution(namespace["target"], namespace["draft"], rule, (), 2)


SLOW_MATRIX = [(n, V, L, K) for n in ("token", "block", "nss", "rrs", "rrsw", "point_mass", "prompt_lookup")
               for V, L in ((2, 1), (2, 2), (3, 1)) for K in ((1,) if n in ("token", "block", "point_mass",
                                                                              "prompt_lookup") else (2,))]


@pytest.mark.slow
@pytest.mark.parametrize("name, V, L, K", SLOW_MATRIX)
def test_builtin_matrix(name, V, L, K):
    assert prove(name, V, L, K, timeout=TIMEOUT).verdict == "proved"


def test_a_rule_that_cannot_run_symbolically_is_unknown_with_the_reason():
    # the s-truncated IS selection solves its LP in float64 (the full one goes through the exact simplex)
    result = prove(methods.khisti(1, 2, truncation=2), 3, 1, 2, timeout=TIMEOUT)
    assert result.verdict == "unknown" and result.reason.startswith("cannot be run symbolically")
    assert "float()" in result.reason


def test_a_timeout_answers_unknown_never_proved():
    result = prove("block", 2, 2, timeout=0.05)
    assert result.verdict == "unknown" and "timeout" in result.reason.lower()
    with pytest.raises(ProofError, match="unknown"):
        assert_proved("block", vocab_size=2, draft_length=2, timeout=0.05)


def test_assert_proved_passes_and_fails():
    assert assert_proved(methods.token(1), vocab_size=2, draft_length=1).proved
    with pytest.raises(ProofError) as info:
        assert_proved(planted.BUGS["residual_p"](1), vocab_size=2, draft_length=1)
    assert isinstance(info.value, AssertionError) and "NOT lossless" in str(info.value)
    assert "models.table(" in str(info.value) and info.value.result.counterexample.confirmed


@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=1), "vocab_size"), (dict(draft_length=0), "draft_length"), (dict(num_paths=0), "num_paths"),
    (dict(timeout=0), "timeout"), (dict(target_temperature=0.5), "target_temperature"),
    (dict(method="nope"), "name"), (dict(method=methods.token(2)), "draft_length"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    args = dict(method="token", vocab_size=2, draft_length=1, num_paths=1, timeout=10) | kwargs
    with pytest.raises((TypeError, ValueError), match=match):
        prove(args.pop("method"), **args)


def test_json_is_serialisable_with_fractions():
    result = _prove(planted.BUGS["residual_p"](1), 2, 1)
    data = json.loads(json.dumps(result.to_json()))
    assert data["verdict"] == "counterexample" and data["counterexample"]["confirmed"]
    assert all(isinstance(x, str) for x in data["counterexample"]["target"]["()"])


@pytest.fixture()
def bug_module(tmp_path, monkeypatch):
    (tmp_path / "my_prove_bug.py").write_text(textwrap.dedent("""
        from verispec.testing import planted
        bug = planted.BUGS["residual_p"](1)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_prove_bug"
    sys.modules.pop("my_prove_bug", None)


def test_cli_prove_exit_status_and_json(tmp_path, capsys, bug_module):
    out = tmp_path / "proof.json"
    assert cli.main(["prove", "token", "--vocab-size", "2", "--draft-length", "1", "--json", str(out)]) == 0
    assert "PROVED" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["verdict"] == "proved" and data["command"] == "prove" and len(data["queries"]) == 4
    assert cli.main(["prove", f"{bug_module}:bug", "--vocab-size", "2", "--draft-length", "1"]) == 1
    assert "COUNTEREXAMPLE" in capsys.readouterr().out
    assert cli.main(["prove", "block", "--vocab-size", "2", "--draft-length", "2", "--timeout", "0.05",
                     "--point-trials", "0"]) == 3  # unknown: out of time
    assert cli.main(["prove", "token", "--vocab-size", "1"]) == 2


def test_cli_prove_builds_a_factory_with_the_commands_sizes(capsys):
    """A ``module:attr`` factory that needs draft_length gets --draft-length (and --num-paths)."""
    assert cli.main(["prove", "verispec.testing.planted:residual_p", "--vocab-size", "2", "--draft-length", "1"]) == 1
    assert "COUNTEREXAMPLE" in capsys.readouterr().out


def test_cli_stops_quietly_when_the_reader_goes_away():
    """`verispec prove ... | head`: a closed stdout ends the command with status 1, no traceback
    (in a child process: the fix points the process's stdout at /dev/null)."""
    import subprocess

    script = textwrap.dedent("""
        import argparse, sys
        from verispec import cli
        def closed(args):
            raise BrokenPipeError(32, "Broken pipe")
        parser = argparse.ArgumentParser()
        parser.add_argument("command")
        parser.set_defaults(func=closed)
        cli.build_parser = lambda: parser
        sys.exit(cli.main(["prove"]))
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert child.returncode == 1 and "Traceback" not in child.stderr, child.stderr


@pytest.mark.parametrize("context, V, L", [((0, 1, 0), 2, 1), ((0, 1, 0), 2, 2), ((0, 1, 0), 3, 1)])
def test_prompt_lookup_is_proved_from_a_context_whose_ngram_makes_a_real_draft(context, V, L):
    from verispec.reference.drafters import lookup_phrase

    assert lookup_phrase(context, L) != ()  # the point-mass draft is not empty: tokens are verified
    result = prove("prompt_lookup", V, L, timeout=TIMEOUT, context=context)
    assert result.verdict == "proved", result.summary()
    assert result.context == context and f"from the context {context}" in result.claim
    assert "from this context only" in result.claim  # prompt lookup reads the prefix itself


def test_assert_proved_from_a_context():
    assert assert_proved("prompt_lookup", vocab_size=2, draft_length=1, context=(0, 1, 0)).context == (0, 1, 0)


def test_a_bug_is_refuted_from_a_context_and_the_code_reproduces_it():
    result = _prove(planted.BUGS["residual_p"](1), 2, 1, context=(1, 0, 1))
    _refuted(result)
    assert "context=(1, 0, 1)" in result.counterexample.code


def test_cli_context_and_contract_error_exit(capsys, tmp_path, monkeypatch):
    assert cli.main(["prove", "prompt_lookup", "--vocab-size", "2", "--draft-length", "2",
                     "--context", "0,1,0"]) == 0
    assert "from the context (0, 1, 0)" in capsys.readouterr().out
    assert cli.main(["prove", "token", "--context", "0,5"]) == 2
    assert "context" in capsys.readouterr().err
    (tmp_path / "my_zero_division.py").write_text(textwrap.dedent("""
        from verispec.reference.probability import residual
        from verispec.testing.planted_narrow import _method, _token_rule

        def accept(p, q, x, rand):
            return rand.bernoulli(1 / max(1, q[x] / p[x]))

        rule = _method("inverse_ratio", _token_rule(accept, residual), 1)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert cli.main(["prove", "my_zero_division:rule", "--point-trials", "0"]) == 3
    finally:
        sys.modules.pop("my_zero_division", None)
    assert "rule contract error (not a lossless verdict)" in capsys.readouterr().err


@pytest.mark.parametrize("name, V, L, K", [("token", 2, 1, 1), ("rrsw", 2, 1, 2),
                                           pytest.param("nss", 3, 1, 2, marks=pytest.mark.slow)])
def test_split_down_to_cells_proves_what_the_whole_query_proves(monkeypatch, name, V, L, K):
    monkeypatch.setattr(splitting, "SPLIT_AFTER", 0.001)  # split down to the cells at once
    result = prove(name, V, L, K, timeout=TIMEOUT)
    assert result.verdict == "proved", result.summary()
    assert sum(q.solver_calls for q in result.queries) > len(result.queries)  # the cells were used


@pytest.mark.parametrize("name", ["residual_p", "tiny_q_accept"])
def test_split_down_to_cells_finds_counterexamples(monkeypatch, name):
    monkeypatch.setattr(splitting, "SPLIT_AFTER", 0.001)
    bugs = {**planted.BUGS, **planted.NARROW}
    _refuted(_prove(bugs[name](1), 2, 1))


def test_rational_function_algebra_of_z3_terms():
    import z3

    from verispec.formal.cells import Algebra, _divisors
    from verispec.formal._internal.problem import SymbolicModel, Variables

    variables = Variables()
    SymbolicModel("p", 3, variables)._compute(())
    x, y = variables.groups[("p", ())]
    algebra = Algebra(variables)
    lhs = (x * x - y * y) / (x + y) + y
    assert algebra(lhs) == algebra(x)  # equal as rational functions (z3 alone leaves x = -y open)
    assert algebra(x / (1 - y)) != algebra(x)
    assert [str(d) for d in _divisors(lhs)] == ["p[][0] + p[][1]"]
    with pytest.raises(ValueError, match="rational function"):
        algebra(z3.If(x > 0, x, y))


def test_parallel_queries_give_the_sequential_verdicts():
    # 8 outputs: the helper process is started; whichever process decides an output, the verdicts agree.
    for workers in (1, 2):
        assert prove("token", 2, 2, timeout=TIMEOUT, workers=workers).verdict == "proved"
    bug = planted.BUGS["residual_p"](2)
    one, two = (prove(bug, 2, 2, timeout=TIMEOUT, point_trials=0, workers=w) for w in (1, 2))
    assert one.verdict == two.verdict == "counterexample"
    assert two.counterexample.confirmed


def test_a_helper_process_decides_outputs_like_this_one():
    from joblib import Parallel, delayed

    from verispec.formal.parallel import decide_share, helper_job

    job = helper_job("token", 2, 2, 1, (1, 1), ())
    # one joblib worker process takes all 8 outputs (groups 0..3)
    (answers,) = Parallel(n_jobs=2)(delayed(decide_share)(job, range(4), TIMEOUT) for _ in range(1))
    assert sorted(answers) == list(range(8))
    assert all(status == "unsat" and calls >= 1 for status, _, calls, *_ in answers.values())


def test_outputs_the_helper_does_not_answer_are_unknown(monkeypatch):
    from verispec.formal import parallel

    def silent(self, indices=None):  # the workers answer nothing in time
        return {}

    monkeypatch.setattr(parallel.Workers, "collect", silent)
    # this process takes the odd groups of outputs (`parallel.shares`); the even ones are left to the
    # (silent) worker
    result = prove("token", 2, 2, timeout=TIMEOUT, workers=2, point_trials=0)
    assert result.verdict == "unknown" and "helper" in result.reason
    assert len(result.queries) == 8
    assert [q.output[:2] for q in result.queries if q.result == "unknown"] == [(0, 0), (0, 0), (1, 0), (1, 0)]


def test_a_method_object_is_decided_in_this_process_only():
    from verispec.formal.parallel import helper_job

    assert helper_job(methods.get("token", draft_length=1), 2, 1, 1, (1, 1), ()) is None
    assert helper_job("token", 2, 1, 1, (1, 1), ())["spec"] == "token"
