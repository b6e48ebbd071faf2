"""`prove --all-vocab` (verispec.formal.cutoff, .watch, .symmetry): certificates for every V, refused
where the watched run shows an operation the cutoff theorem does not cover; one query per output
orbit only for rules the run shows equivariant. Every refusal is exercised by a planted rule that is
lossless at every size up to the cutoff and lossy above it (checked exactly at V = 5)."""

import json
import subprocess
import sys

import pytest

from verispec.formal import prove
from verispec.formal.cutoff import prove_all_vocab
from verispec.formal.symmetry import canonical, orbit_size, representatives
from verispec.formal.watch import Watch
from verispec.reference import exact, models
from verispec.testing import planted_cutoff, planted_narrow


@pytest.mark.parametrize("name", sorted(planted_cutoff.CUTOFF_BUGS))
def test_planted_rules_lossy_only_from_v5_are_refused_with_their_reason(name):
    factory, expected = planted_cutoff.CUTOFF_BUGS[name]
    result = prove_all_vocab(factory(), timeout=60)
    assert result.verdict == "no cutoff" and not result.proved
    assert expected in result.reason and "no cutoff:" in result.line()
    assert "PROVED for every V" not in result.summary()
    # the certificate would have been false: the rule is lossy at V = 5 (exact law, Fractions)
    p, q = planted_cutoff.REFUTING_PAIRS[name]
    law = exact.output_distribution(models.iid(p), models.iid(q), factory(), num_tokens=1)
    assert exact.total_variation(law, exact.target_distribution(models.iid(p), num_tokens=1)) > 0


def test_count_rule_is_proved_at_a_fixed_size_below_the_bug():
    """What the certificate must not do: trust the fixed-size proofs of the count rule."""
    assert prove(planted_cutoff.count_accept(), 2, timeout=60, workers=1).proved


def test_token_passes_the_criterion_with_cutoff_four():
    watch = Watch()
    result = prove("token", 2, 1, timeout=60, watch=watch)
    assert result.proved and watch.cutoff_reasons(1, 1) == [] and watch.cutoff_size(2) == 4


@pytest.mark.slow
def test_token_is_proved_for_every_vocabulary_size():
    result = prove_all_vocab("token", draft_length=1, timeout=120)
    assert result.proved, result.summary()
    assert result.cutoff_size == 4 and [p.vocab_size for p in result.proofs] == [2, 3, 4]
    assert all(p.proved for p in result.proofs) and result.criterion == [] and result.equivariant
    assert "PROVED for every V" in result.line() and "V* = 4" in result.line() and "L=1, K=1" in result.line()
    # symmetry: 2 orbits of 2-token outputs at each size instead of V^2 outputs
    assert [len(p.queries) for p in result.proofs] == [2, 2, 2]
    assert [len(p.queries) + p.outputs_by_symmetry for p in result.proofs] == [4, 9, 16]


@pytest.mark.parametrize("name, L, K, expected", [
    ("token", 2, 1, "multi-step: L = 2"),
    ("block", 2, 1, "a vocabulary-wide or partial sum"),
    ("spechub", 1, 2, "comparison between the probabilities of two tokens"),
    ("gbv", 1, 2, "comparison between the probabilities of two tokens"),
    ("rrs", 1, 2, "multi-path: K = 2"),
])
def test_rules_outside_the_theorem_get_no_cutoff_with_a_reason(name, L, K, expected):
    result = prove_all_vocab(name, L, K, timeout=60)
    assert result.verdict == "no cutoff" and expected in result.reason, result.summary()
    assert result.cutoff_size is None and result.proofs == []


def test_float_code_gets_no_cutoff():
    result = prove_all_vocab("optimal_is", 1, 2, timeout=60)
    assert result.verdict == "no cutoff", result.summary()


def test_symmetry_is_refused_for_a_rule_that_tells_tokens_apart():
    watch = Watch()
    result = prove(planted_cutoff.relabel_accept(), 3, timeout=60, watch=watch, point_trials=0)
    assert not watch.equivariant and "token id" in watch.cutoff_reasons(1, 1)[0]
    assert result.outputs_by_symmetry == 0
    assert result.verdict == "counterexample"


def test_watched_proof_of_an_equivariant_rule_asks_one_query_per_orbit():
    watch = Watch()
    result = prove("token", 3, 1, timeout=60, watch=watch)
    assert watch.equivariant and result.proved
    assert [q.output for q in result.queries] == [(0, 0), (0, 1)] and result.outputs_by_symmetry == 7


def test_orbits():
    assert canonical((2, 0, 2)) == (0, 1, 0)
    assert representatives(2, 2) == [(0, 0), (0, 1)]
    assert representatives(4, 3) == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (0, 1, 2)]
    assert representatives(2, 3) == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    for V, N in ((2, 2), (3, 2), (4, 3), (2, 3)):  # the orbits partition [V]^N
        assert sum(orbit_size(s, V) for s in representatives(V, N)) == V ** N
    with pytest.raises(ValueError, match="vocab_size"):
        representatives(0, 2)


def test_cli_all_vocab(tmp_path):
    out = tmp_path / "cutoff.json"
    run = subprocess.run([sys.executable, "-m", "verispec.cli", "prove", "rrs", "--num-paths", "2", "--all-vocab",
                          "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 3 and "no cutoff: multi-path" in run.stdout.splitlines()[0]
    data = json.loads(out.read_text())
    assert data["verdict"] == "no cutoff" and data["cutoff_size"] is None and data["num_paths"] == 2
    bad = subprocess.run([sys.executable, "-m", "verispec.cli", "prove", "token", "--all-vocab", "--vocab-size", "3"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--vocab-size" in bad.stderr
    both = subprocess.run([sys.executable, "-m", "verispec.cli", "prove", "static_ensemble", "--all-vocab",
                           "--tv-bound", "(1 - w) * tv_pq"], capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "--tv-bound" in both.stderr


def test_symmetry_reduction_still_refutes_a_lossy_equivariant_rule():
    """tie_half (accepts w.p. 1/2 on an exact tie) tells no token apart: one query per orbit, and the
    representative (0, 0) already carries the counterexample (confirmed in exact arithmetic)."""
    watch = Watch()
    result = prove(planted_narrow.tie_half(1), 3, timeout=60, watch=watch, point_trials=0)
    assert watch.equivariant and result.outputs_by_symmetry == 7
    assert result.verdict == "counterexample" and result.counterexample.confirmed
    # its own comparison p(x) == q(x) is outside the theorem: no cutoff for it
    assert "drafted token's probabilities" in watch.cutoff_reasons(1, 1)[0]
