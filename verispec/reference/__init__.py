"""Reference implementations in numpy: every rule written once, sampled and enumerated exactly.

    from verispec.reference import models, methods, exact, drafters
    from verispec.reference.randomness import Sampler
"""

from . import drafters, exact, methods, models, probability, randomness
from .drafters import Draft
from .methods import Method
from .models import LanguageModel
from .randomness import Randomness, Sampler

__all__ = ["drafters", "exact", "methods", "models", "probability", "randomness", "Draft", "Method",
           "LanguageModel", "Randomness", "Sampler"]
