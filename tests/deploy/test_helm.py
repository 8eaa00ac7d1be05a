"""The Helm chart (deploy/helm/runstore, docs/deploy.md#helm-chart): linted, rendered
for each way it is meant to run, every manifest checked against the Kubernetes API's
schemas, and its probes run for real against servers configured as it configures them.

helm is the pinned one `make helm` builds into .tools/bin (through the Go module
proxy, about two minutes cold); with CI=true a helm that cannot be built fails the
tests, elsewhere they skip. The schemas are those kubernetes-validate ships (the
Kubernetes OpenAPI as JSON schemas, in the strict variant where an unknown field is
an error), so validation needs no network: each manifest is checked against the
chart's lowest Kubernetes version (Chart.yaml's kubeVersion) and the one helm assumes.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import kubernetes_validate
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from runstore.server.version import __version__
from tests.certs import Authority
from tests.secured import Entry, write_auth_file

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "runstore"
RELEASE = "rs"
FULLNAME = "rs-runstore"
NAMESPACE = "agents"

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
"""The chart's lowest Kubernetes (Chart.yaml kubeVersion) and the one `make helm`'s
helm assumes (HELM_K8S_MINOR): every manifest must be valid on both."""

BASE: dict[str, Any] = {
    "image": {"repository": "registry.example/runstore"},
    "database": {"existingSecret": "runstore-database"},
    "tls": {"enabled": True, "existingSecret": "runstore-tls"},
    "auth": {"existingSecret": "runstore-auth"},
    "networkPolicy": {"database": {"to": [{"ipBlock": {"cidr": "10.0.12.0/24"}}]}},
}
"""PostgreSQL mode, one replica, TLS and an auth file: the least a cluster takes."""


def merged(base: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(dict(base))
    for key, value in change.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


MTLS: dict[str, Any] = {
    "tls": {"clientCA": {"enabled": True}, "probeClientSecret": "runstore-probe-client"}
}
SQLITE: dict[str, Any] = {"database": {"mode": "sqlite", "existingSecret": ""}}

COMBINATIONS: dict[str, dict[str, Any]] = {
    "postgresql-1": BASE,
    "postgresql-3": merged(BASE, {"replicas": 3}),
    "postgresql-mtls": merged(BASE, MTLS),
    "postgresql-mtls-by-name": merged(
        BASE, merged(MTLS, {"tls": {"probeServerName": "runstore.agents.svc"}})
    ),
    "postgresql-auth-file-insecure": merged(
        BASE, {"tls": {"enabled": False, "existingSecret": ""}, "insecure": True}
    ),
    "postgresql-everything": merged(
        BASE,
        merged(
            MTLS,
            {
                "replicas": 3,
                "imagePullSecrets": [{"name": "registry"}],
                "serviceAccountName": "runstore",
                "settings": {"log_format": "json", "pg_pool_max": 32, "access_log": True},
                "networkPolicy": {
                    "grpcFrom": [{"podSelector": {"matchLabels": {"app": "agents"}}}],
                    "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
                    "extraEgress": [{"ports": [{"protocol": "TCP", "port": 4317}]}],
                },
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "runstore"}},
                    }
                ],
            },
        ),
    ),
    "sqlite": merged(BASE, SQLITE),
    "sqlite-mtls": merged(BASE, merged(SQLITE, MTLS)),
    "sqlite-insecure-no-policy": merged(
        BASE,
        merged(
            SQLITE,
            {
                "tls": {"enabled": False, "existingSecret": ""},
                "auth": {"existingSecret": ""},
                "insecure": True,
                "networkPolicy": {"enabled": False},
                "metrics": {"enabled": False},
                "database": {"sqlite": {"storageClassName": "fast", "size": "1Gi"}},
            },
        ),
    ),
}


# --- helm and rendering --------------------------------------------------------


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built by `make helm` (a no-op once .tools/.helm-VERSION exists)."""
    if shutil.which("go") is None or shutil.which("make") is None:
        message = "make helm needs go and make (Go from the machine, the toolchain from the proxy)"
        if os.environ.get("CI"):
            pytest.fail(f"CI: {message}")
        pytest.skip(message)
    done = subprocess.run(
        ["make", "--no-print-directory", "helm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, f"make helm failed:\n{done.stdout}{done.stderr}"
    path = ROOT / ".tools" / "bin" / "helm"
    assert path.is_file(), "make helm did not leave .tools/bin/helm"
    return path


def helm_run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args],
        capture_output=True,
        text=True,
        timeout=120,
        # No kubeconfig, no cache or config of the user's: rendering is offline.
        env={"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent", "KUBECONFIG": "/dev/null"},
    )


