"""`verispec check`: prove every built-in method lossless on seeded random toy instances.

For each method and instance it enumerates the exact joint law of the first N tokens of the whole
draft-verify loop, compares it with the target's law (total variation) and computes the block
efficiency E[tau] + 1 of one iteration. A method whose TV exceeds the tolerance fails the run.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np


from .reference import exact, methods, models

#: TV above this fails a float64 instance (docs/testing.md: exact enumeration, TV <= 1e-12).
FLOAT_TOLERANCE = 1e-12

#: (target temperature, draft temperature) cycled over instances: sampling, greedy target, mixed.
TEMPERATURES = ((1.0, 1.0), (0.0, 1.0), (0.5, 2.0), (1.0, 0.0))


@dataclass
class Instance:
    """One seeded toy target/draft pair (a random-tree model per prefix)."""

    index: int
    vocab_size: int
    target_seed: int
    draft_seed: int
    target_temperature: float
    draft_temperature: float
    rational: bool
    context: tuple = ()

    def models(self):
        def build(seed, temperature):
            base = models.random_tree(self.vocab_size, seed, concentration=1.0, rational=self.rational)
            return base if temperature == 1 else models.temperature(base, temperature)

        return build(self.target_seed, self.target_temperature), build(self.draft_seed, self.draft_temperature)


def make_instances(vocab_size: int, count: int, seed: int, rational: bool = False,
                   context_length: int = 3) -> list[Instance]:
    """`count` seeded instances; temperatures cycle through TEMPERATURES (rational: T in {0, 1}).

    Each instance has a seeded random context of `context_length` tokens, so context handling and
    prompt lookup are exercised.
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        context = tuple(int(t) for t in rng.integers(0, vocab_size, size=context_length))
        t_target, t_draft = TEMPERATURES[i % len(TEMPERATURES)]
        if rational:
            t_target, t_draft = (0.0 if t_target == 0 else 1.0), (0.0 if t_draft == 0 else 1.0)
        out.append(Instance(i, vocab_size, 2 * (seed * 1000 + i), 2 * (seed * 1000 + i) + 1,
                            t_target, t_draft, rational, context))
    return out


@dataclass
class MethodResult:
    """Aggregate over instances for one method."""

    method: str
    params: dict
    instances: int = 0
    max_tv: float = 0.0
    mean_block_efficiency: float = 0.0
    branches: int = 0
    seconds: float = 0.0
    exact_zero: bool = True
    passed: bool = True
    failures: list = field(default_factory=list)


def check_method(name: str, instances: list[Instance], draft_length: int, num_paths: int,
                 num_tokens: int) -> MethodResult:
    """Enumerate `name` on every instance; collect max TV and mean block efficiency."""
    method = methods.get_compatible(name, draft_length=draft_length, num_paths=num_paths)
    result = MethodResult(method=name, params=dict(method.params))
    efficiencies = []
    start = time.perf_counter()
    for inst in instances:
        target, draft = inst.models()
        enum = exact.output_enumeration(target, draft, method, inst.context, num_tokens)
        tv = exact.total_variation(enum.law, exact.target_distribution(target, inst.context, num_tokens))
        efficiencies.append(float(exact.block_efficiency(target, draft, method, inst.context)))
        result.branches += enum.num_branches
        result.max_tv = max(result.max_tv, float(tv))
        # Rational instances must be lossless exactly (spectr's rho is a float bisection).
        exact_instance = inst.rational and name != "spectr"
        result.exact_zero &= (tv == 0) if exact_instance else True
        if (exact_instance and tv != 0) or float(tv) > FLOAT_TOLERANCE:
            result.passed = False
            result.failures.append({"instance": asdict(inst), "tv": float(tv)})
    result.instances = len(instances)
    result.mean_block_efficiency = sum(efficiencies) / len(efficiencies)
    result.seconds = time.perf_counter() - start
    return result


def run_check(method_names, vocab_size, draft_length, num_paths, num_instances, seed, num_tokens,
              rational, progress=None) -> list[MethodResult]:
    """Check each method on the same instances; `progress(name)` is called after each method."""
    instances = make_instances(vocab_size, num_instances, seed, rational)
    results = []
    for name in method_names:
        results.append(check_method(name, instances, draft_length, num_paths, num_tokens))
        if progress is not None:
            progress(name)
    return results
