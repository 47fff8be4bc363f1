"""deploy/'s kustomizations in detail: every overlay renders with the agent hardened (security context,
probes, resources), the ConfigMap holds the whole configuration and the repository's playbooks,
secrets are referenced and never inline, and the agent's CiliumNetworkPolicy allows exactly what it
talks to. Schema validation of the rendered manifests is test_manifest_schemas.py; RBAC and the image
are tests/test_deploy.py."""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from agent.playbook.loader import check_directory
from agent.settings import Settings, build
from tests.support.kustomize import DEPLOY, OVERLAYS, generated, kubectl, one, render

ROOT = Path(__file__).resolve().parents[2]
SLACK_HOSTS = ("slack.com", "wss-primary.slack.com", "files.slack.com")  # Web API, Socket Mode, uploads


def agent_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(docs, "Deployment", "zonemedic")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["agent"]
    return containers[0]


def config_of(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], Settings]:
    data = yaml.safe_load(generated(docs, "zonemedic-config")["data"]["config.yaml"])
    return data, build(Settings, data)


def config_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields a config file may set: `secrets` comes from the environment, never a file."""
    return [f for f in dataclasses.fields(cls) if f.name != "secrets"]  # type: ignore[arg-type]


def missing_keys(cls: type, data: Any, prefix: str = "") -> list[str]:
    """Every setting of `cls` (recursively through its sections) that `data` does not spell out."""
    out: list[str] = []
    for f in config_fields(cls):
        key = f"{prefix}{f.name}"
        if not isinstance(data, dict) or f.name not in data:
            out.append(key)
            continue
        hint = cls.__annotations__[f.name]
        section = getattr(sys.modules[cls.__module__], str(hint), None)
        if dataclasses.is_dataclass(section):
            out.extend(missing_keys(section, data[f.name], f"{key}."))  # type: ignore[arg-type]
    return out


def mounts(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """mount path -> the volume mounted there."""
    spec = one(docs, "Deployment", "zonemedic")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: volumes[m["name"]]
            for m in agent_container(docs)["volumeMounts"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_every_part_in_the_agents_namespace(overlay: str) -> None:
    docs = render(overlay)
    kinds = {(d["kind"], d["metadata"]["name"].rpartition("-")[0] if d["kind"] == "ConfigMap"
              else d["metadata"]["name"]) for d in docs}
    assert kinds >= {
        ("Namespace", "zonemedic"), ("ServiceAccount", "zonemedic"),
        ("ClusterRole", "zonemedic"), ("ClusterRoleBinding", "zonemedic"),
        ("Role", "zonemedic-leader-election"), ("RoleBinding", "zonemedic-leader-election"),
        ("Deployment", "zonemedic"), ("Service", "zonemedic"),
        ("ConfigMap", "zonemedic-config"), ("ConfigMap", "zonemedic-playbooks"),
        ("PodDisruptionBudget", "zonemedic"), ("CiliumNetworkPolicy", "zonemedic"),
        ("PrometheusRule", "zonemedic"), ("MutatingWebhookConfiguration", "zonemedic"),
    }
    _, settings = config_of(docs)
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    for doc in docs:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == settings.leader_election.namespace, doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "zonemedic"


@pytest.mark.parametrize(
    ("overlay", "replicas", "extra"),
    [
        ("base", 2, set()),
        ("overlays/postgres", 2, {("CiliumNetworkPolicy", "zonemedic-database")}),
        ("overlays/sqlite", 1, {("PersistentVolumeClaim", "zonemedic-data")}),
    ],
)
def test_overlay_replicas_and_its_own_parts(overlay: str, replicas: int, extra: set[tuple[str, str]]) -> None:
    docs = render(overlay)
    base = {(d["kind"], d["metadata"]["name"]) for d in render("base")}
    here = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert here - base == extra
    assert one(docs, "Deployment")["spec"]["replicas"] == replicas
    _, settings = config_of(docs)
    assert settings.leader_election.enabled  # on everywhere: a rollout never has two leaders
    env = {e["name"] for e in agent_container(docs).get("env", [])}
    assert "ZONEMEDIC_LEADER_ELECTION__ENABLED" not in env


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_agent_runs_hardened_with_requests_and_limits(overlay: str) -> None:
    docs = render(overlay)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = agent_container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["serviceAccountName"] == "zonemedic"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not security.get("privileged", False)
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}, kind
    # every path the agent writes is a volume: its data and /tmp
    _, settings = config_of(docs)
    writable = {path for path, _ in mounts(docs).items()} - {
        m["mountPath"] for m in container["volumeMounts"] if m.get("readOnly")
    }
    assert writable == {settings.data_dir, "/tmp"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_port_and_shutdown_fit_the_agents_config(overlay: str) -> None:
    docs = render(overlay)
    _, settings = config_of(docs)
    container = agent_container(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": settings.http.port, "admission": settings.admission.port}
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert live["httpGet"] == {"path": "/healthz", "port": "http"}
    assert ready["httpGet"] == {"path": "/readyz", "port": "http"}
    # /readyz waits for the database up to http.database_timeout: the probe must wait longer
    margin = 1.0
    assert ready["timeoutSeconds"] >= settings.http.database_timeout.total_seconds() + margin
    # liveness restarts a pod only after it failed for longer than a lease takes to move
    assert live["periodSeconds"] * live["failureThreshold"] > (
        settings.leader_election.lease_duration.total_seconds()
    )
    # SIGTERM: the agent stops watches, finishes its step, releases the lease (<= 10 s), stops HTTP
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    service = one(docs, "Service", "zonemedic")
    assert service["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        (settings.http.port, "http"), (settings.admission.service_port, "admission")]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_drain_may_always_evict_but_never_both_replicas_at_once(overlay: str) -> None:
    docs = render(overlay)
    pdb = one(docs, "PodDisruptionBudget", "zonemedic")["spec"]
    deployment = one(docs, "Deployment")["spec"]
    assert pdb["selector"] == deployment["selector"]
    assert "minAvailable" not in pdb  # minAvailable 1 on one replica would block every drain
    assert pdb["maxUnavailable"] == 1


def test_the_config_spells_out_every_setting_and_the_manifests_agree_with_it() -> None:
    docs = render("base")
    data, settings = config_of(docs)
    assert missing_keys(Settings, data) == []
    text = (ROOT / "deploy" / "base" / "config.yaml").read_text()
    for section in (f.name for f in config_fields(Settings)):
        # documented: a comment line right above each top-level key or inside its section
        before = text.split(f"\n{section}:", 1)[0].rstrip().splitlines()[-1]
        block = text.split(f"\n{section}:", 1)[1].split("\n\n", 1)[0]
        assert before.startswith("#") or "#" in block, f"{section} is not documented"
    container = agent_container(docs)
    by_path = mounts(docs)
    config_arg = container["args"][container["args"].index("--config") + 1]
    assert by_path[str(Path(config_arg).parent)]["configMap"]["name"].startswith("zonemedic-config-")
    assert by_path[settings.playbooks_dir]["configMap"]["name"].startswith("zonemedic-playbooks-")
    assert settings.data_dir in by_path
    slack = by_path[str(Path(settings.slack.bot_token_file or "").parent)]
    assert slack["secret"]["secretName"] == "zonemedic-slack"
    for path in (settings.slack.signing_secret_file, settings.slack.app_token_file):
        assert str(Path(path or "").parent) == str(Path(settings.slack.bot_token_file or "").parent)
    lease_role = one(docs, "Role", "zonemedic-leader-election")
    named = [r for r in lease_role["rules"] if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[settings.leader_election.name]]
    assert lease_role["metadata"]["namespace"] == settings.leader_election.namespace


def test_the_database_url_comes_from_a_secret_except_on_sqlite() -> None:
    for overlay in ("base", "overlays/postgres"):
        env = {e["name"]: e for e in agent_container(render(overlay))["env"]}
        ref = env["ZONEMEDIC_DATABASE__URL"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("zonemedic-database", "url")
    postgres_ref = {e["name"]: e for e in agent_container(render("overlays/postgres"))["env"]}
    assert postgres_ref["ZONEMEDIC_DATABASE__URL"]["valueFrom"]["secretKeyRef"]["optional"] is False
    docs = render("overlays/sqlite")
    assert "env" not in agent_container(docs)
    _, settings = config_of(docs)
    assert settings.database.url.startswith(f"sqlite:///{settings.data_dir}/")
    claim = mounts(docs)[settings.data_dir]["persistentVolumeClaim"]["claimName"]
    assert one(docs, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert one(docs, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}


SECRET_LOOKING = re.compile(
    r"xox[abposr]-|xapp-|://[^/\s:@]+:[^/\s@]+@|-----BEGIN|password\s*[:=]\s*\S", re.IGNORECASE
)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_is_inline(overlay: str) -> None:
    docs = render(overlay)
    assert [d for d in docs if d["kind"] == "Secret"] == []
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for key, value in doc["data"].items():
                assert not SECRET_LOOKING.search(value), f"{doc['metadata']['name']}/{key}"
    for env in agent_container(docs).get("env", []):
        if re.search(r"TOKEN|SECRET|PASSWORD|DATABASE__URL", env["name"]):
            assert "value" not in env and "secretKeyRef" in env["valueFrom"], env["name"]
    _, settings = config_of(docs)
    assert settings.database.url.startswith("sqlite:")  # a server's URL (with credentials) is a Secret


def test_secret_looking_text_is_recognised() -> None:
    """The inline-secret check can fail: tokens and credentials in URLs are caught, paths are not."""
    assert SECRET_LOOKING.search("bot_token: xoxb-123")
    assert SECRET_LOOKING.search("url: postgresql+psycopg://zm:hunter2@db:5432/zm")
    assert not SECRET_LOOKING.search("bot_token_file: /etc/zonemedic/slack/bot-token")
    assert not SECRET_LOOKING.search("url: sqlite:////var/lib/zonemedic/zonemedic.db")


def playbook_files() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / "playbooks").glob("*.yaml"))}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_playbooks_configmap_is_the_repositorys_playbooks(overlay: str, tmp_path: Path) -> None:
    data = generated(render(overlay), "zonemedic-playbooks")["data"]
    assert data == playbook_files()
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    playbooks, errors = check_directory(tmp_path)
    assert errors == [] and len(playbooks) == len(data)


def test_the_playbook_generator_lists_every_playbook() -> None:
    kustomization = yaml.safe_load((ROOT / "playbooks" / "Kustomization").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert sorted(generator["files"]) == sorted(playbook_files())


def egress_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for d in docs if d["kind"] == "CiliumNetworkPolicy" for r in d["spec"].get("egress", [])]


def ports_of(rule: dict[str, Any]) -> set[tuple[int, str]]:
    return {(int(p["port"]), p["protocol"]) for tp in rule.get("toPorts", []) for p in tp["ports"]}


def fqdn_allows(rule: dict[str, Any], host: str) -> bool:
    for selector in rule.get("toFQDNs", []):
        if selector.get("matchName") == host:
            return True
        pattern = selector.get("matchPattern")
        # Cilium: `*` stands for any characters of one DNS label (`*.slack.com` is not slack.com)
        if pattern and fnmatch.fnmatchcase(host, pattern) and host.count(".") == pattern.count("."):
            return True
    return False


def test_the_agents_network_policy_allows_exactly_what_it_talks_to() -> None:
    docs = render("base")
    _, settings = config_of(docs)
    policy = one(docs, "CiliumNetworkPolicy", "zonemedic")["spec"]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["endpointSelector"]["matchLabels"].items() <= pod_labels.items()
    # ingress: the HTTP port only, from the kubelet (probes) and the monitoring namespace only
    # (Alertmanager's webhook, Prometheus' scrape); the admission webhook's port from the API
    # server only; never the whole cluster
    probes, monitoring, admission = policy["ingress"]
    assert admission == {"fromEntities": ["kube-apiserver"], "toPorts": [
        {"ports": [{"port": str(settings.admission.port), "protocol": "TCP"}]}]}
    assert probes == {"fromEntities": ["host"], "toPorts": [
        {"ports": [{"port": str(settings.http.port), "protocol": "TCP"}]}]}
    assert monitoring["fromEndpoints"] == [
        {"matchLabels": {"k8s:io.kubernetes.pod.namespace": namespace_of(settings)}}]
    assert ports_of(monitoring) == {(settings.http.port, "TCP")}
    egress = egress_rules(docs)
    # the API server, through the entity Cilium gives it
    (api,) = [r for r in egress if "toEntities" in r]
    assert api["toEntities"] == ["kube-apiserver"] and ports_of(api) <= {(443, "TCP"), (6443, "TCP")}
    # Prometheus, where the config points: <service>.<namespace>.svc:<port>
    url = urlsplit(settings.prometheus.url or "")
    namespace = (url.hostname or "").split(".")[1]
    (prometheus,) = [r for r in egress if any(
        e["matchLabels"].get("k8s:io.kubernetes.pod.namespace") == namespace
        for e in r.get("toEndpoints", []))]
    assert ports_of(prometheus) == {(url.port, "TCP")}
    # DNS: kube-dns on 53, through the DNS proxy (the toFQDNs rule learns addresses from it)
    (dns,) = [r for r in egress if any(
        e["matchLabels"].get("k8s:k8s-app") == "kube-dns" for e in r.get("toEndpoints", []))]
    assert ports_of(dns) == {(53, "UDP"), (53, "TCP")}
    assert all(tp["rules"]["dns"] for tp in dns["toPorts"])
    # Slack: every host the agent reaches, on 443 only
    slack_hosts = [*SLACK_HOSTS, *([urlsplit(settings.slack.api_url).hostname]
                                   if settings.slack.api_url else [])]
    (slack,) = [r for r in egress if "toFQDNs" in r]
    assert all(fqdn_allows(slack, h) for h in slack_hosts)
    assert not fqdn_allows(slack, "slack.com.evil.example") and not fqdn_allows(slack, "example.com")
    assert ports_of(slack) == {(443, "TCP")}
    assert len(egress) == 4  # nothing else


def namespace_of(settings: Settings) -> str:
    """The monitoring namespace: the one `prometheus.url` (<service>.<namespace>.svc) names."""
    return (urlsplit(settings.prometheus.url or "").hostname or "").split(".")[1]


def test_the_monitoring_namespace_is_a_patchable_label(tmp_path: Path) -> None:
    """The patch the policy's comment documents renders: another monitoring namespace, and an
    ingress controller's for Slack in HTTP mode, and nothing else changes."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "base", tmp_path)],  # kustomize: never absolute
        "patches": [{"target": {"kind": "CiliumNetworkPolicy", "name": "zonemedic"}, "patch": (
            "- op: replace\n"
            "  path: /spec/ingress/1/fromEndpoints/0/matchLabels/k8s:io.kubernetes.pod.namespace\n"
            "  value: observability\n"
            "- op: add\n  path: /spec/ingress/1/fromEndpoints/-\n"
            "  value: {matchLabels: {k8s:io.kubernetes.pod.namespace: ingress-nginx}}\n")}],
    }))
    out = subprocess.run([kubectl(), "kustomize", str(tmp_path)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    patched = one(docs, "CiliumNetworkPolicy", "zonemedic")["spec"]
    base = one(render("base"), "CiliumNetworkPolicy", "zonemedic")["spec"]
    assert [e["matchLabels"] for e in patched["ingress"][1]["fromEndpoints"]] == [
        {"k8s:io.kubernetes.pod.namespace": "observability"},
        {"k8s:io.kubernetes.pod.namespace": "ingress-nginx"}]
    assert patched["ingress"][0] == base["ingress"][0] and patched["egress"] == base["egress"]


def test_postgres_adds_egress_to_the_database_port_only() -> None:
    base = egress_rules(render("base"))
    added = [r for r in egress_rules(render("overlays/postgres")) if r not in base]
    assert [ports_of(r) for r in added] == [{(5432, "TCP")}]
    assert egress_rules(render("overlays/sqlite")) == base


def test_a_config_that_leaves_a_setting_out_is_caught() -> None:
    missing = missing_keys(Settings, {"http": {"port": 8080}, "slack": {}})
    assert "cluster_name" in missing and "http.host" in missing and "slack.enabled" in missing
    assert "http.port" not in missing and "diagnosis" in missing