def values_file(tmp_path: Path, values: Mapping[str, Any]) -> Path:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def template(helm: Path, tmp_path: Path, values: Mapping[str, Any]) -> str:
    """`helm template`, stdout; raises with helm's stderr if it refused."""
    done = helm_run(
        helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--kube-version", KUBERNETES_VERSIONS[-1], "-f", str(values_file(tmp_path, values)),
    )  # fmt: skip
    if done.returncode != 0:
        raise RenderError(done.stderr)
    return done.stdout


class RenderError(Exception):
    """helm template refused the values; the message is helm's stderr."""


def render(helm: Path, tmp_path: Path, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The manifests ``values`` render to, each validated (``validate``)."""
    documents = [doc for doc in yaml.safe_load_all(template(helm, tmp_path, values)) if doc]
    for document in documents:
        validate(document)
    return documents


def refusal(helm: Path, tmp_path: Path, values: Mapping[str, Any]) -> str:
    """helm's message when it refuses ``values``."""
    with pytest.raises(RenderError) as refused:
        template(helm, tmp_path, values)
    return str(refused.value)


# --- validation ----------------------------------------------------------------

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate(document: dict[str, Any]) -> None:
    """The Kubernetes API's schema of the document's kind, strict, on each version
    of KUBERNETES_VERSIONS; then the API server's rules the schemas do not carry
    that a chart can break (names, selectors, references between fields)."""
    kind = document.get("kind")
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            raise AssertionError(
                f"{kind} on Kubernetes {version}: {path}: {error.message}"
            ) from None
    name = document["metadata"]["name"]
    assert DNS_SUBDOMAIN.match(name) and len(name) <= 253, f"{kind} name {name!r}"
    if kind in ("Service", "StatefulSet", "Deployment"):
        assert DNS_LABEL.match(name) and len(name) <= 63, f"{kind} name {name!r} is no DNS label"
    for key, value in document["metadata"].get("labels", {}).items():
        assert len(str(value)) <= 63, f"label {key}={value!r} is too long"
    template_spec = pod_template(document)
    if template_spec is None:
        return
    selector = document["spec"].get("selector", {}).get("matchLabels")
    if selector is not None:
        labels = template_spec["metadata"]["labels"]
        assert selector.items() <= labels.items(), f"{kind}: selector {selector} misses the pods"
    pod = template_spec["spec"]
    volumes = {volume["name"] for volume in pod.get("volumes", [])}
    claims = {
        claim["metadata"]["name"] for claim in document["spec"].get("volumeClaimTemplates", [])
    }
    for container in pod["containers"]:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes | claims, f"{kind}: no volume {mount['name']!r}"
        ports = [port["name"] for port in container.get("ports", [])]
        assert all(PORT_NAME.match(port) and len(port) <= 15 for port in ports), ports
        assert len(set(ports)) == len(ports), ports


def pod_template(document: Mapping[str, Any]) -> dict[str, Any] | None:
    if document.get("kind") in ("Deployment", "StatefulSet", "Job"):
        template_spec: dict[str, Any] = document["spec"]["template"]
        return template_spec
    return None


def kinds(documents: list[dict[str, Any]]) -> list[str]:
    return sorted(document["kind"] for document in documents)


def only(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        doc
        for doc in documents
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} named {name}: {kinds(documents)}"
    return found[0]


def server_container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (workload,) = [doc for doc in documents if doc["kind"] in ("Deployment", "StatefulSet")]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "runstore"
    return dict(container)


def environment(container: Mapping[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


# --- lint, schema, every combination ---------------------------------------------


def test_chart_follows_the_server_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    # A chart's version is SemVer 2: main's 0.3.0.dev0 is the chart's 0.3.0-dev0.
    assert chart["version"] == __version__.replace(".dev", "-dev")


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_lint_strict(helm: Path, tmp_path: Path, name: str) -> None:
    done = helm_run(
        helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE,
        "-f", str(values_file(tmp_path, COMBINATIONS[name])),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_lint_strict_with_the_chart_defaults(helm: Path) -> None:
    """The defaults lint too (helm lint reports the template's `fail`s as notes)."""
    done = helm_run(helm, "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_every_manifest_is_valid_kubernetes(helm: Path, tmp_path: Path, name: str) -> None:
    documents = render(helm, tmp_path, COMBINATIONS[name])
    sqlite = name.startswith("sqlite")
    workload = "StatefulSet" if sqlite else "Deployment"
    assert workload in kinds(documents)
    assert ("Job" in kinds(documents)) is not sqlite
    for document in documents:
        assert document["metadata"].get("namespace") in (None, NAMESPACE)


def test_a_manifest_with_an_unknown_field_is_refused() -> None:
    """The validation itself: strict schemas refuse a misspelt field."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": 1, "targetPort": "grpc"}], "selectr": {"a": "b"}},
    }
    with pytest.raises(AssertionError, match="selectr"):
        validate(service)


# --- PostgreSQL mode --------------------------------------------------------------


def test_the_migration_is_a_hook_job_with_a_constant_name(helm: Path, tmp_path: Path) -> None:
    documents = render(helm, tmp_path, BASE)
    job = only(documents, "Job")
    assert job["metadata"]["name"] == f"{FULLNAME}-migrate"
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"
    # The next upgrade (a new image, more replicas) runs a Job of the same name.
    upgraded = render(helm, tmp_path, merged(BASE, {"image": {"tag": "0.3.0"}, "replicas": 3}))
    assert only(upgraded, "Job")["metadata"]["name"] == job["metadata"]["name"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] + container["args"] == ["runstore", "migrate"]
    assert pod["restartPolicy"] == "Never"
    # The database URL from the existing Secret, as a file.
    assert environment(container)["RUNSTORE_DATABASE_URL_FILE"] == (
        "/etc/runstore/database/database-url"
    )
    (secret,) = [v["secret"] for v in pod["volumes"] if v["name"] == "database-url"]
    assert secret["secretName"] == "runstore-database"
    assert secret["items"] == [{"key": "database-url", "path": "database-url"}]
    # The hook reads no object the chart creates (those come after it).
    created = {(doc["kind"], doc["metadata"]["name"]) for doc in documents}
    assert ("Secret", "runstore-database") not in created
    assert "serviceAccountName" not in pod
    # The server itself never migrates in this mode.
    server = environment(server_container(documents))
    assert "RUNSTORE_MIGRATE" not in server
    assert server["RUNSTORE_DATABASE_URL_FILE"] == "/etc/runstore/database/database-url"


def test_postgresql_mode_needs_an_existing_database_secret(helm: Path, tmp_path: Path) -> None:
    message = refusal(helm, tmp_path, merged(BASE, {"database": {"existingSecret": ""}}))
    assert "database.existingSecret is empty" in message
    assert "must exist before helm install" in message


@pytest.mark.parametrize(("replicas", "budgets"), [(1, 0), (2, 1), (3, 1)])
def test_a_disruption_budget_only_with_more_than_one_replica(
    helm: Path, tmp_path: Path, replicas: int, budgets: int
) -> None:
    documents = render(helm, tmp_path, merged(BASE, {"replicas": replicas}))
    found = [doc for doc in documents if doc["kind"] == "PodDisruptionBudget"]
    assert len(found) == budgets
    deployment = only(documents, "Deployment")
    assert deployment["spec"]["replicas"] == replicas
    for budget in found:
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_liveness_answers_while_readiness_follows_health(helm: Path, tmp_path: Path) -> None:
    container = server_container(render(helm, tmp_path, BASE))
    liveness = container["livenessProbe"]["exec"]["command"]
    readiness = container["readinessProbe"]["exec"]["command"]
    assert liveness != readiness
    assert readiness[:2] == ["runstore", "health"]
    assert liveness[:2] == ["/bin/sh", "-c"] and "runstore health --json" in liveness[2]
    assert container["startupProbe"]["exec"] == container["livenessProbe"]["exec"]
    # Both at the pod's own server, with the CA of its certificate.
    for command in (liveness, readiness):
        assert flag(command, "--target") == "127.0.0.1:50051"
        assert flag(command, "--tls-ca") == "/etc/runstore/tls/ca.crt"
        assert "--tls-cert" not in command


def flag(command: list[str], name: str) -> str:
    assert command.count(name) == 1, f"{name} in {command}"
    return command[command.index(name) + 1]


def test_probes_present_the_probe_client_certificate_under_mtls(helm: Path, tmp_path: Path) -> None:
    documents = render(helm, tmp_path, merged(BASE, MTLS))
    container = server_container(documents)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = container[probe]["exec"]["command"]
        assert flag(command, "--tls-cert") == "/etc/runstore/probe-tls/tls.crt"
        assert flag(command, "--tls-key") == "/etc/runstore/probe-tls/tls.key"
    # The server keeps its own certificate and asks for client ones.
    assert flag(container["args"], "--tls-cert") == "/etc/runstore/tls/tls.crt"
    assert flag(container["args"], "--tls-client-ca") == "/etc/runstore/client-ca/ca.crt"
    pod = only(documents, "Deployment")["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets["probe-tls"] == "runstore-probe-client"
    assert secrets["client-ca"] == secrets["tls"] == "runstore-tls"
    # No RUNSTORE_TLS_* variable, which `runstore health` would take as its own.
    assert not [name for name in environment(container) if name.startswith("RUNSTORE_TLS")]


def test_probes_by_a_name_the_certificate_holds(helm: Path, tmp_path: Path) -> None:
    values = COMBINATIONS["postgresql-mtls-by-name"]
    documents = render(helm, tmp_path, values)
    container = server_container(documents)
    command = container["readinessProbe"]["exec"]["command"]
    assert flag(command, "--target") == "runstore.agents.svc:50051"
    pod = only(documents, "Deployment")["spec"]["template"]["spec"]
    assert pod["hostAliases"] == [{"ip": "127.0.0.1", "hostnames": ["runstore.agents.svc"]}]


def test_mtls_without_a_probe_certificate_is_refused(helm: Path, tmp_path: Path) -> None:
    values = merged(BASE, {"tls": {"clientCA": {"enabled": True}}})
    assert "needs tls.probeClientSecret" in refusal(helm, tmp_path, values)


def test_no_tls_or_no_auth_file_is_refused_unless_insecure(helm: Path, tmp_path: Path) -> None:
    for change in (
        {"tls": {"enabled": False, "existingSecret": ""}},
        {"auth": {"existingSecret": ""}},
    ):
        assert "refuses to serve a pod address without TLS and an auth file" in refusal(
            helm, tmp_path, merged(BASE, change)
        )
    container = server_container(
        render(helm, tmp_path, merged(BASE, {"auth": {"existingSecret": ""}, "insecure": True}))
    )
    assert environment(container)["RUNSTORE_INSECURE"] == "true"
    assert "RUNSTORE_AUTH_FILE" not in environment(container)


def test_settings_the_chart_owns_are_refused(helm: Path, tmp_path: Path) -> None:
    message = refusal(helm, tmp_path, merged(BASE, {"settings": {"database_url": "sqlite://"}}))
    assert "settings" in message and "database_url" in message


def test_the_values_schema_refuses_a_misspelt_value(helm: Path, tmp_path: Path) -> None:
    message = refusal(helm, tmp_path, merged(BASE, {"replica": 3}))
    assert "values don't meet the specifications of the schema" in message
    assert "replica" in message


def test_the_values_schema_names_every_value(tmp_path: Path) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(schema["required"]) == set(values)
    assert set(schema["properties"]) == set(values) | {"global"}
    assert schema["additionalProperties"] is False


def test_every_pod_is_locked_down(helm: Path, tmp_path: Path) -> None:
    documents = render(helm, tmp_path, COMBINATIONS["postgresql-everything"])
    documents += render(helm, tmp_path, COMBINATIONS["sqlite"])
    pods = [pod_template(doc) for doc in documents if pod_template(doc) is not None]
    assert len(pods) == 3  # the Deployment, the Job, the StatefulSet
    for template_spec in pods:
        assert template_spec is not None
        pod = template_spec["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        tmp = [v for v in pod["volumes"] if v["name"] == "tmp"]
        assert tmp and "emptyDir" in tmp[0]
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["runAsUser"] == 10001
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
            assert container["resources"]["requests"]


def test_network_policy_lets_in_grpc_and_metrics_and_out_dns_and_the_database(
    helm: Path, tmp_path: Path
) -> None:
    documents = render(helm, tmp_path, COMBINATIONS["postgresql-everything"])
    policy = only(documents, "NetworkPolicy", FULLNAME)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ingress = policy["spec"]["ingress"]
    assert [rule["ports"] for rule in ingress] == [
        [{"protocol": "TCP", "port": "grpc"}],
        [{"protocol": "TCP", "port": "metrics"}],
    ]
    assert ingress[0]["from"] == [{"podSelector": {"matchLabels": {"app": "agents"}}}]
    egress = policy["spec"]["egress"]
    dns, database, extra = egress
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert database == {
        "to": [{"ipBlock": {"cidr": "10.0.12.0/24"}}],
        "ports": [{"protocol": "TCP", "port": 5432}],
    }
    assert extra == {"ports": [{"protocol": "TCP", "port": 4317}]}
    # The server's pods, by the labels the Deployment gives them.
    labels = only(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    # The migration Job's pods get the same way out (a hook, so on the first
    # install too), and no way in.
    migrate = only(documents, "NetworkPolicy", f"{FULLNAME}-migrate")
    assert migrate["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(migrate["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        only(documents, "Job")["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    assert migrate["spec"]["egress"] == egress
    assert "ingress" not in migrate["spec"]
    job_labels = only(documents, "Job")["spec"]["template"]["metadata"]["labels"]
    assert migrate["spec"]["podSelector"]["matchLabels"].items() <= job_labels.items()


def test_network_policy_needs_the_database_peers(helm: Path, tmp_path: Path) -> None:
    values = merged(BASE, {"networkPolicy": {"database": {"to": []}}})
    assert "networkPolicy.database.to is empty" in refusal(helm, tmp_path, values)


# --- SQLite mode ---------------------------------------------------------------------


def test_sqlite_mode_is_one_statefulset_that_migrates_itself(helm: Path, tmp_path: Path) -> None:
    documents = render(helm, tmp_path, COMBINATIONS["sqlite"])
    assert kinds(documents) == ["NetworkPolicy", "Service", "Service", "StatefulSet"]
    statefulset = only(documents, "StatefulSet")
    assert statefulset["spec"]["replicas"] == 1
    assert statefulset["spec"]["serviceName"] == f"{FULLNAME}-headless"
    assert only(documents, "Service", f"{FULLNAME}-headless")["spec"]["clusterIP"] == "None"
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    container = server_container(documents)
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    env = environment(container)
    assert env["RUNSTORE_DATABASE_URL"] == "sqlite:////data/runstore.db"
    assert env["RUNSTORE_MIGRATE"] == "true"
    assert "RUNSTORE_DATABASE_URL_FILE" not in env
    # No way out but DNS.
    (dns,) = only(documents, "NetworkPolicy")["spec"]["egress"]
    assert {port["port"] for port in dns["ports"]} == {53}


@pytest.mark.parametrize("replicas", [2, 3])
def test_sqlite_mode_refuses_more_than_one_replica(
    helm: Path, tmp_path: Path, replicas: int
) -> None:
    message = refusal(helm, tmp_path, merged(COMBINATIONS["sqlite"], {"replicas": replicas}))
    assert f"replicas is {replicas}, but database.mode sqlite serves from one replica only" in (
        message
    )


# --- The probes, run -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Pod:
    """A rendered server container run as a local process: its Secrets written
    where the pod mounts them (under ``root``), its paths and addresses moved
    there and to loopback, and its probes run as the kubelet runs them."""

    def __init__(
        self, workload: Mapping[str, Any], secrets: Mapping[str, Mapping[str, bytes]], root: Path
    ) -> None:
        self.root = root
        pod = workload["spec"]["template"]["spec"]
        (self.container,) = pod["containers"]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        for mount in self.container["volumeMounts"]:
            directory = self.path(mount["mountPath"])
            directory.mkdir(parents=True, exist_ok=True)
            volume = volumes.get(mount["name"], {})
            if "secret" not in volume:
                continue
            data = secrets[volume["secret"]["secretName"]]
            items = volume["secret"].get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                (directory / item["path"]).write_bytes(data[item["key"]])

    def path(self, text: str) -> Path:
        return self.root / text.lstrip("/")

    def moved(self, text: str) -> str:
        """``text`` with the pod's paths under ``root`` and 0.0.0.0 as 127.0.0.1."""
        text = re.sub(r"(?<![\w/])/(etc/runstore|data)\b", lambda m: f"{self.root}/{m[1]}", text)
        text = text.replace("sqlite:////", f"sqlite:///{self.root}/")
        return text.replace("0.0.0.0:", "127.0.0.1:")

    def environment(self) -> dict[str, str]:
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        env = {"PATH": path, "HOME": str(self.root)}
        env |= {item["name"]: self.moved(item["value"]) for item in self.container["env"]}
        return env

    async def probe(self, name: str) -> int:
        """The probe's exit code, as the kubelet would see it (0: success)."""
        command = [self.moved(part) for part in self.container[name]["exec"]["command"]]
        process = await asyncio.create_subprocess_exec(
            *command,
            env=self.environment(),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return await asyncio.wait_for(process.wait(), self.container[name]["timeoutSeconds"] + 5)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The container's command, until it logs that it serves; stopped after."""
        command = [self.moved(part) for part in self.container["command"] + self.container["args"]]
        process = await asyncio.create_subprocess_exec(
            *command,
            env=self.environment(),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stderr is not None
        log: list[str] = []
        try:
            async with asyncio.timeout(60):
                while not any("runstore serving on" in line for line in log):
                    line = (await process.stderr.readline()).decode()
                    assert line, f"the server exited {await process.wait()}:\n{''.join(log)}"
                    log.append(line)
            drain = asyncio.ensure_future(process.stderr.read())
            yield
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 30)
        await drain


@pytest.fixture(scope="module")
def mtls_secrets() -> Iterator[dict[str, dict[str, bytes]]]:
    """The Secrets the chart's mTLS values name, made of test certificates."""
    authority = Authority()
    server = authority.server("runstore.agents.svc")
    probe = authority.client("runstore-probe")
    yield {
        "runstore-tls": {"tls.crt": server.cert, "tls.key": server.key, "ca.crt": authority.pem},
        "runstore-probe-client": {"tls.crt": probe.cert, "tls.key": probe.key},
    }


async def test_probes_against_the_server_as_the_chart_runs_it(
    helm: Path, tmp_path: Path, mtls_secrets: dict[str, dict[str, bytes]]
) -> None:
    """The rendered command, settings and Secrets make a server that serves under
    mTLS, which all three probes find healthy; stopped, none does."""
    values = merged(
        COMBINATIONS["sqlite-mtls"], {"grpcPort": free_port(), "metrics": {"enabled": False}}
    )
    statefulset = only(render(helm, tmp_path, values), "StatefulSet")
    auth = write_auth_file(tmp_path / "auth.toml", {"host": Entry("host")}).read_bytes()
    pod = Pod(statefulset, {**mtls_secrets, "runstore-auth": {"auth.toml": auth}}, tmp_path / "pod")
    async with pod.serving():
        for name in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert await pod.probe(name) == 0, name
    for name in ("livenessProbe", "readinessProbe"):
        assert await pod.probe(name) != 0, name


@asynccontextmanager
async def health_server(
    port: int, status: Any, secrets: Mapping[str, Mapping[str, bytes]]
) -> AsyncIterator[None]:
    """A gRPC health service on 127.0.0.1:``port`` with the chart's mTLS, that
    reports ``status`` for the server as a whole: a replica whose database does not
    answer (server/runstore/server/health.py sets every status together)."""
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    tls = secrets["runstore-tls"]
    credentials = grpc.ssl_server_credentials(
        [(tls["tls.key"], tls["tls.crt"])],
        root_certificates=tls["ca.crt"],
        require_client_auth=True,
    )
    server.add_secure_port(f"127.0.0.1:{port}", credentials)
    await server.start()
    await servicer.set("", status)
    try:
        yield
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    ("status", "alive", "ready"),
    [
        (health_pb2.HealthCheckResponse.SERVING, True, True),
        (health_pb2.HealthCheckResponse.NOT_SERVING, True, False),
    ],
    ids=["serving", "database-down"],
)
async def test_a_database_outage_takes_the_replica_out_of_service_without_a_restart(
    helm: Path,
    tmp_path: Path,
    mtls_secrets: dict[str, dict[str, bytes]],
    status: Any,
    alive: bool,
    ready: bool,
) -> None:
    port = free_port()
    values = merged(COMBINATIONS["postgresql-mtls-by-name"], {"grpcPort": port})
    deployment = only(render(helm, tmp_path, values), "Deployment")
    # hostAliases: the pod resolves the certificate's name to itself; here, the
    # machine's resolver does not know it, so the probes connect by 127.0.0.1 under
    # the certificate's other name.
    deployment = json.loads(json.dumps(deployment).replace("runstore.agents.svc:", "127.0.0.1:"))
    secrets = {**mtls_secrets, "runstore-database": {"database-url": b"postgresql://x/y"}}
    secrets["runstore-auth"] = {"auth.toml": b""}
    pod = Pod(deployment, secrets, tmp_path / "pod")
    async with health_server(port, status, mtls_secrets):
        assert (await pod.probe("livenessProbe") == 0) is alive
        assert (await pod.probe("startupProbe") == 0) is alive
        assert (await pod.probe("readinessProbe") == 0) is ready
