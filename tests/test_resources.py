"""Admission control as a pure function of node resources and one trial's demand."""

from __future__ import annotations

import pytest

from automl.cluster import admit
from automl.errors import EXIT_RESOURCES, ResourceError


def test_auto_concurrency_packs_per_node():
    nodes = [{"CPU": 2.0}, {"CPU": 3.0}]
    assert admit({"CPU": 1.0}, "auto", nodes).max_concurrent == 5
    # 1.5 CPUs per trial: one fits on the 2-CPU node, two on the 3-CPU node
    assert admit({"CPU": 1.5}, "auto", nodes).max_concurrent == 3
    assert admit({"CPU": 1.0}, 2, nodes).max_concurrent == 2


def test_infeasible_names_need_and_largest_node():
    with pytest.raises(ResourceError) as info:
        admit({"CPU": 4.0}, "auto", [{"CPU": 2.0}, {"CPU": 3.0}])
    msg = str(info.value)
    assert "a trial needs CPU=4 on one node, but the largest node has CPU=3" in msg
    assert info.value.exit_code == EXIT_RESOURCES


def test_gpu_demand_on_cpu_cluster_is_infeasible():
    with pytest.raises(ResourceError, match="GPU=0"):
        admit({"CPU": 1.0, "GPU": 1.0}, "auto", [{"CPU": 8.0}])
