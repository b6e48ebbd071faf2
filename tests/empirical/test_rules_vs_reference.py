"""The torch rules against the numpy reference.

(a) Shared randomness (docs/testing.md, shared randomness): on random toy instances (reference random-tree
    models, V 3-5, L 1-3, K 1-3, temperatures 0 and 1), a fixed draft and a fixed list of
    uniforms, every torch rule emits exactly the tokens of its reference verifier and reads exactly
    as many uniforms. The instances of one shape run as one batch, so batching is checked too.
(b) Law (strength 3): each torch rule, fed the tables of reference toy models and drafts sampled
    in torch, reproduces the reference's EXACT one-iteration law
    (`verispec.reference.exact.iteration_distribution`). G-test (scipy power_divergence,
    lambda_="log-likelihood"), false-alarm rate alpha = 1e-6, sample size n chosen for power 0.9
    against any law at total variation >= 0.01 (noncentral chi-square with noncentrality
    4 n TV^2, df = support size - 1 before pooling cells of expected count < 5); for the
    instances here df is 2-98 and n is 104,069-283,763. Outcomes of probability 0 must never
    occur. Seeds are fixed, so the test is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verispec.empirical import verifiers as rules  # noqa: E402
from verispec.empirical.uniforms import (NumpyUniforms, ReplayUniforms, TorchUniforms,  # noqa: E402
                                         categorical)
from verispec.reference import drafters, exact, methods, models  # noqa: E402
from verispec.reference.drafters import Draft  # noqa: E402
from verispec.reference.randomness import Sampler  # noqa: E402
from verispec.reference.verifiers import (block_verify, gbv_verify, nss_verify, rrs_verify,  # noqa: E402
                                          rrsw_verify, sample_and_follow, spectr_verify,
                                          token_verify, traversal_verify)

from verispec.testing.gtest import ALPHA, g_test, g_test_sample_size  # noqa: E402

from .replay import replay_sampler  # noqa: E402

REFERENCE = {
    "token": token_verify, "block": block_verify, "gbv": gbv_verify, "nss": nss_verify,
    "rrs": rrs_verify, "rrsw": rrsw_verify, "spectr": spectr_verify, "traversal": traversal_verify,
    "sample_and_follow": sample_and_follow,
}
CHAIN = ("token", "block")


def _tempered(model, T):
    return model if T == 1 else models.temperature(model, T)


def _drafter(name, L, K):
    if name in CHAIN:
        return drafters.chain(L)
    if name == "rrsw":
        return drafters.paths_without_replacement(L, K)
    return drafters.iid_paths(L, K)


def _tables(target, draft_model, context, paths, K, L, V):
    """Tree-layout float64 tables for explicit paths (padded to K with length-0 paths)."""
    p = np.zeros((K, L + 1, V))
    q = np.zeros((K, L, V))
    tokens = np.zeros((K, L), dtype=np.int64)
    lengths = np.zeros(K, dtype=np.int64)
    root_p, root_q = target.probs(context), draft_model.probs(context)
    for k in range(K):
        path = paths[k] if k < len(paths) else ()
        lengths[k] = len(path)
        tokens[k, :len(path)] = path
        for d in range(L + 1):
            p[k, d] = target.probs(context + tuple(path[:d])) if d <= len(path) else root_p
            if d < L:
                q[k, d] = draft_model.probs(context + tuple(path[:d])) if d < len(path) else root_q
    return p, q, tokens, lengths


#: (V, L, K) of the shared-randomness cases (K is 1 for chain rules).
SHAPES = [(3, 2, 2), (4, 3, 3), (5, 1, 3)]


def _shared_cases():
    cases = []
    for name in REFERENCE:
        for temps in ((1, 1), (0, 0), (0, 1)):
            for shape_seed in range(3):
                cases.append((name, temps, shape_seed))
    return cases


@pytest.mark.parametrize("name,temps,shape_seed", _shared_cases(),
                         ids=lambda v: v if isinstance(v, str) else str(v))
def test_shared_randomness(name, temps, shape_seed):
    """Same tables, same draft, same uniforms -> identical tokens and uniform counts, 40 instances
    per case (one batch)."""
    V, L, K = SHAPES[shape_seed]
    K = 1 if name in CHAIN else K
    need = rules.uniforms_needed(name, L, K)
    T_target, T_draft = temps
    batch_p, batch_q, batch_paths, batch_lengths, batch_u, expected = [], [], [], [], [], []
    for instance in range(60):
        rng = np.random.default_rng([shape_seed, instance, V, L, K, 7])
        conc = float(rng.choice([0.3, 1.0, 3.0]))
        target = _tempered(models.random_tree(V, seed=int(rng.integers(1 << 30)), concentration=conc), T_target)
        draft_model = _tempered(models.random_tree(V, seed=int(rng.integers(1 << 30)), concentration=conc), T_draft)
        context = tuple(int(t) for t in rng.integers(0, V, size=int(rng.integers(0, 3))))
        drawn = _drafter(name, L, K)(draft_model, context, Sampler(int(rng.integers(1 << 30))))
        paths = drawn.paths
        uniforms = rng.random(need)
        rand = replay_sampler(uniforms)
        fixed = Draft.from_paths(paths, lambda node: draft_model.probs(context + node))
        out = REFERENCE[name](target, draft_model, context, fixed, rand)
        expected.append((out, rand.generator.used))
        p, q, tokens, lengths = _tables(target, draft_model, context, paths, K, L, V)
        batch_p.append(p)
        batch_q.append(q)
        batch_paths.append(tokens)
        batch_lengths.append(lengths)
        batch_u.append(uniforms)
    p = torch.tensor(np.stack(batch_p))
    q = torch.tensor(np.stack(batch_q))
    paths = torch.tensor(np.stack(batch_paths))
    lengths = torch.tensor(np.stack(batch_lengths))
    u = torch.tensor(np.stack(batch_u))
    if name in CHAIN:
        result = rules.RULES[name](p[:, 0], q[:, 0], paths[:, 0], u)
    elif name == "gbv":
        result = rules.gbv_rule(p, q, paths, u)
    else:
        result = rules.RULES[name](p, q, paths, u, lengths)
    for b, (out, used) in enumerate(expected):
        tau = int(result.tau[b])
        got = tuple(int(t) for t in result.tokens[b, :tau + 1])
        assert got == out, f"instance {b}: torch {got} != reference {out}"
        assert int(result.consumed[b]) == used, f"instance {b}: consumed {int(result.consumed[b])} != {used}"
        assert all(int(t) == -1 for t in result.tokens[b, tau + 1:])
        k = int(result.path_index[b])
        assert tuple(int(t) for t in paths[b, k, :tau]) == out[:-1]


def test_stream_sources_match_reference_sampler():
    """NumpyUniforms(seed) is the stream of a reference Sampler(seed); categorical/bernoulli use
    its conventions (including stepping back onto the support)."""
    stream = NumpyUniforms(5)
    sampler = Sampler(5)
    probs = np.array([0.2, 0.0, 0.5, 0.3, 0.0])
    for _ in range(200):
        u = stream.take(1, 1)[0]
        assert int(categorical(torch.tensor(probs), u[0])) == sampler.categorical(probs)
    # Round-off past the last positive entry steps back onto the support.
    assert int(categorical(torch.tensor([0.5, 0.5, 0.0]), torch.tensor(0.9999999999999999))) == 1
    replay = ReplayUniforms([0.1, 0.2, 0.3])
    assert replay.peek(1, 2).tolist() == [[0.1, 0.2]]
    replay.advance(1)
    assert replay.take(1, 2).tolist() == [[0.2, 0.3]]
    assert replay.consumed == 3
    short = ReplayUniforms([0.4])
    assert short.peek(1, 3).tolist() == [[0.4, 0.0, 0.0]] and short.consumed == 0  # a peek past the end is free
    short.advance(1)
    assert short.consumed == 1
    with pytest.raises(IndexError, match="ran out"):  # consuming the padding is an error
        short.advance(1)
    with pytest.raises(ValueError, match="values"):
        ReplayUniforms([1.0])
    with pytest.raises(ValueError, match="rows"):
        NumpyUniforms(0).peek(2, 1)


# ----------------------------------------------------------------------------------------------
# (b) law against the exact reference law
# ----------------------------------------------------------------------------------------------

class PrefixTables:
    """All conditionals of a toy pair below `context` up to depth L, as float64 tensors indexed by
    a prefix id (mixed radix), so drafts and tables for a whole batch are built by indexing."""

    def __init__(self, target, draft_model, context, L):
        V = target.vocab_size
        self.V, self.L = V, L
        self.offset = [sum(V ** j for j in range(d)) for d in range(L + 2)]
        rows_p, rows_q = [], []
        for d in range(L + 1):
            for code in range(V ** d):
                prefix = tuple(int(t) for t in np.unravel_index(code, (V,) * d)) if d else ()
                rows_p.append(np.asarray(target.probs(context + prefix), dtype=np.float64))
                rows_q.append(np.asarray(draft_model.probs(context + prefix), dtype=np.float64))
        self.p = torch.tensor(np.stack(rows_p))  # [num_prefixes, V]
        self.q = torch.tensor(np.stack(rows_q))  # [num_prefixes, V]

    def ids(self, paths):
        """prefix id of every (path, depth): paths [B, K, L] -> [B, K, L+1]."""
        B, K, L = paths.shape
        codes = [torch.zeros(B, K, dtype=torch.long)]
        for d in range(L):
            codes.append(codes[-1] * self.V + paths[:, :, d])
        return torch.stack([c + self.offset[d] for d, c in enumerate(codes)], dim=-1)

    def sample_paths(self, B, K, without_replacement, gen):
        """K i.i.d. paths of length L per row (or distinct first tokens, then chains)."""
        L, V = self.L, self.V
        paths = torch.zeros(B, K, L, dtype=torch.long)
        for d in range(L):
            q = self.q[self.ids(paths)[:, :, d]]  # [B, K, V]
            u = torch.rand(B, K, generator=gen, dtype=torch.float64)
            if d == 0 and without_replacement:
                remaining = q.clone()
                for k in range(K):  # successive draws from q renormalised over unused tokens
                    t = categorical(remaining[:, k] / remaining[:, k].sum(-1, keepdim=True), u[:, k])
                    paths[:, k, 0] = t
                    remaining[:, k + 1:].scatter_(-1, t.view(B, 1, 1).expand(B, K - k - 1, 1), 0.0)
            else:
                paths[:, :, d] = categorical(q, u)
        return paths


LAW_CASES = [
    # name, V, L, K, target temperature, concentration
    ("token", 3, 3, 1, 1, 1.0), ("block", 3, 3, 1, 1, 1.0), ("block", 4, 2, 1, 0, 1.0),
    ("gbv", 3, 2, 2, 1, 1.0), ("gbv", 3, 2, 3, 1, 0.5), ("nss", 3, 2, 2, 1, 1.0),
    ("rrs", 3, 2, 3, 1, 1.0), ("rrsw", 3, 2, 2, 1, 1.0), ("rrsw", 4, 1, 3, 1, 0.5),
    ("spectr", 3, 2, 2, 1, 1.0), ("spectr", 4, 1, 3, 1, 0.5),
    ("traversal", 3, 2, 2, 1, 1.0), ("traversal", 3, 2, 3, 1, 2.0),
    ("sample_and_follow", 3, 2, 2, 1, 1.0),
]


def _reference_method(name, L, K):
    if name in CHAIN:
        return methods.get(name, draft_length=L)
    if name == "sample_and_follow":
        return methods.Method("saf", drafters.iid_paths(L, K), sample_and_follow)
    return methods.get(name, draft_length=L, num_paths=K)


@pytest.mark.parametrize("name,V,L,K,T,conc", LAW_CASES)
def test_law_matches_exact_reference(name, V, L, K, T, conc):
    """G-test at alpha = 1e-6 with n for power 0.9 at TV 0.01 (see module docstring)."""
    seed = sum(map(ord, name)) * 100 + V * 10 + K
    target = _tempered(models.random_tree(V, seed=seed, concentration=conc), T)
    draft_model = models.random_tree(V, seed=seed + 1, concentration=conc)
    context = (1,)
    law = exact.iteration_distribution(target, draft_model, _reference_method(name, L, K), context)
    outcomes = sorted(law, key=lambda o: (len(o), o))
    support = [o for o in outcomes if law[o] > 0]
    n = g_test_sample_size(len(support) - 1)
    gen = torch.Generator().manual_seed(2 * seed)  # drafts; the rule reads an independent stream
    tables = PrefixTables(target, draft_model, context, L)
    paths = tables.sample_paths(n, K, name == "rrsw", gen)  # [n, K, L]
    ids = tables.ids(paths)  # [n, K, L+1]
    p, q = tables.p[ids], tables.q[ids[:, :, :L]]  # [n, K, L+1, V], [n, K, L, V]
    u = TorchUniforms(2 * seed + 1).take(n, rules.uniforms_needed(name, L, K))
    result = rules.verify(name, p, q, paths, u)
    # Encode each emitted tuple as (length, mixed-radix code) -> count.
    lengths = result.tau + 1
    tokens = result.tokens.clamp(min=0)
    code = torch.zeros(n, dtype=torch.long)
    for j in range(L + 1):
        code = torch.where(j < lengths, code * V + tokens[:, j], code)
    key = lengths * (V ** (L + 1)) + code
    values, counts = torch.unique(key, return_counts=True)
    observed = {}
    for value, count in zip(values.tolist(), counts.tolist()):
        length, c = divmod(value, V ** (L + 1))
        observed[tuple(int(t) for t in np.unravel_index(c, (V,) * length))] = count
    impossible = {o: c for o, c in observed.items() if law.get(o, 0) <= 0}
    assert not impossible, f"outcomes of probability 0 occurred: {impossible}"
    stat, p_value, df = g_test([observed.get(o, 0) for o in support], [float(law[o]) for o in support])
    assert p_value > ALPHA, f"{name}: G = {stat:.1f}, df = {df}, p = {p_value:.3g} (n = {n})"


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------

def _good_chain(B=2, L=2, V=3):
    p = torch.full((B, L + 1, V), 1.0 / V, dtype=torch.float64)
    q = torch.full((B, L, V), 1.0 / V, dtype=torch.float64)
    draft = torch.zeros(B, L, dtype=torch.long)
    u = torch.full((B, L + 1), 0.5, dtype=torch.float64)
    return p, q, draft, u


def test_bad_input_is_rejected_with_named_argument():
    p, q, draft, u = _good_chain()
    rules.token_rule(p, q, draft, u)
    with pytest.raises(TypeError, match="p"):
        rules.token_rule(p.numpy(), q, draft, u)
    with pytest.raises(ValueError, match="q"):
        rules.block_rule(p, q[:, :, :2], draft, u)
    with pytest.raises(ValueError, match="p"):
        rules.token_rule(p * 2, q, draft, u)
    bad = p.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="p: contains NaN"):
        rules.token_rule(bad, q, draft, u)
    with pytest.raises(ValueError, match="negative"):
        rules.token_rule(p, q - 0.5, draft, u)
    with pytest.raises(ValueError, match="draft"):
        rules.token_rule(p, q, draft + 7, u)
    with pytest.raises(TypeError, match="draft"):
        rules.token_rule(p, q, draft.double(), u)
    with pytest.raises(ValueError, match="uniforms"):
        rules.token_rule(p, q, draft, u[:, :2])
    with pytest.raises(ValueError, match="uniforms"):
        rules.token_rule(p, q, draft, u + 0.5)
    tp, tq, tpaths = p.unsqueeze(1), q.unsqueeze(1), draft.unsqueeze(1)
    with pytest.raises(ValueError, match="lengths"):
        rules.rrs_rule(tp, tq, tpaths, torch.zeros(2, 10, dtype=torch.float64), torch.full((2, 1), 5))
    with pytest.raises(ValueError, match="name"):
        rules.uniforms_needed("nope", 2)
    with pytest.raises(ValueError, match="draft_length"):
        rules.uniforms_needed("rrs", 0)
    with pytest.raises(ValueError, match="num_paths"):
        rules.uniforms_needed("rrs", 2, 0)
