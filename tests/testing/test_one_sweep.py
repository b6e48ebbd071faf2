"""One sweep: `verispec check` and `assert_lossless` plan their instances with the same code
(`verispec.testing.sweeps.Sweep`) and describe them the same way (`Instance.line()`)."""

import pytest

from verispec import cli
from verispec.check import make_instances, plan_instances, run_check
from verispec.reference import methods
from verispec.testing import Sweep, assert_lossless, sweep
from verispec.testing.sweeps import FamilyGrid, SeededPairs, grid_sweep


@pytest.mark.parametrize("flags, arguments", [
    ([], {}),
    (["--vocab-sizes", "2,3,4", "--instances", "3", "--seed", "2", "--rational"],
     dict(vocab_sizes=(2, 3, 4), num_instances=3, seed=2, rational=True)),
    (["--vocab-size", "5", "--budget", "30"], dict(vocab_sizes=(5,), budget=30)),
])
def test_check_and_assert_lossless_report_the_same_instance_list(capsys, flags, arguments):
    assert cli.main(["check", "--method", "token", *flags, "--list-instances"]) == 0
    listed = capsys.readouterr().out.splitlines()
    report = assert_lossless(methods.token(2), sweep=Sweep.check(**arguments))
    assert list(report.instances) == listed and report.num_instances == len(listed) > 0
    # the command checks exactly these: one enumeration per listed instance
    sizes = arguments.get("vocab_sizes", (3, 4, 5, 6))
    result, = run_check(["token"], sizes, 2, 2, arguments.get("num_instances", 4), arguments.get("seed", 0),
                        num_tokens=None, rational=arguments.get("rational", False),
                        budget=arguments.get("budget", 1000))
    assert result.instances == len(listed)


def test_the_default_check_sweep_is_its_table():
    instances = Sweep.check().with_num_tokens(4).instances()
    counts = [sum(i.vocab_size == V for i in instances) for V in (3, 4, 5, 6)]
    assert counts == [4, 3, 1, 1]  # what `verispec check` prints: "4 at V=3, 3 at V=4, 1 at V=5, 1 at V=6"
    assert [i.num_tokens for i in instances] == [4] * 8 + [3]
    assert [i.line() for i in instances] == [i.line() for i in plan_instances((3, 4, 5, 6), 4, 0, False, 4)]
    assert instances[0].label == "check instance 0" and len(instances[0].context) == 3
    assert [i.line() for i in instances[:4]] == [i.line() for i in plan_instances(3, 4, 0, False, 4)]
    assert [i.target.describe() for i in make_instances(3, 2, seed=0)] == [i.target.describe() for i in instances[:2]]


def test_assert_lossless_default_is_the_family_grid_sweep():
    report = assert_lossless(methods.token(1), vocab_sizes=(2, 3), families=("iid",))
    planned = grid_sweep((2, 3), num_tokens=3, families=("iid",)).instances()
    assert list(report.instances) == [i.line() for i in planned] == [i.line() for i in
                                                                       sweep((2, 3), num_tokens=3, families=("iid",))]
    assert isinstance(grid_sweep().design, FamilyGrid) and isinstance(Sweep.check().design, SeededPairs)


def test_a_planned_sweep_does_not_mix_with_the_arguments_of_another():
    with pytest.raises(ValueError, match="sweep: a planned sweep fixes its own instances; leave out vocab_sizes"):
        assert_lossless(methods.token(1), sweep=Sweep.check(), vocab_sizes=(2,))
    with pytest.raises(ValueError, match="sweep: pass either sweep or target/draft or instances"):
        assert_lossless(methods.token(1), sweep=Sweep.check(), instances=sweep((2,), num_tokens=2))
    with pytest.raises(TypeError, match="sweep: expected a verispec.testing.sweeps.Sweep"):
        assert_lossless(methods.token(1), sweep="check")
