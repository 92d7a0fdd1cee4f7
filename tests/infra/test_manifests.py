"""Deployment files checked without a Docker engine or a cluster:

- every YAML file under infra/ parses;
- every Kubernetes manifest validates against the API schema of its kind, strictly
  (unknown fields fail), for the oldest and the newest Kubernetes we target, with the
  schemas the ``kubernetes-validate`` package ships (no network); the manifests agree
  with each other (selectors, ports, ConfigMap and Secret names; kustomization lists all);
- the kustomizations rendered (infra/k8s, and the opt-in overlay infra/k8s-ingress with
  its Ingress) keep the public edge closed: the gateway only behind a ClusterIP Service
  and a TLS Ingress, its API keys mounted from a Secret, no anonymous write, metrics on
  ports of their own, and a gateway memory limit that fits its byte budget;
- docker-compose.yml validates against the Compose Specification schema (vendored in
  tests/infra/schemas/, Apache-2.0, see NOTICE.compose-spec), every image is pinned, every
  service has a healthcheck;
- nginx.conf: ``nginx -t`` on a copy whose upstreams are 127.0.0.1 when Debian's nginx is
  installed (``nginx-light`` and ``libnginx-mod-stream``; CI fails without it), and a
  structural check always;
- the Dockerfile: FROM pinned to a version, no ``latest``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.images._recipes import IMAGES as LOCAL_IMAGES
from infra.images._recipes import environment as images_environment
from tests._unavailable import import_module, unavailable

# pyyaml, jsonschema and kubernetes-validate come with the dev extra; import_module keeps
# them typed as Any (no stub packages needed for mypy --strict).
DEV_EXTRA = "pip install -e '.[dev]'"
yaml = import_module("yaml", DEV_EXTRA)

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
K8S = INFRA / "k8s"
K8S_INGRESS = INFRA / "k8s-ingress"  # the opt-in overlay: the base and an Ingress
COMPOSE = INFRA / "docker-compose.yml"
NGINX_CONF = INFRA / "nginx" / "nginx.conf"
DOCKERFILE = INFRA / "Dockerfile"
SCHEMAS = Path(__file__).parent / "schemas"

#: The oldest Kubernetes the manifests target, and the newest whose schemas are shipped.
K8S_FLOOR = "1.29.0"

Doc = dict[str, Any]


def load_all(path: Path) -> list[Doc]:
    documents = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    return [d for d in documents if d is not None]


def yaml_files() -> list[Path]:
    return sorted(p for p in INFRA.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def k8s_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def overlay_files() -> list[Path]:
    return sorted(p for p in K8S_INGRESS.glob("*.yaml") if p.name != "kustomization.yaml")


def k8s_objects() -> list[tuple[str, Doc]]:
    return [
        (f"{p.name}#{i}", d)
        for p in [*k8s_files(), *overlay_files()]
        for i, d in enumerate(load_all(p))
    ]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- YAML -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", yaml_files(), ids=rel)
def test_yaml_parses(path: Path) -> None:
    documents = load_all(path)
    assert documents, f"{rel(path)} is empty"
    for document in documents:
        assert isinstance(document, dict), f"{rel(path)}: a document is not a mapping"


# --- Kubernetes -------------------------------------------------------------------------


def _k8s_versions() -> list[str]:
    kubernetes_validate = import_module("kubernetes_validate", DEV_EXTRA)
    latest = str(kubernetes_validate.latest_version())
    return [K8S_FLOOR] if latest == K8S_FLOOR else [K8S_FLOOR, latest]


@pytest.mark.parametrize(("name", "document"), k8s_objects(), ids=[n for n, _ in k8s_objects()])
def test_k8s_manifest_validates_against_its_schema(name: str, document: Doc) -> None:
    kubernetes_validate = import_module("kubernetes_validate", DEV_EXTRA)
    for version in _k8s_versions():
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} ({document.get('kind')}) against Kubernetes {version}:\n{exc}")


def test_the_validator_rejects_an_unknown_field() -> None:
    kubernetes_validate = import_module("kubernetes_validate", DEV_EXTRA)
    bad = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "x"},
        "spec": {"maxUnavailable": 1, "maxUnavailabel": 2},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_FLOOR, strict=True)


def test_kustomization_lists_every_manifest_and_only_existing_files() -> None:
    (kustomization,) = load_all(K8S / "kustomization.yaml")
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources)), "a resource is listed twice"
    assert {r for r in resources if not (K8S / r).is_file()} == set()
    assert set(resources) == {p.name for p in k8s_files()}


def _objects(kind: str) -> list[Doc]:
    return [d for _, d in k8s_objects() if d.get("kind") == kind]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_object_is_namespaced_and_labelled() -> None:
    for name, document in k8s_objects():
        metadata = document["metadata"]
        assert metadata.get("labels", {}).get("app.kubernetes.io/name") == "shoal", name
        if document["kind"] != "Namespace":
            assert metadata.get("namespace") == "shoal", name
    assert [n["metadata"]["name"] for n in _objects("Namespace")] == ["shoal"]


def test_services_and_budgets_select_pods_of_a_deployment_with_their_ports() -> None:
    templates = [d["spec"]["template"] for d in _objects("Deployment")]
    for service in _objects("Service"):
        selector = service["spec"]["selector"]
        pods = [t for t in templates if _matches(selector, t["metadata"]["labels"])]
        assert pods, f"Service {service['metadata']['name']} selects no Deployment's pods"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for pod in pods:
                ports = [p for c in pod["spec"]["containers"] for p in c.get("ports", [])]
                assert any(target in (p.get("name"), p["containerPort"]) for p in ports), (
                    f"Service {service['metadata']['name']}: no container port {target!r}"
                )
    for budget in _objects("PodDisruptionBudget"):
        selector = budget["spec"]["selector"]["matchLabels"]
        assert any(_matches(selector, t["metadata"]["labels"]) for t in templates), (
            f"PodDisruptionBudget {budget['metadata']['name']} selects no Deployment's pods"
        )
    for deployment in _objects("Deployment"):
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert _matches(selector, deployment["spec"]["template"]["metadata"]["labels"])


def test_config_and_secret_references_name_objects_of_the_kustomization() -> None:
    config_maps = {d["metadata"]["name"] for d in _objects("ConfigMap")}
    secrets = {d["metadata"]["name"] for d in _objects("Secret")}
    for deployment in _objects("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps
                if "secretRef" in source:
                    ref = source["secretRef"]
                    assert ref.get("optional") or ref["name"] in secrets
            assert container["image"].split(":")[-1] not in ("", "latest")
            assert ":" in container["image"], f"{container['name']}: image without a tag"


def test_the_ingress_overlay_adds_only_its_ingress_to_the_base() -> None:
    (kustomization,) = load_all(K8S_INGRESS / "kustomization.yaml")
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["resources"] == ["../k8s", *(p.name for p in overlay_files())]
    assert [d["kind"] for p in overlay_files() for d in load_all(p)] == ["Ingress"]


# --- the kustomizations rendered: the public edge ---------------------------------------

KUSTOMIZATIONS = {"base": K8S, "ingress": K8S_INGRESS}
_RENDERED_KEYS = {"apiVersion", "kind", "resources", "images"}


def render_here(directory: Path) -> list[Doc]:
    """``kustomize build directory`` for what these kustomizations use, in Python: their
    resources (files, and directories of their own kustomization) and ``images`` (newName,
    newTag). Anything else fails here rather than render wrong. Checked against kustomize
    itself where it is installed (``test_rendering_here_agrees_with_kustomize``)."""
    (kustomization,) = load_all(directory / "kustomization.yaml")
    unknown = set(kustomization) - _RENDERED_KEYS
    assert not unknown, f"{rel(directory)} uses {sorted(unknown)}: not rendered here"
    documents: list[Doc] = []
    for resource in kustomization["resources"]:
        path = (directory / resource).resolve()
        documents += render_here(path) if path.is_dir() else load_all(path)
    for image in kustomization.get("images", []):
        for document in documents:
            for container in _containers(document):
                name, _, tag = container["image"].partition(":")
                if name == image["name"]:
                    container["image"] = (
                        f"{image.get('newName', name)}:{image.get('newTag', tag)}".rstrip(":")
                    )
    return documents


def _containers(document: Doc) -> list[Doc]:
    spec = document.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("containers", []), *spec.get("initContainers", [])]


def _kustomize() -> list[str] | None:
    """The command that renders a kustomization, if one is installed: the pinned one
    ``infra/local/install.sh kustomize`` builds first."""
    cache = Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")
    if (pinned := cache / "bin" / "kustomize").is_file():
        return [str(pinned), "build"]
    if kustomize := shutil.which("kustomize"):
        return [kustomize, "build"]
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize"]
    return None


def _render_with(command: list[str], directory: Path) -> list[Doc]:
    done = subprocess.run(
        [*command, str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def _by_identity(documents: list[Doc]) -> dict[tuple[str, str, str], Doc]:
    keyed = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in documents
    }
    assert len(keyed) == len(documents), "an object is rendered twice"
    return keyed


def render(directory: Path) -> list[Doc]:
    """A kustomization as applied: by kustomize where installed, else ``render_here``."""
    command = _kustomize()
    return render_here(directory) if command is None else _render_with(command, directory)


@pytest.fixture(scope="module", params=sorted(KUSTOMIZATIONS))
def rendered(request: pytest.FixtureRequest) -> list[Doc]:
    return render(KUSTOMIZATIONS[request.param])


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_rendering_here_agrees_with_kustomize(name: str) -> None:
    command = _kustomize()
    if command is None:
        unavailable("kustomize is not installed (bash infra/local/install.sh kustomize)")
    directory = KUSTOMIZATIONS[name]
    assert _by_identity(render_here(directory)) == _by_identity(_render_with(command, directory))


def _of_kind(documents: list[Doc], kind: str) -> list[Doc]:
    return [d for d in documents if d["kind"] == kind]


def _component(documents: list[Doc], kind: str, component: str) -> list[Doc]:
    return [
        d
        for d in _of_kind(documents, kind)
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert match, f"memory {quantity!r}: give it in Ki, Mi or Gi"
    return int(match.group(1)) * units[match.group(2)]


def test_no_gateway_is_exposed_but_through_a_cluster_ip_service(rendered: list[Doc]) -> None:
    for service in _of_kind(rendered, "Service"):
        kind = service["spec"].get("type", "ClusterIP")
        assert kind not in ("LoadBalancer", "NodePort"), (
            f"Service {service['metadata']['name']} is a {kind}: the edge is the Ingress"
        )
    (gateway,) = _component(rendered, "Service", "gateway")
    assert gateway["spec"]["type"] == "ClusterIP"
    assert [p["targetPort"] for p in gateway["spec"]["ports"]] == ["ingest"]


def test_the_gateway_reads_its_api_keys_from_a_mounted_secret(rendered: list[Doc]) -> None:
    (deployment,) = _component(rendered, "Deployment", "gateway")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    keys_file = Path(_env(container)["SHOAL_GATEWAY_API_KEYS_FILE"])
    (mount,) = [m for m in container["volumeMounts"] if keys_file.parent == Path(m["mountPath"])]
    assert "subPath" not in mount, "a subPath mount never sees the Secret change"
    assert mount.get("readOnly") is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert not secret.get("optional"), "no Secret, no gateway"
    assert [i["path"] for i in secret.get("items", [])] in ([], [keys_file.name])
    secrets = {d["metadata"]["name"]: d for d in _of_kind(rendered, "Secret")}
    keys = json.loads(secrets[secret["secretName"]]["stringData"][keys_file.name])
    assert keys == {"version": 1, "keys": []}, "the example holds no key"


def test_no_manifest_lets_anyone_write_without_a_key(rendered: list[Doc]) -> None:
    for path in [*K8S.rglob("*"), *K8S_INGRESS.rglob("*")]:
        if path.is_file():
            assert "ALLOW_ANONYMOUS" not in path.read_text(encoding="utf-8"), rel(path)
    for document in rendered:
        for container in _containers(document):
            assert "SHOAL_GATEWAY_ALLOW_ANONYMOUS" not in _env(container)
        assert "SHOAL_GATEWAY_ALLOW_ANONYMOUS" not in document.get("data", {})
        assert "SHOAL_GATEWAY_ALLOW_ANONYMOUS" not in document.get("stringData", {})


def test_the_ingress_overlay_serves_the_gateway_over_tls_only() -> None:
    assert _of_kind(render(K8S), "Ingress") == [], "the Ingress is an opt-in overlay"
    rendered = render(K8S_INGRESS)
    (ingress,) = _of_kind(rendered, "Ingress")
    spec = ingress["spec"]
    (tls,) = spec["tls"]
    assert tls["secretName"] and tls["hosts"]
    gateway = {d["metadata"]["name"] for d in _component(rendered, "Service", "gateway")}
    for rule in spec["rules"]:
        assert rule["host"] in tls["hosts"], f"{rule['host']} is served without TLS"
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] in gateway and backend["port"] == {"name": "ingest"}
            assert path["path"].startswith("/v1/"), "only the ingest API is public"


def test_every_deployment_serves_metrics_on_a_port_of_its_own(rendered: list[Doc]) -> None:
    deployments = _of_kind(rendered, "Deployment")
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments} == {
        "gateway",
        "handler",
        "leader",
    }
    for deployment in deployments:
        role = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        template = deployment["spec"]["template"]
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        env = _env(container)
        metrics = ports["metrics"]
        assert [n for n, p in ports.items() if p == metrics] == ["metrics"], role
        assert env[f"SHOAL_{role.upper()}_METRICS_PORT"] == str(metrics)
        assert env[f"SHOAL_{role.upper()}_METRICS_HOST"] == "0.0.0.0"
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(metrics), role
        assert annotations["prometheus.io/path"] == "/metrics"
    for service in _of_kind(rendered, "Service"):  # the public ones name no metrics port
        if service["spec"].get("clusterIP") != "None":
            assert "metrics" not in {p["targetPort"] for p in service["spec"]["ports"]}


# The gateway's resident memory at rest and what it held past its reservations in the
# burst of tests/e2e/test_gateway_edge.py (60 bodies of 4 MiB at once): 85 and 55 MiB at
# the most measured.
GATEWAY_IDLE_MIB = 85
GATEWAY_PAST_BUDGET_MIB = 55


def test_the_gateway_memory_limit_fits_its_byte_budget(rendered: list[Doc]) -> None:
    (deployment,) = _component(rendered, "Deployment", "gateway")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    budget = int(_env(container)["SHOAL_GATEWAY_MAX_BYTES_IN_FLIGHT"]) / (1 << 20)
    limit = _mebibytes(container["resources"]["limits"]["memory"])
    needed = budget + GATEWAY_IDLE_MIB + GATEWAY_PAST_BUDGET_MIB
    assert limit >= needed * 1.25, f"{limit} MiB leaves no headroom over {needed} MiB"


# --- docker compose -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> Doc:
    """The compose file as compose reads it with no variable set: every ``${NAME:-default}``
    (an image, a host port, a backend) is its default, the upstream image."""
    text = re.sub(r"\$\{[A-Z0-9_]+:?-([^}]*)\}", r"\1", COMPOSE.read_text(encoding="utf-8"))
    (document,) = [d for d in yaml.safe_load_all(text) if d is not None]
    assert isinstance(document, dict)
    return document


def test_compose_validates_against_the_compose_specification(compose: Doc) -> None:
    Draft202012Validator = import_module("jsonschema", DEV_EXTRA).Draft202012Validator

    schema = json.loads((SCHEMAS / "compose-spec.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    errors = sorted(
        Draft202012Validator(schema).iter_errors(compose), key=lambda e: list(e.absolute_path)
    )
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
    )


def test_the_compose_schema_rejects_an_unknown_service_key(compose: Doc) -> None:
    Draft202012Validator = import_module("jsonschema", DEV_EXTRA).Draft202012Validator

    schema = json.loads((SCHEMAS / "compose-spec.json").read_text(encoding="utf-8"))
    broken = {**compose, "services": {"x": {"image": "redis:7.4.2", "healthchek": {}}}}
    assert not Draft202012Validator(schema).is_valid(broken)


def _tag(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    return name.split(":", 1)[1] if ":" in name else ""


def _version(tag: str) -> tuple[int, ...]:
    match = re.match(r"v?(\d+(?:\.\d+)+)", tag)
    assert match, f"tag {tag!r} is not a version"
    return tuple(int(x) for x in match.group(1).split("."))


def test_every_compose_image_is_pinned_to_a_version(compose: Doc) -> None:
    images = {name: s.get("image") for name, s in compose["services"].items()}
    for name, image in images.items():
        assert image, f"service {name} has no image"
        tag = _tag(image)
        assert tag and tag != "latest", f"service {name}: image {image!r} is not pinned"
        # MinIO's releases are dated tags (RELEASE.2025-04-22T22-12-26Z), never moved.
        release = re.fullmatch(r"RELEASE\.\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z", tag)
        assert "@" in image or release or re.match(r"v?\d+\.\d+\.\d+", tag), f"{name}: {image!r}"

    def versions(prefix: str) -> set[tuple[int, ...]]:
        return {_version(_tag(i)) for i in images.values() if i.startswith(prefix)}

    assert versions("nats:") and min(versions("nats:")) >= (2, 10, 29)
    (etcd,) = versions("quay.io/coreos/etcd:")
    assert etcd >= (3, 5, 17), "etcd 3.5.0-3.5.2 are not to be used; 3.5.17 or later"
    assert versions("redis:") == {(7, 4, 2)}
    assert versions("apache/kafka:") == {(4, 1, 2)}, "the Kafka infra/local and the images run"
    (nginx,) = versions("nginx:")
    assert nginx[:2] == (1, 27) and nginx >= (1, 27, 3), "`resolve` needs nginx >= 1.27.3"


def test_compose_services_have_healthchecks_and_known_dependencies(compose: Doc) -> None:
    services = compose["services"]
    awaited = {  # one-shot jobs others wait for to finish: done, not healthy
        dependency
        for service in services.values()
        for dependency, condition in service.get("depends_on", {}).items()
        if condition.get("condition") == "service_completed_successfully"
    }
    for name, service in services.items():
        if name in awaited:
            assert service.get("restart") == "no", f"one-shot job {name} must not restart"
        else:
            assert "test" in service.get("healthcheck", {}), f"service {name} has no healthcheck"
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"


def test_compose_runs_the_shoal_roles_from_one_image(compose: Doc) -> None:
    services = compose["services"]
    roles: dict[str, list[str]] = {}
    for name, service in services.items():
        if service["image"].startswith("shoal:") and name != "minio-init":
            assert service["build"] == {"context": "..", "dockerfile": "infra/Dockerfile"}
            environment = service["environment"]
            assert environment["SHOAL_ETCD_ENDPOINTS"] == "etcd:2379"
            assert all(key.startswith("SHOAL_") for key in environment), name
            roles.setdefault(service["command"][0], []).append(name)
    assert {r: len(n) for r, n in roles.items()} == {
        "gateway": 2,
        "leader": 2,
        "handler": 3,
        "devices": 1,
    }
    (devices,) = roles["devices"]
    command = services[devices]["command"]
    for flag in ("--gateway", "--projects", "--rate"):
        assert flag in command
    assert command[command.index("--gateway") + 1] == "http://nginx:8080"
    ids = [
        services[n]["environment"].get(f"SHOAL_{r.upper()}_ID")
        for r, names in roles.items()
        if r != "devices"
        for n in names
    ]
    assert len(ids) == len(set(ids)) and None not in ids, "every member needs its own id"


def test_compose_gateways_need_keys_or_are_reached_from_this_host_only(compose: Doc) -> None:
    """Each gateway has API keys or opts in to none explicitly; with one that has none, no
    port of the stack is published beyond 127.0.0.1."""
    services = compose["services"]
    gateways = [s for s in services.values() if s.get("command", [""])[0] == "gateway"]
    assert gateways
    anonymous = False
    for gateway in gateways:
        environment = gateway["environment"]
        keys = environment.get("SHOAL_GATEWAY_API_KEYS_FILE")
        opt_in = environment.get("SHOAL_GATEWAY_ALLOW_ANONYMOUS") == "true"
        assert bool(keys) != opt_in, "a gateway needs keys, or the explicit opt-in alone"
        anonymous |= opt_in
    if anonymous:
        for name, service in services.items():
            for port in service.get("ports", []):
                assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} to all"


def test_compose_mounts_the_nginx_config_that_exists(compose: Doc) -> None:
    (mount,) = compose["services"]["nginx"]["volumes"]
    source, target, _ = mount.split(":")
    assert (COMPOSE.parent / source).resolve() == NGINX_CONF
    assert target == "/etc/nginx/nginx.conf"


# --- nginx --------------------------------------------------------------------------------


def _nginx_text() -> str:
    return NGINX_CONF.read_text(encoding="utf-8")


def _upstreams(text: str) -> dict[str, list[str]]:
    blocks = re.findall(r"upstream\s+(\w+)\s*\{(.*?)\}", text, flags=re.S)
    return {name: re.findall(r"^\s*server\s+(\S+)", body, flags=re.M) for name, body in blocks}


def test_nginx_is_stream_only_and_balances_the_compose_services(compose: Doc) -> None:
    text = _nginx_text()
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert code.count("{") == code.count("}")
    assert re.search(r"^stream\s*\{", code, flags=re.M), "no stream (L4) block"
    assert not re.search(r"^\s*http\s*\{", code, flags=re.M), "L4 only: no http block"
    upstreams = _upstreams(code)
    assert upstreams["shoal_gateways"] == ["gateway-1:8080", "gateway-2:8080"]
    assert upstreams["shoal_leaders"] == ["leader-1:8090", "leader-2:8090"]
    for servers in upstreams.values():
        for server in servers:
            host, _port = server.split(":")
            assert host in compose["services"], f"upstream {host} is not a compose service"
    listens = re.findall(r"^\s*listen\s+(\d+)\s*;", code, flags=re.M)
    published = {p.split(":")[-2] for p in compose["services"]["nginx"]["ports"]}
    assert set(listens) == published == {"8080", "8090"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _nginx() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).is_file()), None
    )


@pytest.fixture
def nginx_copy(tmp_path: Path) -> Iterator[Path]:
    """The config with 127.0.0.1 upstreams and free loopback ports, for a local nginx.

    Debian's nginx (1.22) predates the ``resolve`` server parameter (1.27.3), so it is
    dropped from the copy; its stream module is dynamic, so the copy loads it."""
    text = _nginx_text()
    text = re.sub(r"^(\s*server\s+)[\w.-]+(:\d+)", r"\g<1>127.0.0.1\2", text, flags=re.M)
    text = re.sub(r"\s+resolve(?=[\s;])", "", text)
    text = re.sub(
        r"^(\s*listen\s+)\d+\s*;",
        lambda m: f"{m.group(1)}127.0.0.1:{_free_port()};",
        text,
        flags=re.M,
    )
    module = Path("/usr/lib/nginx/modules/ngx_stream_module.so")
    if module.is_file():
        text = f"load_module {module};\n" + text
    (tmp_path / "logs").mkdir()
    copy = tmp_path / "nginx.conf"
    copy.write_text(text, encoding="utf-8")
    yield copy


def test_nginx_accepts_the_config(nginx_copy: Path) -> None:
    nginx = _nginx()
    if nginx is None:
        unavailable("nginx is not installed (apt-get install nginx-light libnginx-mod-stream)")
    prefix = nginx_copy.parent
    done = subprocess.run(
        [
            nginx,
            "-t",
            "-p",
            str(prefix),
            "-c",
            str(nginx_copy),
            "-e",
            str(prefix / "logs" / "error.log"),
            "-g",
            f"pid {prefix / 'nginx.pid'};",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "test is successful" in done.stderr


# --- Dockerfile ---------------------------------------------------------------------------


def test_dockerfile_bases_are_pinned_and_it_runs_shoal_as_non_root() -> None:
    lines = [
        line.strip()
        for line in DOCKERFILE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    defaults = dict(
        line.split(None, 1)[1].split("=", 1)
        for line in lines
        if line.upper().startswith("ARG ") and "=" in line
    )
    bases = [line.split()[1] for line in lines if line.upper().startswith("FROM ")]
    assert bases, "no FROM"
    # The base is an argument (infra/images/build passes a local one) whose default is
    # the upstream image, pinned literally.
    bases = [defaults.get(base.strip("${}"), base) for base in bases]
    for base in bases:
        assert "$" not in base, f"FROM {base}: give its argument a pinned default"
        tag = _tag(base)
        assert tag and tag != "latest" and "latest" not in base, f"FROM {base} is not pinned"
        assert re.match(r"3\.11\.\d+-slim", tag), f"FROM {base}: python:3.11.X-slim expected"
    assert len(set(bases)) == 1, "build and runtime stages must share the same base"
    assert 'ENTRYPOINT ["shoal"]' in lines
    users = [line for line in lines if line.upper().startswith("USER ")]
    assert users and users[-1].split()[1].split(":")[0] not in ("0", "root")
    # The context filter starts from nothing and lets in only what the image installs.
    ignore = [
        line.strip()
        for line in (INFRA / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"
    copied = re.findall(r"^COPY\s+(?!--from)(.+)\s+\S+$", "\n".join(lines), flags=re.M)
    for sources in copied:
        for source in sources.split():
            assert f"!{source.rstrip('/')}" in {i.rstrip("/") for i in ignore}, source


def test_every_compose_image_is_a_variable_the_local_builds_fill() -> None:
    """compose names every image by a variable whose default is upstream; infra/images sets
    the same variables to the images it builds, and agrees on the upstream defaults."""
    images = dict(re.findall(r"image: \$\{([A-Z0-9_]+):-([^}]+)\}", COMPOSE.read_text("utf-8")))
    assert set(images) == set(images_environment())
    for image in LOCAL_IMAGES:
        assert images[image.variable] == image.upstream, image.name
