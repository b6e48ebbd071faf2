"""Verification rules: `verify(target, draft_model, context, draft, rand) -> emitted tokens`.

Each module holds one family and reads like its paper: token.py (Leviathan et al.), block.py (BV),
gbv.py (GBV), multidraft.py (nss, rrs, rrsw, spectr), traversal.py,
sample_and_follow.py (OPT-Tree's sample-and-follow), lossy.py (typical acceptance, static ensemble,
fuzzy acceptance: lossy by design).
"""

from .block import block_rule, block_verify
from .gbv import gbv_verify, skewed_proposal
from .lossy import FuzzyAcceptance, StaticEnsemble, TypicalAcceptance
from .multidraft import (nss_step, nss_verify, rrs_step, rrs_verify, rrsw_step, rrsw_verify,
                         spectr_rho, spectr_step, spectr_verify, top_down)
from .sample_and_follow import sample_and_follow
from .token import token_verify
from .traversal import traversal_verify

__all__ = [
    "block_rule", "block_verify", "gbv_verify", "skewed_proposal", "nss_step", "nss_verify",
    "rrs_step", "rrs_verify", "rrsw_step", "rrsw_verify", "spectr_rho", "spectr_step",
    "spectr_verify", "top_down", "token_verify", "traversal_verify", "sample_and_follow",
    "TypicalAcceptance", "StaticEnsemble", "FuzzyAcceptance",
]
