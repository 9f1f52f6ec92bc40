"""Tests for gaugelab.study.stats.compare: it re-exports the paired, envelope and selection
results."""

from gaugelab.study.stats import compare, envelope, paired
from gaugelab.study.stats import pareto as selection


def test_compare_re_exports_each_result_from_its_own_module():
    for module in (paired, envelope, selection):
        for name in module.__all__:
            assert getattr(compare, name) is getattr(module, name), name
    assert sorted(compare.__all__) == sorted(
        n for m in (paired, envelope, selection) for n in m.__all__
    )
