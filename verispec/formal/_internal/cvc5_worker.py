"""cvc5 on one SMT-LIB query, in a child process of the solver portfolio (`verispec.formal.portfolio`).

Run as a script (``python cvc5_worker.py``) so that the child imports cvc5 alone, not verispec: it
reads {"text": SMT-LIB declarations and assertions, "seconds": limit} as JSON on stdin and writes
{"status": "sat" | "unsat" | "unknown", "values": {name: "a/b"} or null, "reason": str} on stdout.
The logic is set to QF_NRA (quantifier-free nonlinear real arithmetic) explicitly: every query of
`prove` is a polynomial/rational (in)equality over reals with If-then-else terms.

cvc5: Barbosa et al., "cvc5: A Versatile and Industrial-Strength SMT Solver" (TACAS 2022).
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction


def solve(text: str, seconds: float) -> dict:
    """cvc5's answer to the query `text` within `seconds` (see the module docstring)."""
    import cvc5

    tm = cvc5.TermManager()
    solver = cvc5.Solver(tm)
    solver.setOption("produce-models", "true")
    solver.setOption("tlimit-per", str(max(1, int(1000 * seconds))))
    solver.setLogic("QF_NRA")
    parser = cvc5.InputParser(solver)
    parser.setIncrementalStringInput(cvc5.InputLanguage.SMT_LIB_2_6, "query")
    parser.appendIncrementalStringInput(text)
    symbols = parser.getSymbolManager()
    while not (command := parser.nextCommand()).isNull():
        command.invoke(solver, symbols)
    result = solver.checkSat()
    if result.isUnsat():
        return {"status": "unsat", "values": None, "reason": ""}
    if not result.isSat():
        return {"status": "unknown", "values": None, "reason": f"cvc5: {result.getUnknownExplanation()}"}
    values = {str(term.getSymbol()): str(_rational(solver.getValue(term))) for term in symbols.getDeclaredTerms()}
    return {"status": "sat", "values": values, "reason": ""}


def _rational(value) -> Fraction:
    """A cvc5 model value as a Fraction (a real algebraic number: the midpoint of its isolating
    interval; the pair is confirmed by the exact engine anyway)."""
    if value.isRealValue():
        return Fraction(value.getRealValue())
    if value.isRealAlgebraicNumber():
        low = value.getRealAlgebraicNumberLowerBound().getRealValue()
        high = value.getRealAlgebraicNumberUpperBound().getRealValue()
        return (Fraction(low) + Fraction(high)) / 2
    raise ValueError(f"cvc5's value {value} is not a real number")


def main() -> int:
    """Read one query from stdin, write cvc5's answer to stdout."""
    job = json.loads(sys.stdin.read())
    try:
        answer = solve(job["text"], job["seconds"])
    except Exception as err:  # noqa: BLE001 - any failure is an "unknown" for the race
        answer = {"status": "unknown", "values": None, "reason": f"cvc5 failed: {type(err).__name__}: {err}"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
