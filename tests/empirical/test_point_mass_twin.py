"""point_mass's torch twin, added as one registry entry (no other module changed): the draft
model's greedy chain (`PathsDrafter` at draft temperature 0: argmax tokens, one-hot q) verified by
the token rule.

Checks: shared uniforms give the tokens of the reference `methods.point_mass` run through the
engine's adapter (T = 0, 0.7, 1); greedy decoding equals target-only on a mixed batch; the accepted
lengths tau_1, tau_2 of 2000 rows match the reference's exact laws (Bernstein, alpha 1e-6, as
test_accepted_length_exact). Planted: the same entry without its fixed draft temperature (drafts
sampled at the target's T) diverges from the reference on shared uniforms.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402
from verispec.empirical.drafters import PathsDrafter  # noqa: E402
from verispec.empirical.verifiers import RULES, token_rule  # noqa: E402
from verispec.reference import methods as reference_methods  # noqa: E402
from verispec.reference import registry  # noqa: E402

from .test_accepted_length_exact import check_means, decode_taus, exact_tau_laws, tiny as context_tiny  # noqa: E402
from .test_engine import PROMPTS, pair, twin_and_adapter  # noqa: E402,F401  (pair: a fixture)


def test_the_entry_builds_a_greedy_chain_with_the_token_rule():
    method = methods.get("point_mass", draft_length=3)
    drafter = method.drafter()
    assert isinstance(drafter, PathsDrafter) and drafter.draft_temperature == 0.0 and (drafter.L, drafter.K) == (3, 1)
    assert RULES[method.verifier.name] is token_rule
    assert "point_mass" in registry.names("torch", family=registry.CHAIN)


@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
def test_twin_and_adapter_emit_the_same_tokens(pair, T):  # noqa: F811
    twin, ref = twin_and_adapter(pair, "point_mass", {"draft_length": 3}, T, tokens=16)
    assert torch.equal(twin.tokens, ref.tokens)
    assert torch.equal(twin.stats.accepted_lengths, ref.stats.accepted_lengths)


def test_greedy_equals_target_only_on_a_mixed_batch(pair):  # noqa: F811
    target, draft = pair
    greedy = engine.decode(target, None, PROMPTS, engine.target_only_method(), 14).tokens
    result = engine.decode(target, draft, PROMPTS, methods.get("point_mass", draft_length=3), 14, uniforms=3)
    assert torch.equal(result.tokens, greedy)


def test_accepted_lengths_match_the_reference_exact_law():
    target, draft = context_tiny(20), context_tiny(20, noise=0.3)
    prompt = (1, 3)
    taus = decode_taus(target, draft, "point_mass", {"draft_length": 2}, 2000, "padded", prompt, 5)
    check_means(taus, exact_tau_laws(target, draft, reference_methods.point_mass(2), prompt))


def _sampled_drafts(monkeypatch):
    """Planted: the entry without its fixed draft temperature 0 (drafts sampled from q at T)."""
    entry = registry.spec("point_mass")
    fixed = tuple(kv for kv in entry.torch_fixed if kv[0] != "draft_temperature")
    monkeypatch.setitem(registry.REGISTRY, "point_mass", dataclasses.replace(entry, torch_fixed=fixed))


def test_planted_sampled_drafts_leave_the_reference_tokens(pair, monkeypatch):  # noqa: F811
    """The entry is what builds the twin: sampled drafts give other tokens than the reference's."""
    _sampled_drafts(monkeypatch)
    twin, ref = twin_and_adapter(pair, "point_mass", {"draft_length": 3}, 1.0, tokens=16)
    assert not torch.equal(twin.tokens, ref.tokens)


def test_planted_sampled_drafts_fail_the_exact_law(monkeypatch):
    """Sampled drafts raise E[tau] from 0.11 to 0.37 here, far above the 0.1 power shift."""
    _sampled_drafts(monkeypatch)
    with pytest.raises(AssertionError, match="tau_1"):
        test_accepted_lengths_match_the_reference_exact_law()
