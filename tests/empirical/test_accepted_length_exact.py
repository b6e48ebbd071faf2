"""Measured accepted lengths equal the exact E[tau] of the same models: draft-cache bugs become visible.

A draft-side cache desync (the draft conditioning on a stale or shortened prefix) only lowers or
shifts acceptance: every output stays an exact draw from the target, so no lossless test sees it.
Here the tiny torch models are wrapped as reference `LanguageModel`s (`as_reference`: cache-free
forwards) and the reference engine computes, exactly, the law of tau in the first two iterations
from a fixed prompt: tau_1 from the prompt, tau_2 = the mixture over every first-iteration outcome
e of the law of tau from prompt + e (`exact.iteration_distribution`, `accepted_length_distribution`).
The decoder's second iteration starts from a draft cache that the first iteration's accept/reject
edited, so a cache bug moves the mean of tau_2.

Statistics. n rows decode the same prompt independently (own uniforms), so tau_1 (and tau_2) are
i.i.d. over rows, bounded in [0, L]. Each mean is tested two-sided with Bernstein's inequality using
the exact variance sigma^2 of its law (|tau - mu| <= L): reject when |mean - mu| >= t with
n t^2 / (2 sigma^2 + 2 L t / 3) = ln(4 / ALPHA) (two means, Bonferroni: total false-alarm rate
ALPHA = 1e-6 per case). Power: a decoder whose mean is off by delta >= t + L sqrt(ln(1 / 0.1) / (2 n))
(Hoeffding under the alternative) is caught with probability >= 0.9; every failure message prints
that delta_min (measured here: 0.077-0.108 at n = 4000, 0.17 for the packed storage at n = 1500).
Each case has partial acceptance where the bug acts: P(0 < tau_2 < L) > 0.1 (asserted, exact law).

Cases (L = 2, depth 2): chain + token, chain + block, K = 2 i.i.d. paths + gbv, OPT-Tree (n = 4) +
sample-and-follow, the static trees k-ary (k = 2, n = 6), EAGLE-style (n = 5) and chain tree (n = 2)
against their reference twin `drafters.ranked_tree` (the same rank paths) + sample-and-follow,
prompt lookup against the reference `methods.prompt_lookup`, and a depth-3 k-ary tree (n = 8, L = 3:
the draft runs tree layer 2 below its cached layer-1 siblings, so its cache holds a forest); slow:
that tree on the packed storage (per-row attention with a forest), block on the packed (EMS-SD) and vanilla storages, K = 2 paths without
replacement + rrsw, and the reference `methods.block` Method itself through the engine's adapter. Planted
bugs (monkeypatched into the drafters' accept step; each must be caught at its fixed seed):
"not cropped" (after a rejection the draft cache keeps the drafted node it ran below the last
accepted one: the draft conditions on a stale prefix) and "resume from own proposal" (after a
rejection the draft continues from its own first proposed child instead of the correction). They
move E[tau_2] by 0.28-0.93 here (e.g. block: measured 0.896 with the bug vs exact 0.484; bound 0.069).
Prompt lookup has no draft cache; its planted bug is "stale lookup" (the n-gram search runs on a
history without the last correction/bonus token), which moves E[tau_2] by -0.66.

Models: V = 4, 2 layers, hidden 8; attention weights x10 (so that the whole prefix, not only the
last token, shapes a conditional) and LM head x16 (peaked); the draft is the target with every
parameter perturbed by 0.3 of its std; T = 1; prompt (1, 3). With these models the bugs happen to
RAISE acceptance: a desync is a bug whichever way it moves E[tau], and the test is two-sided.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.empirical import engine  # noqa: E402
from verispec.empirical import methods as torch_methods  # noqa: E402
from verispec.empirical.as_reference import TorchLanguageModel  # noqa: E402
from verispec.empirical.drafters import ModelDrafter, PromptLookupDrafter  # noqa: E402
from verispec.empirical.model import CausalLM  # noqa: E402
from verispec.empirical.drafters.tree import static_shape  # noqa: E402
from verispec.reference import drafters as ref_drafters  # noqa: E402
from verispec.reference import exact  # noqa: E402
from verispec.reference import methods as ref_methods  # noqa: E402
from verispec.reference.verifiers import sample_and_follow  # noqa: E402

ALPHA = 1e-6
BETA = 0.1
TEMPERATURE = 1.0


def tiny(seed, noise=0.0, vocab_size=4, head_scale=16.0, attn_scale=10.0):
    """2-layer Qwen2, hidden 8; q/k/v/o weights x attn_scale (context-sensitive conditionals),
    LM head x head_scale (peaked); `noise` perturbs every parameter (a draft close to the target)."""
    config = transformers.Qwen2Config(vocab_size=vocab_size, hidden_size=8, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, intermediate_size=16,
                                      max_position_embeddings=64, tie_word_embeddings=False)
    lm = CausalLM.from_config(config, seed=seed)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, parameter in lm.model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")):
                parameter.mul_(attn_scale)
            if noise:
                parameter.add_(noise * parameter.std() * torch.randn(parameter.shape, generator=g))
        lm.model.get_output_embeddings().weight.mul_(head_scale)
    return lm


@pytest.fixture(scope="module")
def models():
    return tiny(20), tiny(20, noise=0.3)


def static_tree(kind: str, node_budget: int, max_depth: int):
    """The reference twin of a static torch tree: the same rank paths (`trees.static_shape`) as
    `ranked_tree` (children = the draft's top-ranked tokens), verified by sample-and-follow."""
    drafter = ref_drafters.ranked_tree(static_shape(kind, node_budget, max_depth))
    return ref_methods.Method(kind, drafter, sample_and_follow, {"node_budget": node_budget}, model_state_only=True)


# (case id, torch method name, reference Method, params, rows n, storage, prompt)
CASES = [
    ("token", "token", ref_methods.token(2), {"draft_length": 2}, 4000, "padded", (1, 3)),
    ("block", "block", ref_methods.block(2), {"draft_length": 2}, 4000, "padded", (1, 3)),
    ("gbv-K2", "gbv", ref_methods.gbv(2, 2), {"draft_length": 2, "num_paths": 2}, 4000, "padded", (1, 3)),
    ("opt_tree", "opt_tree", ref_methods.opt_tree(4, 0.0, 2), {"node_budget": 4, "max_depth": 2}, 4000,
     "padded", (1, 3)),
    # static trees (k = 2 children per node; EAGLE's rank-prior shape; the top-1 chain), n = 2000:
    # at prompt (2, 0) the planted bugs move E[tau_2] by 0.8-0.9 (power 0.9 from 0.12)
    ("kary", "kary", static_tree("kary", 6, 2), {"node_budget": 6, "max_depth": 2}, 2000, "padded", (2, 0)),
    ("eagle", "eagle", static_tree("eagle", 5, 2), {"node_budget": 5, "max_depth": 2}, 2000, "padded", (2, 0)),
    ("chain_tree", "chain_tree", static_tree("chain", 2, 2), {"node_budget": 2, "max_depth": 2}, 2000,
     "padded", (2, 0)),
    # prompt lookup (no draft model): the suffix (0, 2) recurs, so iteration 1 drafts (3, 0); the
    # iteration-2 drafts are n-gram continuations of the prompt plus what iteration 1 emitted
    ("prompt_lookup", "prompt_lookup", ref_methods.prompt_lookup(2, 2), {"draft_length": 2, "max_ngram": 2},
     2000, "padded", (0, 2, 3, 0, 2)),
    # depth 3: the draft runs tree layer 2 below its cached layer-1 siblings (packed: per-row
    # attention with a forest), so the draft cache holds a forest the commit must cut to one path
    ("kary3", "kary", static_tree("kary", 8, 3), {"node_budget": 8, "max_depth": 3}, 2000, "padded", (2, 0)),
    ("kary3-packed", "kary", static_tree("kary", 8, 3), {"node_budget": 8, "max_depth": 3}, 1500, "packed",
     (2, 0)),
    ("block-packed", "block", ref_methods.block(2), {"draft_length": 2}, 1500, "packed", (1, 3)),
    ("block-vanilla", "block", ref_methods.block(2), {"draft_length": 2}, 4000, "vanilla", (1, 3)),
    ("rrsw-K2", "rrsw", ref_methods.rrsw(2, 2), {"draft_length": 2, "num_paths": 2}, 4000, "padded", (1, 3)),
    # the reference Method itself through the engine's adapter (numpy verify per row)
    ("block-adapter", ref_methods.block(2), ref_methods.block(2), {}, 2000, "padded", (1, 3)),
]
# slow: per-row Python loops (packed attention, the adapter's numpy verify); rrsw's enumeration
SLOW = {"block-packed", "block-vanilla", "rrsw-K2", "block-adapter", "kary3-packed"}


def _params(rows, key):
    return [pytest.param(*row, marks=pytest.mark.slow, id=key(row)) if row[0] in SLOW
            else pytest.param(*row, id=key(row)) for row in rows]


DEPTH = 2  # L, the deepest accepted length of every case but those in DEPTHS
DEPTHS = {"kary3": 3, "kary3-packed": 3}


# ----------------------------------------------------------------------------------------------
# The decoder under test: the ONE call site (switching decoders is one line here)
# ----------------------------------------------------------------------------------------------

def decode_taus(target, draft, name, params, n, storage, prompt, seed, depth=DEPTH):
    """tau of the first and second iteration of n independent rows decoding `prompt`: int64 [n] each.

    max_new_tokens = L + 2 keeps every row in the batch for two iterations (one iteration emits at
    most L + 1 tokens), and `stats.accepted_lengths` lists taus iteration by iteration, active rows
    in order, so its first 2 n entries are (tau_1 of every row, tau_2 of every row)."""
    method = torch_methods.get(name, **params) if isinstance(name, str) else name  # or a reference Method
    result = engine.decode(target, draft, torch.tensor(prompt).expand(n, -1), method, depth + 2,
                           temperature=TEMPERATURE, uniforms=seed, storage=storage)
    taus = result.stats.accepted_lengths
    assert taus.numel() >= 2 * n
    return taus[:n], taus[n:2 * n]


# ----------------------------------------------------------------------------------------------
# The exact side and the test statistic
# ----------------------------------------------------------------------------------------------

def exact_tau_laws(target, draft, method, prompt, depth=DEPTH):
    """({tau: P} of iteration 1 from `prompt`, {tau: P} of iteration 2), exactly (float64)."""
    t_ref, d_ref = TorchLanguageModel(target, TEMPERATURE), TorchLanguageModel(draft, TEMPERATURE)
    first = exact.iteration_distribution(t_ref, d_ref, method, prompt)  # {emitted: P}
    contexts = [prompt] + [prompt + e for e in first]
    t_ref.warm(contexts, depth)  # batched forwards instead of one per prefix
    d_ref.warm(contexts, depth)
    law1 = exact.accepted_length_distribution(t_ref, d_ref, method, prompt)
    law2: dict = {}
    for emitted, p in first.items():
        for tau, q in exact.accepted_length_distribution(t_ref, d_ref, method, prompt + emitted).items():
            law2[tau] = law2.get(tau, 0.0) + p * q
    return law1, law2


def bernstein_threshold(variance: float, n: int, alpha: float, bound: float) -> float:
    """t with 2 exp(-n t^2 / (2 variance + 2 bound t / 3)) = alpha: a two-sided level-alpha bound on
    |mean - mu| for n i.i.d. variables with |X - mu| <= bound and the given variance."""
    c = math.log(2 / alpha)
    a = 2 * bound * c / 3
    return (a + math.sqrt(a * a + 8 * n * variance * c)) / (2 * n)


def check_means(taus, laws, alpha=ALPHA, bound=DEPTH):
    """Assert both measured means lie within their Bernstein bound of the exact E[tau]; returns the
    report lines (mean, exact mean, threshold, delta_min for power 1 - BETA)."""
    report, failures = [], []
    for i, (tau, law) in enumerate(zip(taus, laws), start=1):
        n = tau.numel()
        mu = sum(k * p for k, p in law.items())
        variance = sum(k * k * p for k, p in law.items()) - mu * mu
        t = bernstein_threshold(variance, n, alpha / len(taus), bound)
        delta_min = t + bound * math.sqrt(math.log(1 / BETA) / (2 * n))
        mean = float(tau.double().mean())
        line = (f"tau_{i}: measured {mean:.4f}, exact {mu:.4f}, |diff| {abs(mean - mu):.4f}, bound {t:.4f} "
                f"(alpha {alpha:g}, n {n}; power >= {1 - BETA} at |shift| >= {delta_min:.3f})")
        report.append(line)
        if abs(mean - mu) >= t:
            failures.append(line)
    assert not failures, "; ".join(failures)
    return report


# ----------------------------------------------------------------------------------------------
# Planted draft-cache bugs (monkeypatched into the model drafters' accept step)
# ----------------------------------------------------------------------------------------------

_accept = ModelDrafter.accept


def _first_child(tree, verdict, among=None):
    """The smallest real child node of each row's deepest accepted node (0 = the root) -> (node [B],
    has [B]); `among` [B, N] restricts the candidates."""
    B = tree.tokens.shape[0]
    deepest = torch.cat([torch.zeros(B, 1, dtype=torch.long), verdict.nodes.clamp(min=0)], 1).gather(
        1, verdict.tau.unsqueeze(1))  # [B, 1]
    child = tree.real & (tree.parents == deepest)  # [B, N]
    child[:, 0] = False
    if among is not None:
        child &= among
    return child.long().argmax(1), child.any(1)


def _not_cropped(self, tree, verdict):
    """After a rejection the draft cache keeps the first drafted child it ran below the last
    accepted node: the draft conditions on a stale prefix (..., rejected draft, correction)."""
    commit = self.kv.commit

    def planted(keep, prefix=False):  # keep [B, m]: the forest nodes the draft cache keeps
        node, has = _first_child(tree, verdict, among=self.fed >= 0)
        rows = has.nonzero().squeeze(1)
        keep = keep.clone()
        keep[rows, self.fed[rows, node[rows]]] = True
        commit(keep)  # no prefix hint: the stale child breaks the prefix

    self.kv.commit = planted
    try:
        _accept(self, tree, verdict)
    finally:
        del self.kv.commit


def _resume_from_own_proposal(self, tree, verdict):
    """After a rejection the draft continues from its own first proposed child of the last
    accepted node instead of the correction token."""
    _accept(self, tree, verdict)
    node, has = _first_child(tree, verdict)
    stale = torch.where(has, tree.tokens.gather(1, node.unsqueeze(1)).squeeze(1), self.pending[:, 1])
    self.pending = torch.stack([torch.where(self.pending_count == 2, self.pending[:, 0], stale), stale], 1)


_lookup_draft = PromptLookupDrafter.draft


class _StaleRows:
    """The engine's rows with a context one token short (the newest emitted token missing)."""

    def __init__(self, rows):
        self.ctx, self.last, self.prompt_len = rows.ctx, rows.last, rows.prompt_len
        self.ctx_len = torch.where(rows.ctx_len > rows.prompt_len, rows.ctx_len - 1, rows.ctx_len)  # [B]


def _stale_lookup(self, rows):
    """Prompt lookup searches a history that lacks the last correction/bonus token (an
    off-by-one in the lookup's context length): its n-gram match is stale."""
    return _lookup_draft(self, _StaleRows(rows))


#: plant -> (class, method name) it replaces
PATCHED = {_not_cropped: (ModelDrafter, "accept"), _resume_from_own_proposal: (ModelDrafter, "accept"),
           _stale_lookup: (PromptLookupDrafter, "draft")}


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def laws(models):
    """case id -> the exact (law of tau_1, law of tau_2), computed once per module."""
    memo = {}

    def get(case_id):
        if case_id not in memo:
            row = next(row for row in CASES if row[0] == case_id)
            memo[case_id] = exact_tau_laws(*models, row[2], row[6], DEPTHS.get(case_id, DEPTH))
        return memo[case_id]

    return get


@pytest.mark.parametrize("case_id,name,method,params,n,storage,prompt", _params(CASES, lambda row: row[0]))
def test_measured_tau_equals_exact(models, laws, case_id, name, method, params, n, storage, prompt):
    law1, law2 = laws(case_id)
    depth = DEPTHS.get(case_id, DEPTH)
    # partial acceptance in the iteration that starts from an edited draft cache
    assert sum(p for k, p in law2.items() if 0 < k < depth) > 0.1
    taus = decode_taus(*models, name, params, n, storage, prompt, seed=sum(map(ord, case_id)), depth=depth)
    check_means(taus, (law1, law2), bound=depth)


PLANTS = [("token", _resume_from_own_proposal), ("block", _not_cropped), ("gbv-K2", _not_cropped),
          ("opt_tree", _not_cropped), ("opt_tree", _resume_from_own_proposal),
          ("block-packed", _not_cropped), ("rrsw-K2", _resume_from_own_proposal),
          ("block-adapter", _not_cropped), ("block-vanilla", _not_cropped),
          ("kary", _not_cropped), ("eagle", _resume_from_own_proposal), ("chain_tree", _not_cropped),
          ("prompt_lookup", _stale_lookup), ("kary3", _not_cropped), ("kary3-packed", _not_cropped)]


@pytest.mark.parametrize("case_id,plant", _params(PLANTS, lambda row: f"{row[0]}-{row[1].__name__.strip('_')}"))
def test_planted_draft_cache_bug_is_caught(models, laws, monkeypatch, case_id, plant):
    _, name, _, params, n, storage, prompt = next(row for row in CASES if row[0] == case_id)
    expected = laws(case_id)
    monkeypatch.setattr(*PATCHED[plant], plant)
    depth = DEPTHS.get(case_id, DEPTH)
    taus = decode_taus(*models, name, params, n, storage, prompt, seed=sum(map(ord, case_id)), depth=depth)
    with pytest.raises(AssertionError, match="tau_2"):
        check_means(taus, expected, bound=depth)


def test_bernstein_threshold_level():
    """The bound is a valid level: on exact i.i.d. draws from a known law the false-alarm rate at a
    loose alpha (0.05) stays below alpha (10,000 simulated tests of n = 200)."""
    rng = np.random.default_rng(0)
    law = {0: 0.5, 1: 0.2, 2: 0.3}
    mu = 0.8
    variance = 0.2 + 4 * 0.3 - mu * mu
    t = bernstein_threshold(variance, 200, 0.05, 2)
    means = rng.choice(3, size=(10_000, 200), p=list(law.values())).mean(1)
    assert (np.abs(means - mu) >= t).mean() <= 0.05


def test_torch_language_model(models):
    """The wrapper's probs = softmax(logits / T) of a plain forward; `warm` fills the same values in
    batched forwards; T = 0 is the one-hot argmax; bad input raises."""
    target = models[0]
    ref = TorchLanguageModel(target, 0.7)
    logits, _ = target.forward(torch.tensor([[1, 3, 2]]))
    expected = torch.softmax(logits[0, -1].double() / 0.7, -1).numpy()
    np.testing.assert_allclose(ref.probs((1, 3, 2)), expected, rtol=0, atol=1e-6)
    warmed = TorchLanguageModel(target, 0.7)
    assert warmed.warm([(1, 3)], 2) == 1 + 4 + 16 and warmed.warm([(1, 3)], 2) == 0
    np.testing.assert_allclose(warmed.probs((1, 3, 2)), ref.probs((1, 3, 2)), rtol=0, atol=1e-6)
    greedy = TorchLanguageModel(target, 0).probs((1, 3, 2))
    assert greedy.sum() == 1 and greedy[int(np.argmax(expected))] == 1
    with pytest.raises(ValueError, match="prefix"):
        ref.probs(())
    with pytest.raises(TypeError, match="lm"):
        TorchLanguageModel(target.model)
    with pytest.raises(ValueError, match="temperature"):
        TorchLanguageModel(target, -1.0)


@pytest.mark.parametrize("kind,n", [("kary", 6), ("eagle", 5), ("chain", 2), ("kary", 3)])
def test_ranked_tree_is_the_static_torch_tree(models, kind, n):
    """The reference twin drafts exactly the torch static tree (same nodes) on the tiny draft."""
    from verispec.empirical.drafters.tree import draft_tree

    draft = models[1]
    records = draft_tree(draft, torch.tensor([2, 0]), kind, n, max_depth=2, draft_temperature=TEMPERATURE)
    tree = ref_drafters.ranked_tree(static_shape(kind, n, 2))(TorchLanguageModel(draft, TEMPERATURE), (2, 0), None)
    nodes, stack = set(), [()]
    while stack:
        node = stack.pop()
        for token in tree.child_set(node):
            nodes.add(node + (token,))
            stack.append(node + (token,))
    assert nodes == set(records.nodes(0)) and len(nodes) == n


def test_ranked_tree_bad_input():
    with pytest.raises(ValueError, match="parent"):
        ref_drafters.ranked_tree([(0, 1)])
    with pytest.raises(ValueError, match="rank_paths"):
        ref_drafters.ranked_tree([(), (0,)])
    with pytest.raises(ValueError, match="rank_paths"):
        ref_drafters.ranked_tree([(-1,)])
    with pytest.raises(TypeError, match="draft"):
        ref_drafters.ranked_tree([(0,)])(None, (1,), None)
