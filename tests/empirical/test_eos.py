"""`engine.decode(eos_token_id=...)`: a row stops in the iteration that emits EOS, on tiny random
Qwen2 models (fp32, CPU; no hub).

- Every registered torch method, greedy: with a planted EOS id (a token target-only greedy emits
  at position 6 or later), the output equals target-only greedy up to and including its first
  EOS, is padded with EOS after it, `lengths` counts the tokens up to EOS, and the stats count
  only those: sum over iterations of (tau + 1) = the row's length.
- Batched rows (storages padded, vanilla, packed = EMS-SD; 8 prompts of different lengths): each
  row stops at its own first EOS (rows stop in different iterations) and equals its batch-1 run (chains, paths, trees, prompt lookup,
  multi-draft selection).
- Drafts accepted past EOS (draft = target, every draft token accepted): they are dropped from
  the output and from the stats.
- T > 0: the stop reads no randomness, so with one seed the EOS run is the no-EOS run cut at its
  first EOS (a coupling check, per method).
- An EOS id the target never emits changes nothing (tokens and stats of `eos_token_id=None`).
- Planted bugs (a cut one token late, stats that count tokens after EOS) fail these checks.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine, methods  # noqa: E402
from verispec.reference import registry  # noqa: E402

from .test_batched import prompts  # noqa: E402,F401 (fixture)
from .test_decode_tiny import tiny  # noqa: E402

N = 16
PROMPT = torch.tensor([3, 7, 1, 9, 3, 7])
SINGLE_ROW = ("ouroboros", "ouroboros_phrase", "lookahead")  # phrase pools: one prompt per call


@pytest.fixture(scope="module")
def pair():
    return tiny(64, 0), tiny(64, 0, noise=0.1)


@pytest.fixture(scope="module")
def greedy(pair):
    """Target-only greedy of PROMPT, [N], and a planted EOS: its token at position 6."""
    tokens = engine.decode(pair[0], None, PROMPT, engine.target_only_method(), N).tokens[0]
    return tokens, int(tokens[6])


def _run(pair, name, prompts, eos, T=0.0, storage=None, seed=0):
    target, draft = pair
    storage = storage or ("sequence" if name in SINGLE_ROW else "padded")
    return engine.decode(target, draft if registry.spec(name).needs_draft else None, prompts, methods.get(name), N,
                         T, seed, storage=storage, eos_token_id=eos)


def check_stopped(result, reference, eos):
    """Every row of `result` is its `reference` row [B, N] (EOS-free runs) cut after its first
    EOS, padded with EOS; lengths and stats count the real tokens only."""
    for b, row in enumerate(reference):
        hits = (row == eos).nonzero()
        length = int(hits[0]) + 1 if hits.numel() else N
        assert int(result.lengths[b]) == length, (b, result.lengths.tolist())
        assert torch.equal(result.tokens[b, :length], row[:length]), b
        assert bool((result.tokens[b, length:] == eos).all()), b
    if bool((result.lengths < N).all()):  # no row cut at N (which counts as before): all real tokens
        assert int((result.stats.accepted_lengths + 1).sum()) == int(result.lengths.sum())


@pytest.mark.parametrize("name", methods.names())
def test_every_method_stops_at_eos_greedy(pair, greedy, name):
    tokens, eos = greedy
    first = int((tokens == eos).nonzero()[0])
    assert first < N - 1  # the planted EOS cuts the run short
    result = _run(pair, name, PROMPT, eos)
    check_stopped(result, tokens.unsqueeze(0), eos)
    assert result.lengths.tolist() == [first + 1]
    assert result.stats.iterations == len(result.stats.accepted_lengths)


@pytest.fixture(scope="module")
def batch(prompts):
    """8 of test_batched's prompts, lengths 1..12."""
    return prompts[:8]


@pytest.fixture(scope="module")
def batch_greedy(pair, batch):
    """Target-only greedy of every prompt of `batch`, batch 1: [8, N]."""
    return torch.cat([engine.decode(pair[0], None, p, engine.target_only_method(), N).tokens for p in batch])


@pytest.mark.parametrize("name,storage", [
    ("target_only", "vanilla"), ("block", "packed"), ("block", "vanilla"), ("gbv", "padded"), ("gbv", "packed"),
    ("opt_tree", "packed"), ("prompt_lookup", "vanilla"), ("spechub", "padded")])
