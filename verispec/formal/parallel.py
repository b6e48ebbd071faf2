"""Parallel queries on joblib: other workers decide some outputs while this process decides the rest.

The queries of different outputs are independent, so they can run at once. z3 objects cannot be
sent between processes (and z3 is not safe to fork), so each worker receives a small job (the
method's name or "pkg.module:attr", the size, the temperatures, the context, the solvers), rebuilds
the symbolic models and explores the same program itself, then decides its share of the outputs.
It sends back, per output, the verdict of its query and, for a satisfiable one, the solver's pair
as exact rationals; this process confirms any counterexample with the exact engine as usual.

The outputs are dealt in groups of V (the outputs that share all but their last token split on the
same comparisons, so one worker deciding a group reuses its region checks): group g goes to share
g mod n, this process keeping the last share. The workers are joblib's (`joblib.Parallel`): the
loky backend (fresh worker processes on this machine) by default; "dask" runs them on a Dask
cluster (``cluster``: the scheduler's address, e.g. "tcp://10.0.0.5:8786"; None starts a local one);
"ray" on a Ray cluster (``cluster``: its address, default the ``RAY_ADDRESS`` environment
variable). Install the extras ``verispec[dask]`` / ``verispec[ray]``.

Soundness does not depend on the workers: an output no worker answered by the deadline (a crash, a
slow start, a timeout, a worker that stopped at a counterexample) counts as "unknown", never as
"unsat", so the verdict can only be "proved" when every output was shown equal by some process.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings

from ._internal.problem import decide_output, explore_job
from ._internal.values import model_values
from .symbolic import building

__all__ = ["BACKENDS", "Workers", "check_backend", "decide_share", "helper_job", "joblib_available", "map_tasks",
           "output_group", "shares"]

#: joblib backends `prove` can run its workers on.
BACKENDS = ("loky", "dask", "ray")

#: Seconds past the deadline this process waits for the workers' last answers.
GRACE_S = 1.0


def joblib_available() -> bool:
    """True when joblib (the workers' engine, ``verispec[prove]``) is installed."""
    try:
        import joblib  # noqa: F401
    except ImportError:
        return False
    return True


def check_backend(backend, cluster) -> tuple:
    """(backend, cluster) checked: backend one of `BACKENDS` (None: "loky"); cluster None or an
    address string (not for loky). ValueError naming the argument."""
    backend = "loky" if backend is None else backend
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if cluster is not None and (not isinstance(cluster, str) or not cluster):
        raise ValueError(f"cluster: expected an address string, got {cluster!r}")
    if cluster is not None and backend == "loky":
        raise ValueError("cluster: an address needs backend 'dask' or 'ray' (loky runs on this machine)")
    return backend, cluster


def helper_job(spec, V, L, K, temperatures, context, solvers=("z3",)):
    """What a worker needs to rebuild the proof, or None when `spec` is not a name a worker can
    resolve itself (a built-in name or "pkg.module:attr"; a `Method` object may hold closures or
    live in a script the worker cannot import)."""
    if not isinstance(spec, str):
        return None
    return {"spec": spec, "V": V, "L": L, "K": K, "temperatures": temperatures, "context": context,
            "solvers": solvers}


def output_group(group: int, vocab_size: int, num_outputs: int) -> range:
    """The output indices of group number `group`: the V outputs that share all but their last
    token (in `itertools.product` order). Their queries split on the same comparisons, so one
    process deciding them all reuses its region checks (`Tree.regions`)."""
    return range(group * vocab_size, min((group + 1) * vocab_size, num_outputs))


def shares(num_outputs: int, vocab_size: int, workers: int) -> list:
    """[workers] lists of group numbers: group g in share g mod workers (this process: the last)."""
    groups = range(-(-num_outputs // vocab_size))
    return [[g for g in groups if g % workers == share] for share in range(workers)]


def decide_share(job, groups, seconds):
    """A worker's task: explore `job`'s program, then decide the outputs of `groups` within
    `seconds`. Returns {output index: (status, values or None, solver calls, reason, seconds,
    solver)}; stops after the first satisfiable query (this process confirms it)."""
    deadline = time.monotonic() + seconds
    answers = {}
    with building():  # the z3 expressions built for this task, dropped at its end
        try:
            tree, reference, variables, outputs = explore_job(job, deadline)
        except Exception:  # noqa: BLE001 - this process reports what its own exploration finds
            return answers
        for group in groups:
            for index in output_group(group, job["V"], len(outputs)):
                if time.monotonic() >= deadline:
                    return answers
                start = time.perf_counter()
                status, model, calls, reason, solver = decide_output(tree, reference, outputs[index], variables,
                                                                     deadline, job["solvers"])
                values = model_values(model, variables) if model is not None else None
                answers[index] = (status, values, calls, reason, time.perf_counter() - start, solver)
                if status == "sat":
                    return answers
    return answers


class Workers:
    """joblib workers deciding the shares of the outputs but this process's (`mine`)."""

    def __init__(self, job, num_outputs: int, deadline: float, workers: int, backend="loky", cluster=None):
        self.deadline, self.backend, self.finished = deadline, backend, False
        all_shares = shares(num_outputs, job["V"], workers)
        self.mine = all_shares[-1]
        self.stack = contextlib.ExitStack()
        try:
            self.stack.enter_context(_backend(backend, cluster, workers))
            from joblib import Parallel, delayed

            seconds = deadline - time.monotonic()
            tasks = [delayed(decide_share)(job, share, seconds) for share in all_shares[:-1] if share]
            # A generator: the tasks are dispatched now and run while this process decides its share.
            # n_jobs >= 2: joblib runs n_jobs = 1 in this process, one task after the other.
            self.results = Parallel(n_jobs=max(2, len(tasks)), return_as="generator_unordered",
                                    timeout=seconds + GRACE_S)(tasks)
        except BaseException:
            self.stack.close()
            raise

    def collect(self, indices=None) -> dict:
        """{index: (status, values or None, solver calls, reason, seconds, solver)} of the workers'
        outputs (those in `indices`, default all) answered by the deadline (+ GRACE_S); an output
        not answered is left out."""
        answers = {}
        try:
            for share_answers in self.results:
                answers.update(share_answers)
                if time.monotonic() > self.deadline + GRACE_S:
                    break
            else:
                self.finished = True
        except Exception:  # noqa: BLE001 - a lost or late worker: its outputs stay unanswered ("unknown")
            pass
        return {i: a for i, a in answers.items() if indices is None or i in indices}

    def close(self) -> None:
        """Stop the workers: loky's processes are killed when a task may still run (a counterexample
        or the deadline came first); a cluster's tasks end at their own deadline."""
        close = getattr(self.results, "close", None)
        if close is not None:
            with warnings.catch_warnings():  # "tasks executed but not used": by design (a counterexample came first)
                warnings.simplefilter("ignore", UserWarning)
                close()
        if self.backend == "loky" and not self.finished:
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor().shutdown(wait=False, kill_workers=True)
        self.stack.close()


def map_tasks(function, tasks, workers: int, backend="loky", cluster=None) -> list:
    """[function(*task) for task in tasks], in order, computed by `workers` joblib workers on
    `backend` (`check_backend`: loky processes here, or a Dask / Ray cluster at `cluster`), or in
    this process when workers == 1 and the backend is loky. `verispec check` fans its instances x
    methods out through it; `function` and the tasks must pickle (cloudpickle: closures do).

    Raises:
        ValueError: workers not an int >= 1, or a bad backend / cluster (`check_backend`).
        ImportError: joblib (or the backend's dask / ray) is not installed.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected an int >= 1, got {workers!r}")
    backend, cluster = check_backend(backend, cluster)
    tasks = list(tasks)
    if workers == 1 and backend == "loky":
        return [function(*task) for task in tasks]
    from joblib import Parallel, delayed

    with _backend(backend, cluster, workers + 1):  # + 1: `_backend` counts a process that does not work here
        return list(Parallel(n_jobs=max(workers, 1))(delayed(function)(*task) for task in tasks))


@contextlib.contextmanager
def _backend(backend, cluster, workers):
    """joblib's backend for the workers: loky here, or a Dask / Ray cluster at `cluster`."""
    from joblib import parallel_config

    if backend == "loky":
        with parallel_config(backend="loky", n_jobs=workers - 1):
            yield
    elif backend == "dask":
        from dask.distributed import Client

        with Client(cluster) if cluster is not None else Client(processes=True, n_workers=workers - 1,
                                                                threads_per_worker=1) as _client:
            with parallel_config(backend="dask"):
                yield
    else:
        import ray
        from ray.util.joblib import register_ray

        register_ray()
        if not ray.is_initialized():
            ray.init(address=cluster or os.environ.get("RAY_ADDRESS"))
        with parallel_config(backend="ray"):
            yield
