"""Exact laws of the draft-verify loop, by enumeration of every random choice.

"Lossless" means the joint law of the first N emitted tokens of the whole loop equals the
target's (docs/architecture.md, core idea 2). `output_distribution` computes that law exactly: one
iteration's law of emitted tokens is enumerated at each reachable prefix (`enumerate_law`), and the
loop is a dynamic program over emitted prefixes. Probabilities are Fractions when the models are
rational (then a lossless method gives TV == 0 exactly), float64 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .contract import ROUNDING_PROBABILITY, Draw, RuleContractError
from .methods import Method
from .models import LanguageModel, check_positive_int, check_pair, check_prefix
from .randomness import enumerate_law


@dataclass
class OutputEnumeration:
    """The output law with the cost of computing it.

    Attributes:
        law: {N-token tuple: probability}.
        num_branches: leaves of the choice trees explored, over all iterations.
        num_iterations: distinct iteration laws enumerated (prefixes or model states).
    """

    law: dict
    num_branches: int
    num_iterations: int


def _check_call(target, draft, method, context):
    check_pair(target, draft)
    if not isinstance(method, Method):
        raise TypeError(f"method: expected a Method, got {type(method).__name__}")
    return check_prefix(context, target.vocab_size, "context")


def _contract_error(method, prefix):
    """The enumerator's on_error: any exception of the rule becomes a RuleContractError naming the
    prefix, the branch's probability and its draws."""

    def on_error(err, probability, draws):
        problem = err.problem if isinstance(err, RuleContractError) else \
            f"the rule raised {type(err).__name__}: {err}"
        return RuleContractError(problem, method=repr(method), prefix=prefix, probability=probability,
                                 draws=[Draw(*d) for d in draws])

    return on_error


class _ProposalReads:
    """Collects, over every branch of one iteration, what was drafted at each node, and the
    proposals the verifier read. A node whose q has >= 2 tokens of positive probability was drawn
    from q only if its children differ between branches (all branches where it was expanded, not
    only those where q was read); the same children on every branch mean a deterministic node
    (top-k, greedy) given a soft q, which breaks the Draft contract."""

    def __init__(self):
        self.drafted: dict = {}  # node -> set of what expand drafted there
        self.read: dict = {}  # node -> proposal a verifier read

    def __call__(self, draft) -> None:
        drafted, read = draft.expansions()
        for node, children in drafted.items():
            self.drafted.setdefault(node, set()).add(children)
        self.read.update(read)

    def check(self, method, prefix) -> None:
        for node, q in sorted(self.read.items()):
            drafted = self.drafted[node]
            # a float64 mass at rounding level (q = [1 - 1e-24, 1e-24]) is never drawn: not support
            floor = 0 if q.dtype == object else ROUNDING_PROBABILITY
            support = sum(1 for x in q if x > floor)
            if len(drafted) == 1 and support >= 2:
                children = next(iter(drafted))
                raise RuleContractError(
                    f"draft: node {node}'s children {children} are the same on every branch (a deterministic "
                    f"choice, e.g. top-k or greedy), but its proposal q = {_short(q)} gives {support} tokens "
                    "positive probability and the verifier read it: q must be the law the children were drawn "
                    "from. For a deterministic tree pass proposal=None (no proposal) and verify by sampling "
                    "the target and following the tree, or a one-hot point mass for a single child",
                    method=repr(method), prefix=prefix)


def _short(q) -> str:
    return "[" + ", ".join(str(x) if isinstance(x, Fraction) else f"{float(x):.4g}" for x in list(q)[:8]) + \
        (", ...]" if len(q) > 8 else "]")


def _iteration(target, draft, method, prefix, max_branches=None):
    reads = _ProposalReads()
    result = enumerate_law(lambda rand: method.step(target, draft, prefix, rand, observe=reads), max_branches,
                           on_error=_contract_error(method, prefix))
    reads.check(method, prefix)
    return result


def iteration_distribution(target: LanguageModel, draft: LanguageModel | None, method: Method,
                           context=()) -> dict[tuple[int, ...], object]:
    """The exact law of the tokens emitted by ONE draft-verify iteration from `context`.

    Returns:
        {emitted tuple (tau accepted + 1): probability}.

    Raises:
        TypeError / ValueError: non-models, vocab mismatch, non-Method, bad context.
    """
    context = _check_call(target, draft, method, context)
    return _iteration(target, draft, method, context).law


def iteration_enumeration(target, draft, method, context=(), max_branches: int | None = None):
    """`iteration_distribution` with its cost: an `Enumeration` (.law, .num_branches).

    Raises:
        RuntimeError: more than `max_branches` leaves.
    """
    context = _check_call(target, draft, method, context)
    return _iteration(target, draft, method, context, max_branches)


