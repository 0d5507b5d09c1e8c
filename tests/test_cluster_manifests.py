"""Schema and policy checks for the cluster manifests under cluster/.

* Ray cluster-launcher configs (cluster/aws.yaml, cluster/gcp.yaml) are checked
  against Ray's own schema (``ray/autoscaler/ray-schema.json`` in the installed
  ray package), raw and after ``prepare_config`` + ``validate_config`` -- what
  ``ray up`` runs before it touches the cloud.
* KubeRay custom resources (RayCluster, RayJob, RayCronJob) are checked against
  the KubeRay CRDs in ``$AUTOML_SHARED_DIR/schemas/kuberay`` (default: the
  ``shared/`` folder beside the repository), strictly: like the API server's
  strict field validation, an unknown field is an error. CEL rules
  (``x-kubernetes-validations``) are not evaluated.
* Core kinds (CronJob, ServiceAccount, Role, RoleBinding, PVC) are checked with
  the offline schemas of the ``kubernetes-validate`` package, strict as well.

Each validator is also fed a deliberately broken copy, to prove it is live.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shlex
import zoneinfo
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "cluster"
KUBERAY = CLUSTER / "kuberay"
LAUNCHER_CONFIGS = {"aws": CLUSTER / "aws.yaml", "gcp": CLUSTER / "gcp.yaml"}

CRD_FILES = {
    "RayCluster": "ray.io_rayclusters.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
    "RayCronJob": "ray.io_raycronjobs.yaml",
}
# Kubernetes versions the core kinds must be valid for: an old-but-supported
# one and the newest that kubernetes-validate carries.
K8S_MIN_VERSION = "1.29"
ONE_DAY_S = 24 * 3600

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    with path.open() as f:
        return yaml.load(f, Loader=_Loader)


def _load_docs(path: Path) -> list[dict]:
    with path.open() as f:
        return [doc for doc in yaml.load_all(f, Loader=_Loader) if doc]


def _kuberay_docs() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(KUBERAY.glob("*.yaml")):
        for doc in _load_docs(path):
            meta = doc.get("metadata", {})
            name = meta.get("name") or meta.get("generateName", "").rstrip("-")
            docs.append((f"{path.name}:{doc['kind']}/{name}", doc))
    return docs


KUBERAY_DOCS = _kuberay_docs()
CUSTOM_DOCS = [(i, d) for i, d in KUBERAY_DOCS if d["kind"] in CRD_FILES]
CORE_DOCS = [(i, d) for i, d in KUBERAY_DOCS if d["kind"] not in CRD_FILES]


def _docs_of(kind: str) -> list[dict]:
    return [d for _, d in KUBERAY_DOCS if d["kind"] == kind]


def _one(kind: str) -> dict:
    docs = _docs_of(kind)
    assert len(docs) == 1, f"expected one {kind} under cluster/kuberay, found {len(docs)}"
    return docs[0]


def _errors(validator: jsonschema.protocols.Validator, instance: Any) -> list[str]:
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(instance)
    )


# --------------------------------------------------------------------------
# Ray cluster launcher (ray up)
# --------------------------------------------------------------------------


@functools.cache
def _ray_schema() -> dict:
    import ray

    path = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    return json.loads(path.read_text())


def _ray_validate(config: dict) -> None:
    """What `ray up` checks offline: the raw file, then the prepared config."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    jsonschema.validate(config, _ray_schema())
    validate_config(prepare_config(copy.deepcopy(config)))


@pytest.fixture(params=sorted(LAUNCHER_CONFIGS), ids=str)
def launcher(request) -> dict:
    return _load(LAUNCHER_CONFIGS[request.param])


def test_launcher_config_validates_against_ray_schema(launcher):
    _ray_validate(launcher)


def _misspelled_node_field(cfg):
    cfg["available_node_types"]["gpu_worker"]["max_worker"] = 4


def _wrong_type_idle_timeout(cfg):
    cfg["idle_timeout_minutes"] = "ten"


def _unknown_top_level_key(cfg):
    cfg["setup_command"] = cfg.pop("setup_commands")


def _negative_resource(cfg):
    cfg["available_node_types"]["cpu_worker"]["resources"]["CPU"] = -1


