"""Parallel queries: a helper process decides some of the outputs while this one decides the others.

The queries of different outputs are independent, so they can run at once. z3 objects cannot be
sent between processes, and z3 is not safe to fork (its timeout timers run in threads), so the
helper is a fresh process ("spawn") that rebuilds the symbolic models and explores the same program
itself (in parallel with this process's own exploration), then takes outputs from a counter shared
with this process until none is left. It sends back, per output, the verdict of its query and, for a
satisfiable one, the solver's pair as exact rationals; this process confirms any counterexample
with the exact engine as usual.

Soundness does not depend on the helper: an output it has not answered by the deadline (a crash,
a slow start, a timeout) counts as "unknown", never as "unsat", so the verdict can only be
"proved" when every output was shown equal by one of the two processes.
"""

from __future__ import annotations

import multiprocessing
import sys
import types
import queue as queue_module
import time
from fractions import Fraction

import z3

from ._internal.values import ValuesModel, model_values
from ._internal.problem import decide_output, explore_job
from .symbolic import building

__all__ = ["Helper", "ValuesModel", "helper_job", "output_group"]

#: Seconds past the deadline this process waits for the helper's last answers.
GRACE_S = 1.0


def helper_job(spec, V, L, K, temperatures, context, solvers=("z3",)):
    """What a helper needs to rebuild the proof, or None when `spec` is not a name the helper can
    resolve itself (a built-in name or "pkg.module:attr"; a `Method` object may hold closures or
    live in a script the helper cannot import)."""
    if not isinstance(spec, str):
        return None
    return {"spec": spec, "V": V, "L": L, "K": K, "temperatures": temperatures, "context": context,
            "solvers": solvers}


class Helper:
    """A helper process deciding outputs claimed from a shared counter (`claim`)."""

    def __init__(self, job, num_outputs: int, deadline: float):
        context = multiprocessing.get_context("spawn")
        self.num_outputs = num_outputs
        self.counter = context.Value("i", 0)
        self.answers = context.Queue()
        self.deadline = deadline
        self.process = context.Process(target=_main, daemon=True,
                                       args=(job, self.counter, self.answers, deadline - time.monotonic()))
        with _no_main_module():
            self.process.start()

    def claim(self) -> int:
        """The next group of outputs nobody has taken (`output_group`)."""
        with self.counter.get_lock():
            index = self.counter.value
            self.counter.value += 1
        return index

    def collect(self, indices) -> dict:
        """{index: (status, values or None, solver calls, reason, seconds)} for the outputs the helper
        took; waits until the deadline (+ GRACE_S); an output not answered by then is left out."""
        wanted, answers = set(indices), {}
        while wanted - answers.keys():
            left = self.deadline + GRACE_S - time.monotonic()
            if left <= 0:
                break
            try:
                index, answer = self.answers.get(timeout=left)
            except queue_module.Empty:
                break
            answers[index] = answer
        return answers

    def close(self) -> None:
        """Stop the helper (it may still be exploring or deciding an output nobody waits for)."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.answers.close()


def output_group(group: int, vocab_size: int, num_outputs: int) -> range:
    """The output indices of claim number `group`: the V outputs that share all but their last
    token (in `itertools.product` order). Their queries split on the same comparisons, so one
    process deciding them all reuses its region checks (`Tree.regions`)."""
    return range(group * vocab_size, min((group + 1) * vocab_size, num_outputs))


class _no_main_module:
    """Hide the caller's __main__ while the helper starts: "spawn" would otherwise run the user's
    script again in the helper (a script without an ``if __name__ == "__main__"`` guard would call
    `prove` there too). The helper needs only verispec's own modules."""

    def __enter__(self):
        self.main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")

    def __exit__(self, *exc):
        if self.main is not None:
            sys.modules["__main__"] = self.main
        return False


def _main(job, counter, answers, seconds_left):
    """The helper: explore, then decide claimed outputs until none is left (or the deadline)."""
    with building():  # the z3 expressions built in this process, dropped at its end
        _explore_and_decide(job, counter, answers, time.monotonic() + seconds_left)


def _explore_and_decide(job, counter, answers, deadline):
    """The helper's work (see `_main`)."""
    try:
        tree, reference, variables, outputs = explore_job(job, deadline)
    except Exception:  # noqa: BLE001 - this process reports what its own exploration finds
        return
    vocab_size = job["V"]
    while time.monotonic() < deadline:
        with counter.get_lock():
            group = counter.value
            counter.value += 1
        indices = output_group(group, vocab_size, len(outputs))
        if not indices:
            break
        for index in indices:
            start = time.perf_counter()
            status, model, calls, reason, solver = decide_output(tree, reference, outputs[index], variables,
                                                                 deadline, job.get("solvers", ("z3",)))
            values = model_values(model, variables) if model is not None else None
            answers.put((index, (status, values, calls, reason, time.perf_counter() - start, solver)))
