"""What `prove --all-vocab` audits is declared where the code is defined (`verispec.reference.audit`),
not inferred from file paths or function names: a renamed audited primitive is still audited, a
renamed plumbing helper is still plumbing, and the same code unmarked is the rule's own (refused)."""

import inspect
import types

import numpy as np
import pytest

from verispec.formal.cutoff import prove_all_vocab, watched_run
from verispec.formal.watch import FindingKind, Watch
from verispec.reference import audit, drafters, probability
from verispec.reference.methods import Method
from verispec.reference.probability import accept_probability, align


def _module(source: str, name: str):
    """`source` executed as a module of its own, named `name` (its code reports `name`.py)."""
    module = types.ModuleType(name)
    module.__dict__.update(np=np, primitive=audit.primitive, plumbing=audit.plumbing, Primitive=audit.Primitive)
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
    return module


def _renamed_residual(marked: bool):
    """`probability.residual`, renamed `surplus_law`, with or without its `primitive` mark."""
    source = inspect.getsource(probability.residual).replace("def residual(", "def surplus_law(")
    assert source.startswith("@primitive(Primitive.RESIDUAL)\n")
    if not marked:
        source = source.split("\n", 1)[1]
    return _module(source, "renamed_primitives").surplus_law


def _renamed_plumbing(marked: bool):
    """A helper that reads V (len of a probability vector), marked plumbing or not."""
    source = "def vocabulary_of(p):\n    return len(p)\n"
    return _module(("@plumbing\n" if marked else "") + source, "renamed_plumbing").vocabulary_of


def _token_method(residual_fn, read_vocabulary=None) -> Method:
    """Token verification (L = 1) with `residual_fn` as its residual; `read_vocabulary(p)` is called
    first when given (its result is not used)."""
    def verify(target, draft_model, context, draft, rand):
        x = draft.tokens(())[0]
        p, q = align(target.probs(context), draft.proposal(()))  # [V], [V]
        if read_vocabulary is not None:
            read_vocabulary(p)
        if not rand.bernoulli(accept_probability(p[x], q[x])):
            return (rand.categorical(residual_fn(p, q)),)  # correction token
        return (x, rand.categorical(target.probs(context + (x,))))  # bonus token

    return Method("renamed_token", drafters.chain(1), verify, {"draft_length": 1}, model_state_only=True)


def test_the_marks_sit_on_the_primitives_themselves():
    assert audit.mark_of(probability.residual) is audit.Primitive.RESIDUAL
    assert audit.mark_of(probability.accept_probability) is audit.Primitive.ACCEPTANCE
    assert audit.mark_of(drafters.draw_counts) is audit.Primitive.IID_DRAW
    assert audit.mark_of(drafters.Draft) is audit.PLUMBING
    assert audit.mark_of(probability.argmax) is None  # an argmax is the rule's own comparison
    with pytest.raises(TypeError, match="kind"):
        audit.primitive("residual")


def test_a_renamed_audited_primitive_is_still_audited():
    watch = watched_run(_token_method(_renamed_residual(marked=True)), 2, 1, 1)
    assert watch.cutoff_reasons(1, 1) == [] and watch.equivariant and watch.cutoff_size(2) == 4


def test_the_same_code_unmarked_is_the_rules_own_arithmetic():
    watch = watched_run(_token_method(_renamed_residual(marked=False)), 2, 1, 1)
    reasons = watch.cutoff_reasons(1, 1)
    assert reasons and "outside the audited primitives" in reasons[0]
    assert "(at renamed_primitives.py:surplus_law)" in reasons[0]
    assert all(isinstance(kind, FindingKind) for kind in watch.findings)


def test_a_renamed_plumbing_helper_may_read_v_and_an_unmarked_one_may_not():
    marked = watched_run(_token_method(probability.residual, _renamed_plumbing(marked=True)), 2, 1, 1)
    assert marked.cutoff_reasons(1, 1) == []
    unmarked = watched_run(_token_method(probability.residual, _renamed_plumbing(marked=False)), 2, 1, 1)
    assert FindingKind.VOCABULARY_SIZE in unmarked.findings
    assert unmarked.cutoff_reasons(1, 1)[0] == ("reads V itself (len() of a probability vector) "
                                                "(at renamed_plumbing.py:vocabulary_of)")


def test_a_watch_counts_iterations():
    watch = Watch()
    assert watch.iterations == 0 and not watch.equivariant
    assert watch.cutoff_reasons(1, 1) == ["no iteration was watched"]


@pytest.mark.slow
def test_the_renamed_primitive_gets_the_certificate_for_every_v():
    result = prove_all_vocab(_token_method(_renamed_residual(marked=True)), 1, 1, timeout=180)
    assert result.proved and result.cutoff_size == 4, result.summary()


def test_a_refusal_names_the_rules_code_not_a_deprecation_wrapper(capsys):
    from verispec import cli
    cli.main(["prove", "hu_greedy", "--all-vocab", "--num-paths", "2"])
    out = capsys.readouterr().out
    assert "(at drafters.py:node_by_node.<locals>.build.<locals>.expand)" in out, out
    assert "deprecation.py" not in out, out
