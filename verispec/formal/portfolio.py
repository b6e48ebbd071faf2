"""A solver portfolio: cvc5 races z3 on the queries z3 does not answer at once.

Nonlinear real arithmetic solvers differ a lot from query to query: z3's nlsat and cvc5's
cylindrical algebraic coverings each answer some queries in milliseconds that the other does not
answer in minutes. `prove` asks z3 first (`verispec.formal.splitting`: the whole query of one
output, for `SPLIT_AFTER` seconds). When z3 has no answer, the same query, written in SMT-LIB
(logic QF_NRA, set explicitly), goes to cvc5 in a child process (`Rival`) while z3 goes on in this
process (splitting the query into cells). The first definitive answer (sat or unsat) wins; the
loser is stopped: the cvc5 process is killed, or z3 is interrupted (`z3.Context.interrupt`) and the
splitting ends. Soundness is each solver's: "unsat" from either proves the output equal; "sat"
gives a pair that the exact engine must confirm, as always.

Without cvc5 installed (``pip install verispec[prove]``) the portfolio is z3 alone, and results say
so (`portfolio_note`).

z3: de Moura & Bjorner (TACAS 2008); cvc5: Barbosa et al. (TACAS 2022).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from fractions import Fraction

import z3

from ._internal import cvc5_worker
from ._internal.values import ValuesModel, rational

__all__ = ["SOLVERS", "check_solvers", "cvc5_version", "portfolio_note", "smtlib", "solve_cvc5", "solve_z3",
           "Rival"]

#: The solvers a portfolio may hold, in the order they are asked.
SOLVERS = ("z3", "cvc5")


def cvc5_version() -> str | None:
    """cvc5's version, or None when it is not installed."""
    try:
        import cvc5
    except ImportError:
        return None
    return getattr(cvc5, "__version__", "unknown version")


def check_solvers(solvers) -> tuple:
    """The solvers to use: None = z3 and cvc5 (z3 alone without cvc5 installed); else a subset of
    `SOLVERS` holding "z3" (the splitting into cells is z3's). ValueError naming `solvers`."""
    if solvers is None:
        return SOLVERS if cvc5_version() is not None else ("z3",)
    if isinstance(solvers, str):
        solvers = tuple(s.strip() for s in solvers.split(",") if s.strip())
    solvers = tuple(dict.fromkeys(solvers))
    if not solvers or any(s not in SOLVERS for s in solvers) or "z3" not in solvers:
        raise ValueError(f"solvers: expected 'z3' or 'z3,cvc5', got {solvers!r}")
    if "cvc5" in solvers and cvc5_version() is None:
        raise ValueError("solvers: cvc5 is not installed (pip install cvc5, or verispec[prove])")
    return solvers


def portfolio_note(solvers) -> str:
    """The solvers of a proof, in words (reported in every result)."""
    z3_part = f"z3 {z3.get_version_string()} (nonlinear real arithmetic)"
    if "cvc5" in solvers:
        return f"portfolio: {z3_part} raced by cvc5 {cvc5_version()} (QF_NRA) on the queries z3 does not answer at once"
    missing = "" if cvc5_version() is not None else " (cvc5 not installed: pip install verispec[prove] to race it)"
    return f"{z3_part} alone{missing}"


def smtlib(constraints) -> str:
    """SMT-LIB declarations and assertions of `constraints` (z3 terms), without (check-sat).
    Simplified first: z3 prints a one-term sum as ``(+ x)``, which strict SMT-LIB parsers refuse."""
    solver = z3.Solver()
    solver.add(*(z3.simplify(c) for c in constraints))
    return solver.sexpr()


def solve_cvc5(text: str, seconds: float) -> tuple:
    """(status, ValuesModel or None, reason) of cvc5 on the SMT-LIB query `text`, in this process."""
    answer = cvc5_worker.solve(text, seconds)
    return answer["status"], _model(answer), answer["reason"]


def solve_z3(text: str, seconds: float) -> tuple:
    """(status, ValuesModel or None, reason) of z3 on the SMT-LIB query `text` (what cvc5 is given)."""
    solver = z3.Solver()
    solver.set("timeout", max(1, int(1000 * seconds)))
    solver.add(z3.parse_smt2_string(text))
    result = solver.check()
    if result != z3.sat:
        return str(result), None, solver.reason_unknown() if result == z3.unknown else ""
    model = solver.model()
    return "sat", ValuesModel({str(d.name()): rational(model[d]) for d in model.decls() if d.arity() == 0}), ""


def _model(answer):
    values = answer.get("values")
    return ValuesModel({name: Fraction(v) for name, v in values.items()}) if values is not None else None


class Rival:
    """cvc5 on one query in a child process, racing z3 in this one.

    When cvc5 answers sat or unsat first, `answer` holds (status, ValuesModel or None, reason) and
    z3 is interrupted (its check in progress returns "unknown"; the caller stops splitting when
    `answered` is true). `stop` kills the child if it is still running.
    """

    def __init__(self, constraints, seconds: float):
        self.answer = None
        self.stopped = False
        self.lock = threading.Lock()  # no interrupt reaches z3 once `stop` has returned
        job = json.dumps({"text": smtlib(constraints), "seconds": max(0.001, seconds)})
        # Run as a script: the child imports cvc5 alone, not verispec (and not the caller's __main__).
        self.process = subprocess.Popen([sys.executable, os.path.abspath(cvc5_worker.__file__)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
        self.thread = threading.Thread(target=self._wait, args=(job,), daemon=True)
        self.thread.start()

    @property
    def answered(self) -> bool:
        """True once cvc5 has answered sat or unsat."""
        return self.answer is not None

    def _wait(self, job: str) -> None:
        try:
            out, _ = self.process.communicate(job)
            answer = json.loads(out) if out else None
        except (OSError, ValueError):  # killed by `stop`, or no answer
            return
        with self.lock:
            if answer and answer["status"] in ("sat", "unsat") and not self.stopped:
                self.answer = (answer["status"], _model(answer), "")
                z3.main_ctx().interrupt()  # z3 lost the race: end its check in progress

    def stop(self) -> None:
        """Kill the child if it still runs (z3 won, or the time is up)."""
        with self.lock:
            self.stopped = True
            if self.answer is not None:
                # z3's cancel flag outlives the check it interrupted (a later push or simplify would
                # be canceled too); a check clears it.
                z3.Solver().check()
        if self.process.poll() is None:
            self.process.kill()
        self.thread.join(timeout=5)