@pytest.mark.parametrize(
    "breakage",
    [_misspelled_node_field, _wrong_type_idle_timeout, _unknown_top_level_key, _negative_resource],
    ids=lambda f: f.__name__.strip("_"),
)
def test_launcher_validator_rejects_broken_copy(launcher, breakage):
    broken = copy.deepcopy(launcher)
    breakage(broken)
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        _ray_validate(broken)


def test_launcher_autoscaling_node_types(launcher):
    types = launcher["available_node_types"]
    head = launcher["head_node_type"]
    assert head in types
    assert types[head]["resources"].get("CPU") == 0, "trials must not run on the head"
    workers = {name: t for name, t in types.items() if name != head}
    gpu = [t for t in workers.values() if t["resources"].get("GPU", 0) > 0]
    cpu = [t for t in workers.values() if t["resources"].get("GPU", 0) == 0]
    assert gpu and cpu, "need a CPU worker type and a GPU worker type"
    for name, t in workers.items():
        assert 0 <= t["min_workers"] <= t["max_workers"] <= launcher["max_workers"], name
    assert launcher["idle_timeout_minutes"] > 0


def test_launcher_installs_project_and_torch(launcher):
    assert launcher["file_mounts"]["~/automl"] == ".", "the project is rsynced from the repo root"
    common = " && ".join(launcher["setup_commands"])
    assert "torch==2.13.0" in common and "whl/cpu" in common
    assert "-e ~/automl" in common
    gpu = next(t for t in launcher["available_node_types"].values() if t["resources"].get("GPU"))
    gpu_setup = " && ".join(gpu["worker_setup_commands"])
    assert "torch==2.13.0" in gpu_setup and "whl/cpu" not in gpu_setup, "GPU nodes need CUDA torch"
    assert "-e ~/automl" in gpu_setup
    assert gpu["docker"]["worker_image"].endswith("-gpu")