def test_batched_rows_stop_at_their_own_eos(pair, batch, batch_greedy, name, storage):
    reference = batch_greedy
    counts = torch.bincount(reference[:, 1:].reshape(-1), minlength=64)
    eos = int(counts.argmax())  # the id most rows emit: rows stop at different places
    result = _run(pair, name, batch, eos, storage=storage)
    check_stopped(result, reference, eos)
    assert len(set(result.lengths.tolist())) >= 3  # rows stopped in different iterations
    single = [_run(pair, name, [p], eos, storage=storage) for p in batch]
    assert torch.equal(result.tokens, torch.cat([r.tokens for r in single]))
    assert torch.equal(result.lengths, torch.cat([r.lengths for r in single]))
    counted = sorted(result.stats.accepted_lengths.tolist())  # the same per-row counts, batched or not
    assert counted == sorted(t for r in single for t in r.stats.accepted_lengths.tolist())


def test_accepted_drafts_past_eos_are_dropped(pair, greedy):
    """draft = target: every one of the L = 4 draft tokens is accepted, so EOS falls inside an
    accepted block; the tokens after it are dropped, and so is their count."""
    tokens, eos = greedy
    target = pair[0]
    full = engine.decode(target, target, PROMPT, methods.get("block"), N)
    assert bool((full.stats.accepted_lengths == 4).all())
    result = engine.decode(target, target, PROMPT, methods.get("block"), N, eos_token_id=eos)
    check_stopped(result, tokens.unsqueeze(0), eos)
    assert result.stats.accepted_lengths[-1] < 4  # the last iteration counts only up to EOS
    assert int((result.stats.accepted_lengths + 1).sum()) == int(result.lengths[0])


@pytest.mark.parametrize("name", ["target_only", "token", "gbv", "opt_tree", "khisti", "ouroboros_phrase", "lookahead"])
def test_sampled_eos_run_is_the_plain_run_cut(pair, name):
    """T = 1, one seed: the stop reads no uniform, so the EOS run is the plain run cut at its first
    EOS (the plain run's law is the target's: tests/empirical/test_accepted_length_exact.py)."""
    plain = _run(pair, name, PROMPT, None, T=1.0, seed=5)
    eos = int(plain.tokens[0, 5])
    check_stopped(_run(pair, name, PROMPT, eos, T=1.0, seed=5), plain.tokens, eos)


def test_an_eos_never_emitted_changes_nothing(pair, greedy):
    tokens, _ = greedy
    absent = next(t for t in range(64) if t not in tokens.tolist())
    plain = _run(pair, "gbv", PROMPT, None)
    run = _run(pair, "gbv", PROMPT, [absent])
    assert torch.equal(run.tokens, plain.tokens) and run.lengths.tolist() == plain.lengths.tolist() == [N]
    assert torch.equal(run.stats.accepted_lengths, plain.stats.accepted_lengths)


def test_any_of_several_ids_stops(pair, greedy):
    tokens, eos = greedy
    other = int(tokens[3])
    result = _run(pair, "block", PROMPT, [eos, other])
    first = min(int((tokens == t).nonzero()[0]) for t in (eos, other))
    assert result.lengths.tolist() == [first + 1] and bool((result.tokens[0, first + 1:] == eos).all())


def _late_cut(stop_at):
    def late(self, eos, before, tau, *width):  # bug: keeps the token after EOS
        stopped, first = stop_at(self, eos, before, tau, *width)
        self.ctx_len = torch.where(stopped, self.ctx_len + 1, self.ctx_len)
        return stopped, first
    return late


def _counts_past_eos(stop_at):
    def counting(self, eos, before, tau, *width):  # bug: the stats keep the tokens accepted after EOS
        return stop_at(self, eos, before, tau, *width)[0], tau
    return counting


@pytest.mark.parametrize("bug", [_late_cut, _counts_past_eos])
def test_planted_bugs_are_caught(pair, greedy, monkeypatch, bug):
    tokens, eos = greedy
    target = pair[0]
    run = lambda: engine.decode(target, target, PROMPT, methods.get("block"), N, eos_token_id=eos)  # noqa: E731
    check_stopped(run(), tokens.unsqueeze(0), eos)
    monkeypatch.setattr(engine.Rows, "stop_at", bug(engine.Rows.stop_at))
    with pytest.raises(AssertionError):
        result = run()
        check_stopped(result, tokens.unsqueeze(0), eos)
        assert int((result.stats.accepted_lengths + 1).sum()) == int(result.lengths[0])


def test_bad_eos(pair):
    target = pair[0]
    for bad, error in (("2", TypeError), (True, TypeError), ([], TypeError), (1.0, TypeError), (64, ValueError),
                       ([-1], ValueError)):
        with pytest.raises(error, match="eos_token_id"):
            engine.decode(target, None, PROMPT, engine.target_only_method(), 4, eos_token_id=bad)
