"""SpecHub's torch step against the numpy reference on shared uniforms: on random toy nodes (V 2-6,
flat to peaked p and q, p == q, q with a single token), with the reference's own draft pairs and
a fixed list of uniforms, the batched torch step emits exactly the reference token and reads
exactly as many uniforms."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verispec.empirical.verifiers.spechub import spechub_step  # noqa: E402
from verispec.reference.randomness import Sampler  # noqa: E402
from verispec.reference.verifiers import spechub as reference  # noqa: E402

from .replay import replay_sampler  # noqa: E402


def _nodes(count=400, seed=0):
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(count):
        V = int(rng.integers(2, 7))
        alpha = [0.1, 0.5, 1.0, 5.0][i % 4]
        p = rng.dirichlet([alpha] * V)
        q = p.copy() if i % 17 == 0 else rng.dirichlet([alpha] * V)
        if i % 23 == 0:
            q = np.eye(V)[int(rng.integers(V))]  # q(a) = 1: a single draft
        nodes.append((p, q))
    return nodes


def test_torch_spechub_step_equals_the_reference_on_shared_uniforms():
    rng = np.random.default_rng(1)
    by_size: dict[int, list] = {}
    for p, q in _nodes():
        pair = reference.hub_pair(q, Sampler(int(rng.integers(2 ** 31))))
        u = rng.random(3)
        sampler = replay_sampler(u)
        y = reference.spechub_step(p, q, pair, sampler)
        by_size.setdefault(len(p), []).append((p, q, pair, u, y, sampler.generator.used))
    checked = 0
    for V, rows in by_size.items():
        p = torch.tensor(np.array([r[0] for r in rows]), dtype=torch.float64)  # [B, V]
        q = torch.tensor(np.array([r[1] for r in rows]), dtype=torch.float64)  # [B, V]
        first = torch.tensor([r[2][0] for r in rows])
        second = torch.tensor([r[2][1] if len(r[2]) == 2 else -1 for r in rows])
        u = torch.tensor(np.array([r[3] for r in rows]), dtype=torch.float64)  # [B, 3]
        y, used = spechub_step(p, q, first, second, u)
        assert y.tolist() == [r[4] for r in rows], f"V={V}"
        assert used.tolist() == [r[5] for r in rows], f"V={V}"
        checked += len(rows)
    assert checked == 400
    # every branch was exercised: accepted first, hub accepted, correction, single draft
    uses = {r[5] for rows in by_size.values() for r in rows}
    assert uses == {1, 2, 3}


def test_torch_spechub_step_rejects_bad_shapes():
    p = torch.full((2, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="spechub_step: shapes"):
        spechub_step(p, p, torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long),
                     torch.zeros(2, 2))
