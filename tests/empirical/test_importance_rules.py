"""The torch IS steps (optimal_is, khisti) against the numpy reference on shared uniforms: with the
reference's selection tables, random nodes (V 2-5, K 1-3, flat to peaked), the reference's own
drafts and a fixed list of uniforms, the batched torch steps emit exactly the reference token and
read exactly as many uniforms."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verispec.empirical.verifiers.importance import khisti_step, optimal_is_step  # noqa: E402
from verispec.reference import drafters, models  # noqa: E402
from verispec.reference.randomness import Sampler  # noqa: E402
from verispec.reference.verifiers import importance as reference  # noqa: E402

from .replay import replay_sampler  # noqa: E402


def _nodes(count, seed):
    rng = np.random.default_rng(seed)
    for i in range(count):
        V, K = int(rng.integers(2, 6)), 1 + i % 3
        alpha = [0.2, 1.0, 5.0][i % 3]
        p, q = rng.dirichlet([alpha] * V), rng.dirichlet([alpha] * V)
        draft = drafters.iid_paths(1, K)(models.iid(q), (), Sampler(int(rng.integers(2 ** 31))))
        yield p, q, draft.tokens(()), rng.random(K + 2)


def test_torch_optimal_is_step_equals_the_reference_on_shared_uniforms():
    groups: dict[tuple, list] = {}
    for p, q, drafts, u in _nodes(120, 0):
        sampler = replay_sampler(u)
        candidates = tuple(sorted(set(drafts)))
        y = reference.optimal_is_step(p, q, candidates, len(drafts), sampler)
        select, q_sel = reference.optimal_selection(p, q, len(drafts))
        groups.setdefault((len(p), len(candidates)), []).append(
            (p, q_sel, candidates, select[candidates], u[:3], y, sampler.generator.used))
    for rows in groups.values():
        y, used = optimal_is_step(
            torch.tensor(np.array([r[0] for r in rows])), torch.tensor(np.array([r[1] for r in rows], dtype=float)),
            torch.tensor([list(r[2]) for r in rows]), torch.tensor(np.array([r[3] for r in rows], dtype=float)),
            torch.tensor(np.array([r[4] for r in rows])))
        assert y.tolist() == [r[5] for r in rows]
        assert used.tolist() == [r[6] for r in rows]
    assert {r[6] for rows in groups.values() for r in rows} == {2, 3}  # accepted and corrected rows


def test_torch_khisti_step_equals_the_reference_on_shared_uniforms():
    groups: dict[tuple, list] = {}
    for p, q, drafts, u in _nodes(120, 1):
        K = len(drafts)
        sampler = replay_sampler(u[:K + 1])
        y = reference.khisti_step(p, q, drafts, sampler)
        law, keeps = q, []
        for _ in range(K - 1):
            keep, law = reference.pair_selection(p, law, q)
            keeps.append(np.array(keep, dtype=float))
        keeps = np.array(keeps).reshape(K - 1, len(p), len(p))
        groups.setdefault((len(p), K), []).append((p, keeps, np.asarray(law, dtype=float), drafts, u[:K + 1], y,
                                                   sampler.generator.used))
    for (V, K), rows in groups.items():
        y, used = khisti_step(
            torch.tensor(np.array([r[0] for r in rows])), torch.tensor(np.array([r[1] for r in rows])),
            torch.tensor(np.array([r[2] for r in rows])), torch.tensor([list(r[3]) for r in rows]),
            torch.tensor(np.array([r[4] for r in rows])))
        assert y.tolist() == [r[5] for r in rows], (V, K)
        assert used.tolist() == [r[6] for r in rows], (V, K)
    assert {r[6] - len(r[3]) for rows in groups.values() for r in rows} == {0, 1}  # both branches
