"""Global Resolution: the alpha*-optimal selection for K i.i.d. drafts at any vocabulary size.

Source: Thomas & Pal 2025, "Global Resolution: Optimal Multi-Draft Speculative Sampling via Convex
Minimization" (arXiv 2511.15898; max-flow and complementary slackness in its Section 5, the convex
programs in Section 6): the optimal transport LP for K i.i.d. drafts is a max-flow whose feasible
selected-token laws y form the base polytope of the polymatroid f(A) = 1 - (1 - q(A))^K (P(some
draft in A)), so the best selection solves a problem in V variables, not one per drafted set. The
paper solves a truncated convex problem to a tolerance; the construction below is derived in that
frame, is not the paper's algorithm, and is exact:

1. Target law (`resolution_targets`). alpha* = min_H p(H) + 1 - q(H)^K is reached at a prefix H
   of the tokens sorted by p/q (`verispec.theory.closed_forms.optimal_multidraft_acceptance`).
   Any y in the base polytope with y <= p off H, y >= p on H and y(H) = q(H)^K reaches it; we take
   y = min(p, c q) off H and y = max(p, c' q) on H, c and c' fixing the two sums (O(V log V)).
2. Realisation (`Resolution`). Every draft copy of token j gets a position in [0, 1] from a law
   mu_j / q(j), sum_j mu_j = Lebesgue; the copy of highest position is selected, so
   y_j = int K v^(K-1) d mu_j(v). Tokens are laid out by ratio on [0, 1] (H below); each segment
   blends a fraction lambda of its tokens uniformly over itself (the largest lambda keeping the
   rest feasible, a ratio of linear terms) and splits where the rest becomes tight (a prefix
   whose targets equal the bottom of the segment's weight) - recursion until one token is left.
   Tokens of one target ratio y/q (a tie run: clipping and bf16 logits tie most of a real
   vocabulary) need the same average weight, so a run is realised as one token and its tokens
   share its position law per unit of q. A token's pieces are nested segments, so the float64
   winner law is a prefix sum over them per elementary interval. Cost: one O(V log V) sort, then
   O(runs) per blend.
3. Verification (`global_resolution_step`): select a drafted token with the exact winner law of
   the copies' positions (`Resolution.winner_probabilities`), then single-draft speculative
   sampling against y (Khisti et al., arXiv 2410.18234: lossless for any selection whose law y is
   exact). Rational in, rational out: only + - * / and comparisons, so `verispec prove` runs it on
   symbolic probabilities.

Exact and float64 values go through the same routines where the same operations serve both
(`_clip_targets`, `_law`, `pieces`, `_winner_integral`). Three steps differ by number type on
purpose: float64 ratios within a few ulps form one tie run (`tie_runs`), while exact ones must be
equal; the float64 recursion (`Resolution._resolve_float`) keeps each segment's targets as an
affine map A t0 - B q of the runs' first targets and reads prefix sums taken once (blends go
thousands deep on a real vocabulary), where the exact one (`Resolution._resolve`) sums each
segment's own targets; and the float64 winner law is vectorised over the elementary intervals.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..memo import MEMO_VOCAB, by_value
from ..deprecation import deprecated, renamed_keywords
from ..probability import accept_probability, is_exact, is_symbolic, residual
from .gbv import rank_key
from .multidraft import top_down

def ratio_order(p, q) -> np.ndarray:
    """Drafted tokens (q > 0) sorted by p/q ascending, ties by id -> int64 [n]."""
    if is_exact(q):
        drafted = [t for t in range(len(q)) if q[t] > 0]
        return np.array(sorted(drafted, key=lambda t: rank_key(p, q, t)), dtype=np.int64)
    drafted = np.flatnonzero(q > 0)  # [n]
    return drafted[np.argsort(p[drafted] / q[drafted], kind="stable")]


@renamed_keywords(num_drafts="num_paths")
def resolution_targets(p, q, num_paths: int):
    """The optimal selected-token law of step 1 (module docstring).

    Args:
        p, q: target and draft distributions [V] (float64 or exact); num_paths: K >= 1.

    Returns:
        (order, h, targets): the drafted tokens by p/q ascending [n], the size h of the minimising
        prefix H = order[:h], and targets [n] (y of order[i]).
    """
    K = int(num_paths)
    order = ratio_order(p, q)
    ps, qs = p[order], q[order]  # [n]
    zero = ps[:0].sum() * 0
    p_prefix = np.concatenate([[zero], np.cumsum(ps)])  # [n + 1]
    q_prefix = np.concatenate([[zero], np.cumsum(qs)])
    if is_exact(q):
        h = _first_argmin([p_prefix[i] - min(q_prefix[i], 1) ** K for i in range(len(order) + 1)])
    else:  # np.argmin returns the first minimiser, as _first_argmin
        h = int(np.argmin(p_prefix - np.minimum(q_prefix, 1) ** K))
    mass = q_prefix[h]
    bottom = _clip_targets(ps[:h], qs[:h], mass ** K, below=True)
    top = _clip_targets(ps[h:], qs[h:], 1 - mass ** K, below=False)
    return order, h, np.concatenate([bottom, top])


def _first_argmin(values) -> int:
    best = 0
    for i, v in enumerate(values):
        if v < values[best]:
            best = i
    return best


def _clip_targets(ps, qs, total, below: bool):
    """max(p, c q) (below) or min(p, c q) with c such that the sum is `total`; p/q ascending [m].

    Candidate j puts c in [ratio_{j-1}, ratio_j] with the tokens before j clipped; the first j
    whose sum reaches `total` fixes c. Exact values (Fractions, the prover's symbolic reals) are
    tested one candidate at a time up to the first hit, since each comparison of symbolic values is
    a branch of the prover's replay; float64 ones all at once (`_first_hit`).

    Args:
        ps, qs: p and q of the tokens [m], by p/q ascending (float64, or dtype=object); total: the sum.
    """
    m = len(ps)
    if m == 0:
        return ps
    ratios = ps / qs  # [m]
    p_cum, q_cum = np.cumsum(ps), np.cumsum(qs)  # [m]
    p_all, q_all = p_cum[-1], q_cum[-1]
    p_before, q_before = np.concatenate([[0], p_cum[:-1]]), np.concatenate([[0], q_cum[:-1]])  # [m]
    if below:
        j = _first_hit(lambda j: ratios[j] * q_before[j] + p_all - p_before[j] >= total, m, is_exact(ps))
    else:
        j = _first_hit(lambda j: p_before[j] + ratios[j] * (q_all - q_before[j]) >= total, m, is_exact(ps))
    clipped = np.arange(m) < j  # [m]: the tokens before j
    out = ps.copy()
    if j < m and below:
        c = (total - (p_all - p_before[j])) / q_before[j] if j else ratios[0]
        out[clipped] = c * qs[clipped]
    elif j < m:
        c = (total - p_before[j]) / (q_all - q_before[j])
        out[~clipped] = c * qs[~clipped]
    elif below:  # every token is lifted to c q
        out = (total / q_all) * qs
    # not below and no candidate: float64 round-off left p(top) a hair under its total: keep p
    return out


def _first_hit(holds, m: int, exact: bool) -> int:
    """The least j < m with holds(j), or m: exact values tested one at a time (no test after the
    first hit), float64 ones by one vectorised test of every j."""
    if exact:
        return next((j for j in range(m) if holds(j)), m)
    hits = np.flatnonzero(holds(np.arange(m)))
    return int(hits[0]) if len(hits) else m


#: float64 ratios y/q closer than this (relative) are one tie run: clipping sets y = c q, and c q / q
#: comes back within a few ulps of c.
_TIE_RTOL = 16 * np.finfo(np.float64).eps


def tie_runs(targets, qs, split: int, symbolic: bool) -> np.ndarray:
    """Boundaries [G + 1] of the runs of equal target ratio y/q along the p/q order (ratios ascend).

    A run's tokens need the same average weight, so they share one position law per unit of q: the
    segments then count runs, not tokens (clipping, and the repeated p/q of bf16 logits, tie most
    of a real vocabulary). The boundary at `split` (H) is always kept. Symbolic values stay one
    token per run: an equality test would be a branch of the prover's replay.

    Args:
        targets, qs: y and q of the ordered drafted tokens [n]; split: |H|; symbolic: as `is_symbolic`.
    """
    n = len(qs)
    if symbolic or n == 0:
        return np.arange(n + 1)
    if is_exact(qs):
        new = [i for i in range(1, n) if targets[i] * qs[i - 1] != targets[i - 1] * qs[i]]
        return np.array(sorted({0, n, *new, *([split] if 0 < split < n else [])}), dtype=np.int64)
    ratio = targets / qs  # [n]
    new = (np.flatnonzero(ratio[1:] > ratio[:-1] * (1 + _TIE_RTOL)) + 1).tolist()
    runs = np.array(sorted({0, n, *new, *([split] if 0 < split < n else [])}), dtype=np.int64)  # [G + 1]
    # a run whose ratios crept (each step a few ulps) is split back into tokens
    crept = np.flatnonzero(ratio[runs[1:] - 1] > ratio[runs[:-1]] * (1 + 4 * _TIE_RTOL))  # [runs]
    if len(crept):
        runs = np.union1d(runs, np.concatenate([np.arange(runs[g], runs[g + 1]) for g in crept]))
    return runs


def _run_sums(values, runs) -> np.ndarray:
    """Sum of `values` [n] over each run [G] (a one-token run keeps its value as it is)."""
    if values.dtype != object:
        return np.add.reduceat(values, runs[:-1]) if len(runs) > 1 else values[:0]
    return np.array([values[a] if b - a == 1 else values[a:b].sum() for a, b in zip(runs, runs[1:])],
                    dtype=object)


class _Frame:
    """Prefix sums along the runs, taken once for `Resolution._resolve_float`.

    positions [G + 1]: where each run boundary lies on [0, 1] (H's runs from 0, the rest from q(H));
    powers = positions ** K; t_cum [G + 1]: prefix sums of the runs' targets."""

    def __init__(self, run_q, run_targets, split_run: int, mass: float, num_paths: int):
        below = np.concatenate([[0.0], np.cumsum(run_q[:split_run])])  # [split_run + 1]
        above = mass + np.cumsum(run_q[split_run:])  # [G - split_run]
        self.positions = np.concatenate([below[:-1], [mass], above])  # [G + 1]
        self.powers = self.positions ** num_paths
        self.t_cum = np.concatenate([[0.0], np.cumsum(run_targets)])


class Resolution:
    """The realisation of `resolution_targets` as positions of the draft copies (step 2).

    Tokens of one tie run (`tie_runs`) are realised as one token of mass q(run); each of them gets
    the run's position law, scaled by its own q.

    Attributes:
        num_paths: K. order, split, targets: as `resolution_targets`.
        runs: [G + 1] boundaries in `order` of the tie runs; run_q: q of each run [G].
        run_of: int64 [V]: each drafted token's run (-1 off the drafted tokens).
        nodes: [(a, b, weight, parent)]: a blend of segment [a, b]; each token under it has density
            weight * q(token) there; parent: the enclosing blend's index, or -1.
        run_node: [G] the innermost blend containing the run, or -1.
        run_leaf: [G] (a, b, scale): the run's own segment, where its tokens together have density
            `scale` (None when a full blend, lambda = 1, ended its segment).
        law: y [V], the exact law of the selected token (computed from the positions, not copied
            from the targets; zero off the drafted tokens).
    """

    @property
    def num_drafts(self) -> int:
        """Deprecated alias of `num_paths` (K)."""
        deprecated("Resolution.num_drafts", "Resolution.num_paths")
        return self.num_paths

    @renamed_keywords(num_drafts="num_paths")
    def __init__(self, p, q, num_paths: int):
        self.num_paths = K = int(num_paths)
        self.order, self.split, self.targets = resolution_targets(p, q, K)
        one = Fraction(1) if is_exact(q) else 1.0  # segment ends stay exact for exact q
        qs = q[self.order]  # [n]
        self.runs = tie_runs(self.targets, qs, self.split, is_symbolic(p) or is_symbolic(q))  # [G + 1]
        self.run_q, run_targets = _run_sums(qs, self.runs), _run_sums(self.targets, self.runs)  # [G]
        G = len(self.runs) - 1
        self.run_of = np.full(len(q), -1, dtype=np.int64)
        self.run_of[self.order] = np.repeat(np.arange(G), np.diff(self.runs))
        self.nodes, self.run_node, self.run_leaf = [], [-1] * G, [None] * G
        split_run = int(np.searchsorted(self.runs, self.split))  # H ends at a run boundary
        mass = qs[:self.split].sum() + 0 * one  # q(H)
        if is_exact(q):
            self._resolve(0, split_run, 0 * one, mass, run_targets)
            self._resolve(split_run, G, mass, one, run_targets)
        else:
            frame = _Frame(self.run_q, run_targets, split_run, mass, K)
            self._resolve_float(0, split_run, 0.0, mass, frame)
            self._resolve_float(split_run, G, mass, 1.0, frame)
        self.law = self._law(q)

    def _resolve(self, lo, hi, a, b, run_targets):
        """Realise runs [lo, hi) on [a, b], exactly (iterative: a segment's children go on the stack)."""
        stack = [(lo, hi, a, b, 1 + 0 * a, run_targets[lo:hi], -1)]
        while stack:
            lo, hi, a, b, scale, targets, parent = stack.pop()
            if hi - lo == 1:
                self.run_node[lo], self.run_leaf[lo] = parent, (a, b, scale)
                continue
            if hi == lo:
                continue
            lam, splits, targets = self._blend(self.run_q[lo:hi], targets, a, b)
            parent, done = self._add_blend(lo, hi, a, b, scale, lam, parent)
            if done:
                continue
            cuts = [0, *(j + 1 for j in splits), hi - lo]
            q_cum = np.cumsum(self.run_q[lo:hi])
            for start, end in zip(cuts, cuts[1:]):
                left = a + q_cum[start - 1] if start else a
                right = b if end == hi - lo else a + q_cum[end - 1]
                # a copy, so that a waiting child does not hold its parent's whole array
                stack.append((lo + start, lo + end, left, right, scale * (1 - lam), targets[start:end].copy(), parent))

    def _resolve_float(self, lo, hi, a, b, frame):
        """`_resolve` in float64 with no prefix sum per segment (the blends go thousands deep).

        A segment's targets stay an affine map of the runs' first targets, A t0 - B q (each blend
        maps t to (t - lambda mean q) / (1 - lambda)), so its prefix sums come from `frame`'s, taken
        once; the same lambda, splits and segment ends as `_resolve`, to round-off."""
        K = self.num_paths
        stack = [(lo, hi, a, b, 1.0, 1.0, 0.0, -1)]  # ..., scale, A, B, parent
        while stack:
            lo, hi, a, b, scale, A, B, parent = stack.pop()
            if hi - lo <= 1 or not b > a:  # one run, none, or ~1e-17 of mass squeezed to a point
                for g in range(lo, hi):
                    self.run_node[g], self.run_leaf[g] = parent, (a, b if hi - lo == 1 else a, scale)
                continue
            mean = (b ** K - a ** K) / (b - a)
            q_in = frame.positions[lo + 1:hi] - frame.positions[lo]  # [m - 1] interior prefixes' q
            floor = frame.powers[lo + 1:hi] - a ** K  # their least value (stacked at the bottom)
            slack = A * (frame.t_cum[lo + 1:hi] - frame.t_cum[lo]) - B * q_in - floor  # [m - 1]
            room = mean * q_in - floor
            lam, tight = _float_lambda(slack, room)
            parent, done = self._add_blend(lo, hi, a, b, scale, lam, parent)
            if done:
                continue
            # also split where round-off left the rest a hair from tight (the rest's slack, in closed form)
            near = np.nonzero((slack - lam * room) / (1 - lam) <= 1e-13 * np.maximum(floor, 1e-300))[0]
            cuts = [0, *sorted({j + 1 for j in (*tight, *near.tolist())}), hi - lo]
            A, B = rest_map(A, B, lam, mean)
            for start, end in zip(cuts, cuts[1:]):
                left = min(frame.positions[lo + start], b) if start else a  # min: round-off past b
                right = b if end == hi - lo else min(frame.positions[lo + end], b)
                stack.append((lo + start, lo + end, left, right, scale * (1 - lam), A, B, parent))

    def _add_blend(self, lo, hi, a, b, scale, lam, parent):
        """Record a blend of fraction lam of runs [lo, hi) over [a, b] -> (its children's parent, done)."""
        if lam > 0:
            self.nodes.append((a, b, scale * lam / (b - a), parent))
            parent = len(self.nodes) - 1
        if lam >= 1:  # every run of the segment is spread uniformly over it: done
            self.run_node[lo:hi] = [parent] * (hi - lo)
        return parent, lam >= 1

    def _blend(self, qs, targets, a, b):
        """(lambda, tight interior breakpoints, the rest's targets) of one segment [a, b] (exact)."""
        K = self.num_paths
        mean = (b ** K - a ** K) / (b - a)  # the segment's average weight K v^(K-1)
        q_cum, t_cum = np.cumsum(qs)[:-1], np.cumsum(targets)[:-1]  # interior breakpoints [m - 1]
        floor = (a + q_cum) ** K - a ** K  # the least value of each prefix (stacked at the bottom)
        slack, room = t_cum - floor, mean * q_cum - floor  # room = uniform value - least value
        lam, tight = _exact_lambda(slack, room)
        if lam >= 1:
            return lam, [], targets
        return lam, sorted(set(tight)), (targets - lam * mean * qs) / (1 - lam)

    def _law(self, q):
        """y [V]: y_j = sum over j's blends of weight q_j (b^K - a^K) + its share of its run's leaf."""
        K = self.num_paths
        value = []  # [nodes]: sum over the blend and its ancestors of weight (b^K - a^K)
        for a, b, weight, parent in self.nodes:
            value.append(weight * (b ** K - a ** K) + (value[parent] if parent >= 0 else 0))
        law = q * 0  # [V]
        for g, node in enumerate(self.run_node):
            tokens = self.order[self.runs[g]:self.runs[g + 1]]  # [run size]
            own = value[node] * q[tokens] if node >= 0 else None
            if self.run_leaf[g] is not None:
                a, b, scale = self.run_leaf[g]
                leaf = scale * (b ** K - a ** K)
                leaf = leaf if len(tokens) == 1 else leaf * q[tokens] / self.run_q[g]
                own = leaf if own is None else own + leaf
            law[tokens] = own  # every run lies under a blend or has a leaf
        return law

    def pieces(self, token, q_token) -> list:
        """[(a, b, density)]: where the positions of `token`'s copies lie, density of mu_token; the
        blends innermost first, then the token's share of its run's leaf (innermost of all)."""
        g = int(self.run_of[token])
        out, node = [], self.run_node[g]
        while node >= 0:
            a, b, weight, parent = self.nodes[node]
            out.append((a, b, weight * q_token))
            node = parent
        if self.run_leaf[g] is not None:
            a, b, scale = self.run_leaf[g]
            out.append((a, b, scale if self.runs[g + 1] - self.runs[g] == 1 else scale * q_token / self.run_q[g]))
        return out

    def winner_probabilities(self, counts: dict, q) -> list:
        """P(the highest-positioned copy is a copy of t) for t in sorted(counts) (exact for exact q).

        Args:
            counts: {drafted token: number of the K i.i.d. drafts equal to it}; q: draft law [V].
        """
        if not is_exact(q):
            return _float_winner_probabilities(self, counts, q)
        tokens = sorted(counts)
        pieces = {t: self.pieces(t, q[t]) for t in tokens}
        # dict, not set: symbolic ends hash by identity, so a set's order (hence the comparisons
        # sorted() makes, which a symbolic replay must repeat) would change from run to run
        cuts = sorted(dict.fromkeys(x for t in tokens for a, b, _ in pieces[t] for x in (a, b)))
        mass = {t: 0 * q[t] for t in tokens}  # mu_t([0, u0])
        probs = {t: 0 * q[t] for t in tokens}
        for u0, u1 in zip(cuts, cuts[1:]):
            density = {t: sum((d for a, b, d in pieces[t] if a <= u0 and u1 <= b), 0 * q[t]) for t in tokens}
            width = u1 - u0
            for i in tokens:
                if density[i] != 0:
                    probs[i] = probs[i] + _winner_integral(i, tokens, counts, mass, density, q, width)
            for t in tokens:
                mass[t] = mass[t] + density[t] * width
        return [probs[t] for t in tokens]


def rest_map(A, B, lam, mean):
    """The rest's targets after a blend, as an affine map of the runs' first targets (step 2).

    A segment's targets are t = A t0 - B q. Blending a fraction lam of every run uniformly at the
    segment's average weight `mean` leaves (t - lam mean q) / (1 - lam) = A' t0 - B' q.

    Args:
        A, B: float scalars of the segment's map; lam: the blend's fraction, 0 <= lam < 1; mean:
            (b^K - a^K) / (b - a) on the segment [a, b].

    Returns:
        (A', B'), float scalars (derived here for the float64 recursion).
    """
    return A / (1 - lam), (B + lam * mean) / (1 - lam)


def _float_winner_probabilities(found: Resolution, counts: dict, q) -> list:
    """`Resolution.winner_probabilities` in float64, vectorised over the elementary intervals.

    A token's pieces are nested (each blend inside its parent, the leaf innermost), so the pieces
    covering an elementary interval are the outermost n of them, n counted from the ends: its
    density is a prefix sum of positive terms, with no cancellation."""
    tokens = sorted(counts)
    chains = []  # per token: its pieces outermost first, [pieces, 3] (a, b, density)
    for t in tokens:
        pieces = found.pieces(t, q[t])
        blends = len(pieces) - (found.run_leaf[found.run_of[t]] is not None)
        chains.append(np.array(pieces[:blends][::-1] + pieces[blends:], dtype=np.float64).reshape(-1, 3))
    cuts = np.unique(np.concatenate([c[:, :2].ravel() for c in chains]))  # [C]
    u0, width = cuts[:-1], np.diff(cuts)  # [C - 1]
    density = np.empty((len(tokens), len(u0)))  # [tokens, C - 1]
    for i, chain in enumerate(chains):
        covering = (np.searchsorted(np.sort(chain[:, 0]), u0, side="right")
                    - np.searchsorted(np.sort(chain[:, 1]), u0, side="right"))  # [C - 1]
        density[i] = np.concatenate([[0.0], np.cumsum(chain[:, 2])])[covering]
    mass = np.concatenate([np.zeros((len(tokens), 1)), np.cumsum(density * width, axis=1)[:, :-1]], axis=1)
    # the exact path's integral, on arrays: every interval at once
    mass, density = dict(zip(tokens, mass)), dict(zip(tokens, density))  # {token: [C - 1]}
    out = [float(_winner_integral(t, tokens, counts, mass, density, q, width).sum()) for t in tokens]
    total = sum(out)  # q(t) ~ 1e-17 squeezes a token's segment to a point; renormalise
    return [x / total for x in out] if total > 0 else [1.0 / len(out)] * len(out)


def _exact_lambda(slack, room):
    """(lambda, tight breakpoints): the largest blend keeping every prefix's slack >= 0, exactly.

    slack_j = targets' prefix sum - its least value, room_j = its uniform value - its least value;
    lambda = min_j slack_j / room_j. A breakpoint with no room (K = 1: a linear weight) is stacked,
    hence always tight."""
    lam, tight, forced = None, [], []
    for j in range(len(slack)):
        if not room[j] > 0:
            forced.append(j)
            continue
        ratio = slack[j] / room[j]
        if lam is None or ratio < lam:
            lam, tight = ratio, [j]
        elif ratio == lam:
            tight.append(j)
    if lam is None:
        return 0, forced
    return (lam if lam > 0 else 0 * lam), forced + tight


def _float_lambda(slack, room):
    """`_exact_lambda` in float64, vectorised (tight: the argmin and every stacked breakpoint)."""
    if room.min(initial=np.inf) > 1e-300:  # K >= 2: every breakpoint has room
        j = int(np.argmin(slack / room))
        return min(max(float(slack[j] / room[j]), 0.0), 1.0), [j]
    open_ = room > 1e-300
    forced = np.nonzero(~open_)[0].tolist()
    if not open_.any():
        return 0.0, forced
    ratio = np.where(open_, slack / np.where(open_, room, 1.0), np.inf)
    j = int(np.argmin(ratio))
    return min(max(float(ratio[j]), 0.0), 1.0), forced + [j]

def _winner_integral(i, tokens, counts, mass, density, q, width):
    """int_0^width c_i f_i F_i^(c_i - 1) prod_{j != i} F_j^(c_j), F_j = (mass_j + density_j s) / q_j.

    mass, density: {token: value on one interval}, or {token: float64 [C - 1]} with width [C - 1]
    (every elementary interval at once; the result is then [C - 1])."""
    poly = [counts[i] * density[i] / q[i]]  # coefficients in s, lowest degree first
    for t in tokens:
        power = counts[t] - 1 if t == i else counts[t]
        for _ in range(power):
            lo, hi = mass[t] / q[t], density[t] / q[t]
            poly = [(poly[k] * lo if k < len(poly) else 0) + (poly[k - 1] * hi if k else 0)
                    for k in range(len(poly) + 1)]
    return sum(c * width ** (k + 1) / (k + 1) for k, c in enumerate(poly))


_memo_resolution = by_value(lambda p, q, num_paths: Resolution(p, q, num_paths))


@renamed_keywords(num_drafts="num_paths")
def resolution(p, q, num_paths: int) -> Resolution:
    """`Resolution(p, q, K)`, memoised by value for vocabularies up to `MEMO_VOCAB` (not for
    symbolic p, q); treat it as read-only. One float64 operand makes the resolution float64."""
    if len(p) > MEMO_VOCAB or is_symbolic(p) or is_symbolic(q):
        return Resolution(p, q, num_paths)
    if not (is_exact(p) and is_exact(q)):
        p, q = (v if v.dtype == np.float64 else np.array([float(x) for x in v], dtype=np.float64) for v in (p, q))
    return _memo_resolution(p, q, int(num_paths))


def global_resolution_step(p, q, counts: dict, rand) -> int:
    """One node: select a drafted token by its copies' positions, then single-draft SD against y.

    Args:
        p, q: target and draft distributions [V]; counts: {drafted token: paths through it} (the K
            i.i.d. drafts at this node); rand: `Randomness`.
    """
    found = resolution(p, q, sum(counts.values()))
    drafted = sorted(counts)
    probs = np.array(found.winner_probabilities(counts, q), dtype=object if is_exact(q) else np.float64)
    y = drafted[rand.categorical(probs)]
    if rand.bernoulli(accept_probability(p[y], found.law[y])):
        return y
    return rand.categorical(residual(p, found.law))


global_resolution_verify = top_down(global_resolution_step, counts=True)
global_resolution_verify.__doc__ = ("Global Resolution's alpha*-optimal selection + single-draft SD, top-down on the "
                                    "tree of K i.i.d. paths (reads each node's drafted tokens and their counts).")
