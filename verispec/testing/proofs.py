"""`assert_proved`: losslessness for EVERY target/draft pair at a fixed small size (z3), in pytest.

    from verispec.testing import assert_proved
    assert_proved(my_method, vocab_size=3, draft_length=1)

Where `assert_lossless` computes the exact law on a sweep of N instances (a check on those
instances), `assert_proved` runs the rule's own code symbolically and asks the SMT solver z3 for any
target/draft pair at (V, L, K) whose law differs (`verispec.formal.prove`).
"""

from __future__ import annotations

from ..formal.prove import ProofResult, prove

__all__ = ["assert_proved", "ProofError"]


class ProofError(AssertionError):
    """Raised by `assert_proved`: a confirmed counterexample, or no proof within the time limit.

    Attributes:
        result: the `verispec.formal.ProofResult` (verdict, counterexample with its reproducing code,
            the size of the branch tree and each query's time).
    """

    def __init__(self, message, result: ProofResult):
        super().__init__(message)
        self.result = result


def assert_proved(method, *, vocab_size: int = 2, draft_length: int = 1, num_paths: int = 1,
                  timeout: float = 60.0, target_temperature=1, draft_temperature=1, context=(),
                  workers=None) -> ProofResult:
    """Assert that `method` is lossless for every target/draft pair at (V, L, K).

    Args:
        method: a `Method`, a built-in method name or ``"pkg.module:attr"``.
        vocab_size, draft_length, num_paths: the size (V >= 2, L >= 1, K >= 1).
        timeout: seconds for the whole proof; running out fails the assertion ("unknown" is not
            "proved").
        target_temperature, draft_temperature: 1 (every distribution) or 0 (every greedy target /
            draft, the argmax of a symbolic base).
        context: the prefix the iteration starts from (default empty; for methods that read the
            prefix themselves, e.g. prompt lookup).
        workers: processes deciding the queries (`verispec.formal.prove`; default 2 on a machine with
            2 or more cores, 1 = this process only).

    Returns:
        the `ProofResult` (verdict "proved").

    Raises:
        ProofError (AssertionError): a counterexample (its message shows the pair as code) or an
            "unknown" verdict with its reason.
        TypeError / ValueError: bad arguments, naming them.
    """
    result = prove(method, vocab_size, draft_length, num_paths, timeout=timeout,
                   target_temperature=target_temperature, draft_temperature=draft_temperature, context=context,
                   workers=workers)
    if result.verdict == "counterexample":
        raise ProofError(f"{result.method} is NOT lossless:\n{result.summary()}", result)
    if result.verdict != "proved":
        raise ProofError(f"{result.method}: no proof (verdict unknown):\n{result.summary()}", result)
    return result