def test_launcher_token_auth_and_loopback_dashboard(launcher):
    starts = [
        cmd
        for cmd in launcher["head_start_ray_commands"] + launcher["worker_start_ray_commands"]
        if "ray start" in cmd
    ]
    assert len(starts) == 2
    for cmd in starts:
        assert "RAY_AUTH_MODE=token ray start" in cmd, cmd
    head_start = next(c for c in launcher["head_start_ray_commands"] if "ray start" in c)
    assert "--dashboard-host=127.0.0.1" in head_start.split()
    assert "0.0.0.0" not in yaml.safe_dump(launcher)
    # The token made by `ray get-auth-token --generate` reaches every node.
    assert launcher["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


# --------------------------------------------------------------------------
# KubeRay custom resources
# --------------------------------------------------------------------------


def _shared_dir() -> Path:
    return Path(os.environ.get("AUTOML_SHARED_DIR", REPO.parent / "shared"))


def _crd_dir() -> Path:
    crds = _shared_dir() / "schemas" / "kuberay"
    missing = [f for f in CRD_FILES.values() if not (crds / f).is_file()]
    if missing:
        pytest.skip(
            f"KubeRay CRDs not found: {', '.join(missing)} missing in {crds} "
            "(set AUTOML_SHARED_DIR to the folder holding schemas/kuberay/)"
        )
    return crds


def _closed(schema: Any) -> Any:
    """A CRD's structural schema as plain JSON Schema, closed like strict validation.

    Drops the ``x-kubernetes-*`` extensions; an object that lists its
    properties and neither sets additionalProperties nor preserves unknown
    fields gets ``additionalProperties: false``, so a misspelled field fails.
    """
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if "properties" in out:
        out["properties"] = {k: _closed(v) for k, v in out["properties"].items()}
        open_ = schema.get("x-kubernetes-preserve-unknown-fields") is True
        if "additionalProperties" not in out and not open_:
            out["additionalProperties"] = False
        if schema.get("x-kubernetes-embedded-resource"):
            for key in ("apiVersion", "kind", "metadata"):
                out["properties"].setdefault(key, {})
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _closed(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [_closed(s) for s in out[key]]
    return out


@functools.cache
def _crd_validator(kind: str) -> jsonschema.protocols.Validator:
    crd = _load(_crd_dir() / CRD_FILES[kind])
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _closed(version["schema"]["openAPIV3Schema"])
    # OpenAPI v3.0 schemas are draft-4 flavoured.
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


@pytest.mark.parametrize("doc", [d for _, d in CUSTOM_DOCS], ids=[i for i, _ in CUSTOM_DOCS])
def test_custom_resource_validates_against_kuberay_crd(doc):
    assert doc["apiVersion"] == "ray.io/v1"
    assert _errors(_crd_validator(doc["kind"]), doc) == []


def _crd_breakages() -> list:
    def misspelled_worker_field(docs):
        group = docs["RayCluster"]["spec"]["workerGroupSpecs"][0]
        group["maxReplica"] = group.pop("maxReplicas")
        return docs["RayCluster"]

    def wrong_type_replicas(docs):
        docs["RayCluster"]["spec"]["workerGroupSpecs"][1]["minReplicas"] = "0"
        return docs["RayCluster"]

    def unknown_auth_mode(docs):
        docs["RayJob"]["spec"]["rayClusterSpec"]["authOptions"]["mode"] = "tokens"
        return docs["RayJob"]

    def misspelled_job_field(docs):
        spec = docs["RayJob"]["spec"]
        spec["shutdownAfterJobFinish"] = spec.pop("shutdownAfterJobFinishes")
        return docs["RayJob"]

    def wrong_type_schedule(docs):
        docs["RayCronJob"]["spec"]["schedule"] = 2
        return docs["RayCronJob"]

    def misspelled_container_field(docs):
        template = docs["RayCronJob"]["spec"]["jobTemplate"]["rayClusterSpec"]["headGroupSpec"]
        container = template["template"]["spec"]["containers"][0]
        container["imagePullPolic"] = container.pop("imagePullPolicy")
        return docs["RayCronJob"]

    return [
        misspelled_worker_field,
        wrong_type_replicas,
        unknown_auth_mode,
        misspelled_job_field,
        wrong_type_schedule,
        misspelled_container_field,
    ]


@pytest.mark.parametrize("breakage", _crd_breakages(), ids=lambda f: f.__name__)
def test_crd_validator_rejects_broken_copy(breakage):
    docs = {kind: copy.deepcopy(_one(kind)) for kind in CRD_FILES}
    broken = breakage(docs)
    assert _errors(_crd_validator(broken["kind"]), broken) != []


# --------------------------------------------------------------------------
# Core Kubernetes kinds
# --------------------------------------------------------------------------


def _k8s_validate(doc: dict) -> None:
    kv = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (requirements.lock)"
    )
    from kubernetes_validate.utils import latest_version

    for version in (K8S_MIN_VERSION, latest_version()):
        kv.validate(doc, version, strict=True)


@pytest.mark.parametrize("doc", [d for _, d in CORE_DOCS], ids=[i for i, _ in CORE_DOCS])
def test_core_resource_validates_with_kubernetes_validate(doc):
    _k8s_validate(doc)


def _core_breakages() -> list:
    def misspelled_concurrency_policy(cronjob):
        cronjob["spec"]["concurrencyPolicyy"] = cronjob["spec"].pop("concurrencyPolicy")

    def wrong_type_history_limit(cronjob):
        cronjob["spec"]["successfulJobsHistoryLimit"] = "three"

    def misspelled_pod_field(cronjob):
        pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        pod["serviceAccount_name"] = pod.pop("serviceAccountName")

    return [misspelled_concurrency_policy, wrong_type_history_limit, misspelled_pod_field]


@pytest.mark.parametrize("breakage", _core_breakages(), ids=lambda f: f.__name__)
def test_kubernetes_validate_rejects_broken_copy(breakage):
    broken = copy.deepcopy(_one("CronJob"))
    breakage(broken)
    with pytest.raises(jsonschema.ValidationError):
        _k8s_validate(broken)


# --------------------------------------------------------------------------
# Policies: schedule, no overlap, no public dashboard, auth, entrypoint
# --------------------------------------------------------------------------

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_FIELDS = (
    (0, 59, {}),  # minute
    (0, 23, {}),  # hour
    (1, 31, {}),  # day of month
    (1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),  # month
    (0, 7, {d: i for i, d in enumerate(_DAYS)}),  # day of week (0 and 7: Sunday)
)
_CRON_MACROS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def _cron_value(text: str, lo: int, hi: int, names: dict[str, int]) -> bool:
    value = names.get(text.lower()) if text.isalpha() else int(text) if text.isdigit() else None
    return value is not None and lo <= value <= hi


def _valid_cron_field(field: str, lo: int, hi: int, names: dict[str, int]) -> bool:
    for item in field.split(","):
        base, slash, step = item.partition("/")
        if slash and not (step.isdigit() and int(step) > 0):
            return False
        if base in ("*", "?"):
            continue
        first, dash, last = base.partition("-")
        if not _cron_value(first, lo, hi, names):
            return False
        if dash:
            if not _cron_value(last, lo, hi, names):
                return False
            if first.isdigit() and last.isdigit() and int(first) > int(last):
                return False
    return True


def is_valid_cron(expr: str) -> bool:
    """Standard 5-field cron (what Kubernetes CronJob and KubeRay accept), or a macro."""
    if expr.strip() in _CRON_MACROS:
        return True
    fields = expr.split()
    if len(fields) != len(_CRON_FIELDS):
        return False
    return all(
        _valid_cron_field(field, lo, hi, names)
        for field, (lo, hi, names) in zip(fields, _CRON_FIELDS, strict=True)
    )


@pytest.mark.parametrize(
    ("expr", "valid"),
    [
        ("0 2 * * *", True),
        ("*/15 0-6 1,15 jan-jun mon-fri", True),
        ("@daily", True),
        ("0 2 * *", False),
        ("60 2 * * *", False),
        ("0 24 * * *", False),
        ("0 2 * * 8", False),
        ("0 2 */0 * *", False),
        ("0 5-2 * * *", False),
        ("nightly", False),
    ],
)
def test_cron_checker(expr, valid):
    assert is_valid_cron(expr) is valid


@pytest.mark.parametrize("kind", ["RayCronJob", "CronJob"])
def test_schedule_is_valid_cron_with_a_real_timezone(kind):
    spec = _one(kind)["spec"]
    assert is_valid_cron(spec["schedule"]), spec["schedule"]
    zoneinfo.ZoneInfo(spec["timeZone"])


def test_nightly_runs_never_overlap():
    cronjob = _one("CronJob")["spec"]
    assert cronjob["concurrencyPolicy"] == "Forbid"
    # The CronJob pod waits for its RayJob, so Forbid covers the Ray run too,
    # and every run is cut off before the next night.
    rayjob_deadline = _one("RayJob")["spec"]["activeDeadlineSeconds"]
    cronjob_deadline = cronjob["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert rayjob_deadline < cronjob_deadline < ONE_DAY_S
    script = cronjob["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "kubectl create -f /etc/automl/rayjob.yaml" in script
    assert "jobDeploymentStatus" in script
    # RayCronJob has no concurrencyPolicy: the deadline alone keeps runs apart.
    assert _one("RayCronJob")["spec"]["jobTemplate"]["activeDeadlineSeconds"] < ONE_DAY_S


def test_cronjob_can_create_rayjobs_and_nothing_else():
    (role,) = _docs_of("Role")
    assert role["rules"] == [
        {
            "apiGroups": ["ray.io"],
            "resources": ["rayjobs"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        }
    ]
    (binding,) = _docs_of("RoleBinding")
    (account,) = _docs_of("ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"]}]
    pod = _one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    # The pod reads the RayJob from a ConfigMap made from rayjob.yaml.
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == "automl-nightly-rayjob"
    how_to = (KUBERAY / "cronjob.yaml").read_text()
    assert "kubectl create configmap automl-nightly-rayjob" in how_to


def _ray_cluster_specs() -> list[dict]:
    specs = [d["spec"] for d in _docs_of("RayCluster")]
    specs += [d["spec"]["rayClusterSpec"] for d in _docs_of("RayJob")]
    specs += [d["spec"]["jobTemplate"]["rayClusterSpec"] for d in _docs_of("RayCronJob")]
    assert len(specs) == 3
    return specs


def test_embedded_cluster_and_job_specs_are_in_sync():
    assert _one("RayJob")["spec"]["rayClusterSpec"] == _one("RayCluster")["spec"]
    assert _one("RayCronJob")["spec"]["jobTemplate"] == _one("RayJob")["spec"]


def test_dashboard_is_not_exposed():
    for _, doc in KUBERAY_DOCS:
        assert doc["kind"] not in {"Ingress", "Route", "Gateway", "HTTPRoute"}
        if doc["kind"] == "Service":
            assert doc["spec"].get("type", "ClusterIP") == "ClusterIP"
    for spec in _ray_cluster_specs():
        head = spec["headGroupSpec"]
        assert head.get("serviceType", "ClusterIP") == "ClusterIP"
        assert head.get("headService", {}).get("spec", {}).get("type", "ClusterIP") == "ClusterIP"
        assert not head.get("enableIngress", False)


def test_ray_token_auth_is_enabled():
    for spec in _ray_cluster_specs():
        assert spec["authOptions"]["mode"] == "token"


def test_clusters_autoscale_cpu_and_gpu_workers():
    for spec in _ray_cluster_specs():
        assert spec["enableInTreeAutoscaling"] is True
        assert spec["autoscalerOptions"]["idleTimeoutSeconds"] > 0
        assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
        groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
        assert set(groups) == {"cpu", "gpu"}
        for group in groups.values():
            assert 0 <= group["minReplicas"] <= group["maxReplicas"]
            assert group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"]

        def gpus(group):
            return group["template"]["spec"]["containers"][0]["resources"]["limits"].get(
                "nvidia.com/gpu", 0
            )

        assert gpus(groups["gpu"]) >= 1 and gpus(groups["cpu"]) == 0


def test_every_ray_pod_mounts_the_shared_results_volume():
    (pvc,) = _docs_of("PersistentVolumeClaim")
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]
    for spec in _ray_cluster_specs():
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            pod = group["template"]["spec"]
            claims = {
                v["name"]: v["persistentVolumeClaim"]["claimName"]
                for v in pod["volumes"]
                if "persistentVolumeClaim" in v
            }
            mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
            assert claims[mounts["/mnt/runs"]] == pvc["metadata"]["name"]


@pytest.mark.parametrize("kind", ["RayJob", "RayCronJob"])
def test_entrypoint_runs_the_nightly_automl_search(kind):
    spec = _one(kind)["spec"]
    job = spec["jobTemplate"] if kind == "RayCronJob" else spec
    argv = shlex.split(job["entrypoint"])
    assert argv[:3] == ["automl", "search", "search_spaces/resnet.yaml"]
    # no fixed --name: each night gets its own run folder (an explicit name is never reused)
    assert "--name" not in argv
    assert argv[argv.index("--output") + 1] == "/mnt/runs"
    # No shell operators: KubeRay's submitter splices the entrypoint into a script.
    assert not set(job["entrypoint"]) & set("&|;><`$")
    assert job["shutdownAfterJobFinishes"] is True
    assert job["ttlSecondsAfterFinished"] >= 0
    assert job["submissionMode"] == "K8sJobMode"
    # Relative paths in the entrypoint resolve against the project in the image.
    head = job["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["workingDir"] == "/home/ray/automl"


def test_head_tells_admission_what_the_autoscaler_may_add():
    """A KubeRay head runs with num-cpus 0 and the autoscaler is a sidecar the driver cannot
    read: the head's AUTOML_AUTOSCALING_CONFIG must describe the worker groups exactly."""
    import json

    from automl.cluster._autoscale import ENV, from_cluster_config

    units = {"Gi": 2**30, "Mi": 2**20}
    for spec in _ray_cluster_specs():
        head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
        (value,) = [e["value"] for e in head["env"] if e["name"] == ENV]
        scaling = from_cluster_config(json.loads(value), ENV)
        got = {t.name: (t.resources, t.max_workers) for t in scaling.types}
        want = {}
        for g in spec["workerGroupSpecs"]:
            limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
            mem = limits["memory"]
            res = {"CPU": float(limits["cpu"]),
                   "memory": float(int(mem[:-2]) * units[mem[-2:]])}
            if limits.get("nvidia.com/gpu"):
                res["GPU"] = float(limits["nvidia.com/gpu"])
            want[g["groupName"]] = (res, g["maxReplicas"])
        assert got == want