def output_enumeration(target, draft, method, context=(), num_tokens: int = 1,
                       max_branches: int | None = None) -> OutputEnumeration:
    """`output_distribution` together with its cost (branches, iterations); see there."""
    context = _check_call(target, draft, method, context)
    N = check_positive_int(num_tokens, "num_tokens")
    memo: dict = {}
    branches = 0

    def iteration_law(emitted):
        nonlocal branches
        prefix = context + emitted
        key = (target.state_key(prefix), None if draft is None else draft.state_key(prefix)) \
            if method.model_state_only else prefix
        if key not in memo:
            result = _iteration(target, draft, method, prefix, max_branches)
            memo[key] = result.law
            branches += result.num_branches
        return memo[key]

    law: dict = {}
    frontier: dict = {(): 1}  # emitted prefix shorter than N -> probability
    while frontier:
        next_frontier: dict = {}
        for emitted, weight in frontier.items():
            try:
                iteration = iteration_law(emitted)
            except RuleContractError as err:
                raise err.with_context(prefix_probability=weight) from err.__cause__
            for tokens, prob in iteration.items():
                out = emitted + tokens
                bucket, key = (law, out[:N]) if len(out) >= N else (next_frontier, out)
                bucket[key] = bucket.get(key, 0) + weight * prob
        frontier = next_frontier
    return OutputEnumeration(law=law, num_branches=branches, num_iterations=len(memo))


def output_distribution(target: LanguageModel, draft: LanguageModel | None, method: Method,
                        context=(), num_tokens: int = 1) -> dict[tuple[int, ...], object]:
    """The exact joint law of the first N tokens emitted by the whole draft-verify loop.

    Args:
        target, draft: LanguageModels over one vocabulary (draft may be None for prompt lookup).
        method: a `Method`. context: tuple of token ids. num_tokens: N >= 1.

    Returns:
        {N-token tuple: probability} (Fractions for rational models).

    Raises:
        TypeError / ValueError: non-models, vocab mismatch, non-Method, bad context, N < 1.
        RuleContractError: the rule raised or returned a malformed result on some branch (the
            error names the prefix, the branch's probability and the draws that led there).
    """
    return output_enumeration(target, draft, method, context, num_tokens).law


def target_distribution(target: LanguageModel, context=(), num_tokens: int = 1) -> dict:
    """The target's own joint law of the next N tokens: {N-token tuple: probability}."""
    check_pair(target, None)
    context = check_prefix(context, target.vocab_size, "context")
    N = check_positive_int(num_tokens, "num_tokens")
    law: dict = {(): 1}
    for _ in range(N):
        law = {seq + (t,): prob * p_t
               for seq, prob in law.items()
               for t, p_t in enumerate(target.probs(context + seq)) if p_t > 0}
    return law


def total_variation(law_a: dict, law_b: dict):
    """TV(a, b) = 1/2 sum_x |a(x) - b(x)| over the union of outcomes (exact for Fraction laws).

    Raises:
        TypeError: an argument that is not a dict.
    """
    for name, law in (("law_a", law_a), ("law_b", law_b)):
        if not isinstance(law, dict):
            raise TypeError(f"{name}: expected a dict {{outcome: probability}}, got {type(law).__name__}")
    keys = set(law_a) | set(law_b)
    total = sum(abs(law_a.get(k, 0) - law_b.get(k, 0)) for k in keys)
    return total / 2 if isinstance(total, (Fraction, int)) else 0.5 * total


def accepted_length_distribution(target, draft, method, context=()) -> dict[int, object]:
    """The law of tau, the number of accepted draft tokens in one iteration: {tau: probability}."""
    law: dict = {}
    for tokens, prob in iteration_distribution(target, draft, method, context).items():
        law[len(tokens) - 1] = law.get(len(tokens) - 1, 0) + prob
    return dict(sorted(law.items()))


def expected_accepted_length(target, draft, method, context=()):
    """E[tau] for one iteration from `context`."""
    return sum(tau * prob for tau, prob in accepted_length_distribution(target, draft, method, context).items())


def block_efficiency(target, draft, method, context=()):
    """E[tokens emitted per target call] = E[tau] + 1 for one iteration from `context`."""
    return expected_accepted_length(target, draft, method, context) + 1


def acceptance_rates(target, draft, method, context=()) -> list:
    """Per-position acceptance rate: [P(tau >= i | tau >= i - 1) for i = 1..max tau + 1].

    The last entry is 0 (no iteration accepts more than its longest path). A rate whose condition
    has probability 0 is reported as 0.
    """
    law = accepted_length_distribution(target, draft, method, context)
    top = max(law)
    survival = [sum(p for tau, p in law.items() if tau >= i) for i in range(top + 2)]
    def ratio(a, b):  # int / int would be a float: keep exact laws exact
        return Fraction(a) / b if isinstance(a, (int, Fraction)) and isinstance(b, (int, Fraction)) else a / b

    return [ratio(survival[i], survival[i - 1]) if survival[i - 1] > 0 else 0 for i in range(1, top + 2)]
