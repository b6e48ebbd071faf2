"""A reference `Sampler` that replays a fixed list of uniforms (shared-uniform tests of the torch
rules against the reference)."""

from verispec.reference.randomness import Sampler


class _ListGenerator:
    """Stands in for a numpy Generator: `random()` replays a fixed list."""

    def __init__(self, values):
        self.values = list(values)
        self.used = 0

    def random(self):
        value = self.values[self.used]
        self.used += 1
        return value


def replay_sampler(values) -> Sampler:
    """A reference `Sampler` (same bernoulli / categorical conventions) reading `values`."""
    sampler = Sampler(0)
    sampler.generator = _ListGenerator(values)
    return sampler
