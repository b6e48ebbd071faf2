"""`prove` on a Dask cluster (joblib's dask backend): the verdict and the counterexample of one process."""

import pytest

from verispec.formal import prove

pytest.importorskip("joblib")
distributed = pytest.importorskip("distributed")

#: A lossy rule named so that workers can import it, and a size with 8 outputs (workers are used
#: from `PARALLEL_MIN_OUTPUTS` outputs on).
SPEC, V, L = "verispec.testing.planted_engines:tempered_draft_raw_q", 2, 2


def test_a_proof_on_a_local_dask_cluster_matches_one_process():
    one = prove(SPEC, V, L, point_trials=0, workers=1, solvers="z3", timeout=300)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        many = prove(SPEC, V, L, point_trials=0, workers=3, solvers="z3", timeout=300, backend="dask",
                     cluster=cluster.scheduler_address)
        proved = prove("token", V, L, point_trials=0, workers=3, solvers="z3", timeout=300, backend="dask",
                       cluster=cluster.scheduler_address)
    assert one.verdict == many.verdict == "counterexample"
    assert many.counterexample.confirmed
    assert (many.counterexample.output, many.counterexample.target, many.counterexample.draft) == \
        (one.counterexample.output, one.counterexample.target, one.counterexample.draft)
    assert proved.verdict == "proved" and len(proved.queries) == V ** (L + 1)


def test_bad_backend_arguments_are_named():
    with pytest.raises(ValueError, match="backend"):
        prove("token", 2, 1, backend="mpi")
    with pytest.raises(ValueError, match="cluster"):
        prove("token", 2, 1, backend="loky", cluster="tcp://127.0.0.1:8786")
