"""`verispec check --workers N`: the (method, instance) pairs fanned out on joblib's loky workers
give the serial results exactly (lossless, not lossless, declared-lossy and contract-error methods;
every field but the time), and the flags are checked."""

from dataclasses import asdict
from fractions import Fraction

import pytest

from verispec import cli
from verispec.check import run_check
from verispec.reference import drafters
from verispec.reference.methods import Method
from verispec.testing import planted

pytest.importorskip("joblib")


def _crashes_at_v3():
    """A rule that raises at V = 3 (a contract error in the middle of the sweep over V = 2, 3:
    the instances after it are not checked)."""
    def verify(target, draft_model, context, draft, rand):
        if len(target.probs(context)) == 3:
            raise ZeroDivisionError("boom")
        return (rand.categorical(target.probs(context)),)

    return Method("crashes_at_v3", drafters.chain(draft_length=1), verify)


def _fields(results):
    rows = [asdict(r) for r in results]
    for row in rows:
        assert row.pop("seconds") >= 0
        row["mean_block_efficiency"] = repr(row["mean_block_efficiency"])  # nan == nan is False
    return rows


@pytest.mark.parametrize("rational", [False, True])
def test_workers_give_the_serial_results(rational):
    names = ["token", "gbv", planted.residual_p(1), _crashes_at_v3(), "static_ensemble"]
    args = (names, (2, 3), 1, 2, 3, 0)
    serial = run_check(*args, num_tokens=None, rational=rational)
    fanned = run_check(*args, num_tokens=None, rational=rational, workers=2)
    assert _fields(fanned) == _fields(serial)
    status = {r.method: r.status for r in serial}
    assert status == {"token": "lossless", "gbv": "lossless", "planted.residual_p": "NOT lossless",
                      "crashes_at_v3": "contract error", "static_ensemble": "lossy"}
    lossy = serial[4]  # declared lossy: every instance's TV kept, and the exact maximum (each instance's exact twin)
    assert lossy.lossy and len(lossy.lossy_instances) == lossy.instances and lossy.max_tv > 0
    assert abs(float(Fraction(lossy.max_tv_rational)) - lossy.max_tv) <= 1e-12
    assert 0 < serial[3].instances < serial[0].instances  # stopped at its first crash


def test_check_cli_workers_and_bad_flags(capsys):
    assert cli.main(["check", "--method", "token", "--vocab-size", "2", "--instances", "2", "--workers", "2"]) == 0
    assert "all methods lossless" in capsys.readouterr().out
    assert cli.main(["check", "--method", "token", "--vocab-size", "2", "--cluster", "tcp://h:8786"]) == 2
    assert capsys.readouterr().err.startswith("verispec check: --cluster: ")
    with pytest.raises(SystemExit):
        cli.main(["check", "--workers", "0"])
