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


class _FakeRay:
    """``ray.init`` failing as Ray's does when its node does not come up (a bare
    ``Exception``) for the first ``fail`` calls, then starting; no Ray is started."""

    def __init__(self, fail: int):
        self.fail, self.inits, self.shutdowns, self.ports = fail, 0, 0, []

    def init(self, **kw):
        self.inits += 1
        self.ports.append(kw["dashboard_port"])
        if self.inits <= self.fail:
            raise Exception("The current node timed out during startup. This could happen "
                            "because some of the raylet failed to startup")

        class Info:
            address_info = {"gcs_address": "127.0.0.1:6379", "session_dir": "/tmp/x"}
            dashboard_url = f"127.0.0.1:{kw['dashboard_port']}"
        return Info()

    def shutdown(self):
        self.shutdowns += 1


@pytest.mark.parametrize("fail", [1, 2])
def test_a_local_ray_that_does_not_start_is_retried_once_then_named(monkeypatch, fail):
    import ray

    from automl import cluster

    fake = _FakeRay(fail)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    if fail == 1:  # the second start, on a new free dashboard port, is the instance
        handle = cluster.connect(num_cpus=1, dashboard_port=0, metrics_export_port=61234)
        assert handle.started and handle.metrics_url == "http://127.0.0.1:61234/metrics"
        assert handle.dashboard_url == f"http://127.0.0.1:{fake.ports[-1]}"
        assert (fake.inits, fake.shutdowns) == (2, 1)
    else:
        with pytest.raises(ResourceError) as e:
            cluster.connect(num_cpus=1, dashboard_port=0, metrics_export_port=None)
        assert e.value.exit_code == EXIT_RESOURCES and "\n" not in str(e.value)
        assert "did not start" in str(e.value) and "timed out during startup" in str(e.value)
        assert (fake.inits, fake.shutdowns) == (2, 2)
