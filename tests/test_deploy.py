"""deploy/: the kustomize overlays render, the shipped config is valid, RBAC grants only what is
needed, and the image (deploy/Dockerfile with .dockerignore) gets the agent without the twin, the
fakes and the demo, which the wheel keeps.
What each overlay renders in detail is tests/deploy/test_kustomize.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.model.descriptor import OwnerMove
from agent.model.workload import KUEUE_WORKLOAD, OWNERS, WORKLOADS
from agent.settings import Settings, build
from tests.support import image

ROOT = Path(__file__).resolve().parents[1]
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def render(overlay: str) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / "deploy" / overlay)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@needs_kubectl
@pytest.mark.parametrize("overlay", ["base", "overlays/sqlite", "overlays/postgres"])
def test_overlay_renders_with_the_agent_and_its_config(overlay: str) -> None:
    docs = render(overlay)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "zonemedic") in kinds
    assert ("ClusterRole", "zonemedic") in kinds
    config = next(d for d in docs if d["metadata"]["name"].startswith("zonemedic-config-"))
    settings = build(Settings, yaml.safe_load(config["data"]["config.yaml"]))
    assert settings.http.port == 8080
    assert settings.leader_election.namespace == "zonemedic"
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == settings.leader_election.namespace


# every training kind of the workload table (Kubeflow's, TrainJob, JobSet): read, and patched to
# suspend, correct and resume
TRAINING = tuple((w.group, w.plural) for w in WORKLOADS)
TRAINJOB_CRD = ("apiextensions.k8s.io", "customresourcedefinitions")  # read by name only
READ = ("get", "list", "watch")
WATCH = ("list", "watch")  # what the cache needs; no single reads
# a generic group's owner kinds: watched; read, patched (rollout) or recreated when they move
OWNER_VERBS = {OwnerMove.ROLLOUT: (*READ, "patch"), OwnerMove.RECREATE: (*READ, "create", "delete"),
               OwnerMove.THROUGH_OWNER: WATCH}  # fmt: skip


@needs_kubectl
def test_cluster_role_writes_only_what_remediation_needs() -> None:
    role = next(d for d in render("base") if d["kind"] == "ClusterRole")
    write_verbs = {"create", "update", "patch", "delete", "deletecollection"}
    writes = {
        (group, resource, verb)
        for rule in role["rules"]
        for verb in sorted(write_verbs & set(rule["verbs"]))
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert writes == {
        ("apps", "deployments", "patch"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        *{(group, plural, "patch") for group, plural in TRAINING},
        # the Kueue fix: the Workload deactivated, then deleted so Kueue rebuilds it
        (KUEUE_WORKLOAD.group, KUEUE_WORKLOAD.plural, "patch"),
        (KUEUE_WORKLOAD.group, KUEUE_WORKLOAD.plural, "delete"),
        # the admission webhook's own certificate: its CA patched into its own configuration
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
    }
    (webhooks,) = [rule for rule in role["rules"]
                   if "mutatingwebhookconfigurations" in rule["resources"]]
    assert webhooks["resourceNames"] == ["zonemedic"] and webhooks["verbs"] == ["patch"]
    readable = {r for rule in role["rules"] for r in rule["resources"]}
    assert "secrets" not in readable and "leases" not in readable
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in role["rules"])


@pytest.mark.parametrize(
    ("dockerignore", "path", "ignored"),
    [
        ("agent/twin", "agent/twin/cluster.py", True),  # a directory covers what is under it
        ("agent/twin", "agent/twins.py", False),
        ("agent/twin", "tests/agent/twin/x.py", False),  # patterns start at the context root
        ("/agent/twin/", "agent/twin/scenarios/a.yaml", True),  # cleaned like Docker does
        ("**/__pycache__", "agent/model/__pycache__/job.cpython-311.pyc", True),
        ("**/__pycache__", "__pycache__/x.pyc", True),
        ("*.db", "zm.db", True),
        ("*.db", "data/zm.db", False),  # `*` stays within one path element
        ("agent/*.py", "agent/model/job.py", False),
        ("agent/?li.py", "agent/cli.py", True),
        ("agent/[a-c]li.py", "agent/cli.py", True),
        ("agent/[^c]li.py", "agent/cli.py", False),
        ("tests\n!tests/keep.py", "tests/keep.py", False),  # the last matching pattern wins
        ("!tests/keep.py\ntests", "tests/keep.py", True),
        ("# agent\n\n  ", "agent/cli.py", False),
    ],
)
def test_dockerignore_patterns_match_as_docker_does(dockerignore: str, path: str, ignored: bool) -> None:
    assert image.ignored(path, image.parse_dockerignore(dockerignore)) is ignored


# The agent's packages that are in the wheel (the demo runs them) but not in the production image.
NOT_IN_THE_IMAGE = ("twin", "fakes", "rig", "demo")


def test_the_image_gets_the_agent_without_the_twin_the_fakes_and_the_demo() -> None:
    assert (ROOT / "agent" / "twin" / "cluster.py").exists()  # the twin is in the repo (and wheel)
    assert (ROOT / "agent" / "fakes" / "slack.py").exists()  # so is the fake Slack
    files = image.context_files(ROOT / "deploy" / "Dockerfile", ROOT)
    assert [f for f in files if f.startswith(tuple(f"agent/{d}/" for d in NOT_IN_THE_IMAGE))] == []
    agent_files = {f for f in files if f.startswith("agent/")}
    in_repo = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "agent").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
        and p.relative_to(ROOT / "agent").parts[0] not in NOT_IN_THE_IMAGE
    }
    assert agent_files == in_repo  # everything else of the agent is there
    assert files["agent/cli.py"] == "/src/agent/cli.py"
    assert files["pyproject.toml"] == "/src/pyproject.toml"
    assert files["migrations/env.py"] == "/src/migrations/env.py"
    assert files["playbooks/zone-split.yaml"] == "/etc/zonemedic/playbooks/zone-split.yaml"
    assert not [f for f in files if f.startswith(("tests/", ".git/", ".venv/"))]


def test_the_dockerfile_refuses_a_context_that_holds_what_the_image_leaves_out() -> None:
    """The build's guard names exactly the directories .dockerignore leaves out (a build from
    another context, without that .dockerignore, stops instead of shipping the twin or a fake)."""
    (guard,) = [
        line for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
        if line.startswith("RUN for d in ")
    ]
    guarded = guard.removeprefix("RUN for d in ").partition(";")[0].split()
    assert guarded == [f"agent/{d}" for d in NOT_IN_THE_IMAGE]
    patterns = image.parse_dockerignore((ROOT / ".dockerignore").read_text())
    assert all(image.ignored(f"{d}/__init__.py", patterns) for d in guarded)


def test_the_wheel_keeps_the_twin_the_fakes_and_the_demo() -> None:
    """`zonemedic demo` runs from the wheel: its packages, and the twin and fakes it runs, are
    found by the package rule in pyproject.toml (each is a regular package with __init__.py)."""
    setuptools = pytest.importorskip("setuptools")
    rule = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = set(setuptools.find_packages(where=str(ROOT), include=rule["find"]["include"]))
    assert {f"agent.{d}" for d in NOT_IN_THE_IMAGE} <= packages
    assert "agent.chatops" in packages and not any(p.startswith("tests") for p in packages)


# Run the CLI from the current directory only: the editable install of this checkout (a finder on
# sys.meta_path that would find the repository's agent/twin) is not in the image, so drop it.
AS_IN_THE_IMAGE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not f.__module__.startswith("__editable__")]
if sys.argv[1:] == ["--where"]:
    import agent
    print(agent.__file__)
    sys.exit(0)
from agent.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_agent_of_the_image_runs_without_the_twin(tmp_path: Path) -> None:
    """The image's agent files alone (copied as the Dockerfile copies them): the CLI starts, offers
    no twin command, and diagnoses a snapshot."""
    files = image.context_files(ROOT / "deploy" / "Dockerfile", ROOT)
    src = tmp_path / "src"
    for rel, dest in files.items():
        if dest.startswith("/src/agent/"):
            target = src / dest.removeprefix("/src/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, target)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", AS_IN_THE_IMAGE, *args],
            cwd=src, capture_output=True, text=True, timeout=60, check=False,
        )

    where = cli("--where")
    assert where.stdout.strip() == str(src / "agent" / "__init__.py")  # not the repository's
    help_ = cli("--help")
    assert help_.returncode == 0, help_.stderr
    assert "diagnose" in help_.stdout and "twin" not in help_.stdout and "demo" not in help_.stdout
    twin = cli("twin", "up")
    assert twin.returncode == 2 and "invalid choice: 'twin'" in twin.stderr
    assert "Traceback" not in twin.stderr
    diagnosed = cli(
        "diagnose", "--snapshot", str(ROOT / "examples" / "split-blocked.yaml"),
        "--config", str(ROOT / "examples" / "split-blocked.config.yaml"), "--output", "json",
    )
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert "zone_split_blocked" in diagnosed.stdout


AGENT_USES = [
    # what the agent reads (list + watch for the cache, get for the remediator's re-reads)
    *[(verb, "", "pods", "ml", "") for verb in WATCH],
    *[(verb, "", "namespaces", "ml", "") for verb in READ],
    *[(verb, "", "nodes", "", "") for verb in WATCH],
    *[(verb, "networking.k8s.io", "networkpolicies", "ml", "") for verb in WATCH],
    *[(verb, "cilium.io", "ciliumnetworkpolicies", "ml", "") for verb in WATCH],
    *[(verb, "cilium.io", "ciliumclusterwidenetworkpolicies", "", "") for verb in WATCH],
    # Cilium's identity label filter, by name only
    *[(verb, "", "configmaps", "kube-system", "cilium-config") for verb in READ],
    *[(verb, group, plural, "ml", "") for verb in (*READ, "patch") for group, plural in TRAINING],
    # which override field the installed Kubeflow Trainer serves
    ("get", *TRAINJOB_CRD, "", "trainjobs.trainer.kubeflow.org"),
    *[(verb, o.group, o.plural, "ml", "") for o in OWNERS for verb in OWNER_VERBS[o.move]],
    # its own Lease
    ("get", "coordination.k8s.io", "leases", "zonemedic", "zonemedic-leader"),
    ("update", "coordination.k8s.io", "leases", "zonemedic", "zonemedic-leader"),
    ("create", "coordination.k8s.io", "leases", "zonemedic", ""),
    # the admission webhook's CA, into its own configuration only
    ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "zonemedic"),
]

AGENT_NEVER = [
    ("create", "", "events", "ml", ""),  # the timeline is in the store, not in Kubernetes events
    ("get", "", "pods", "ml", "resnet-worker-0"),  # pods, nodes, policies: listed, never read one
    ("get", "", "nodes", "", "node-1"),
    ("get", "", "secrets", "ml", ""),
    ("list", "", "configmaps", "ml", ""),
    ("list", "", "configmaps", "kube-system", ""),  # only by name: fieldSelector metadata.name
    ("get", "", "configmaps", "kube-system", "kubeadm-config"),
    ("patch", "", "configmaps", "kube-system", "cilium-config"),
    ("delete", "", "pods", "ml", "resnet-worker-0"),
    ("create", "", "pods", "ml", ""),
    ("patch", "", "nodes", "", "node-1"),
    ("patch", "", "pods", "ml", "resnet-worker-0"),
    ("patch", "", "events", "ml", "e"),
    ("list", *TRAINJOB_CRD, "", ""),
    ("get", *TRAINJOB_CRD, "", "jobsets.jobset.x-k8s.io"),
    ("delete", "trainer.kubeflow.org", "trainjobs", "ml", "llm"),
    ("update", "jobset.x-k8s.io", "jobsets", "ml", "llm"),
    ("delete", "kubeflow.org", "pytorchjobs", "ml", "resnet"),
    ("create", "kubeflow.org", "pytorchjobs", "ml", ""),
    ("update", "kubeflow.org", "pytorchjobs", "ml", "resnet"),
    ("delete", "apps", "deployments", "ml", "coordinator"),
    ("patch", "batch", "jobs", "ml", "workers"),
    ("patch", "networking.k8s.io", "networkpolicies", "ml", "p"),
    ("patch", "cilium.io", "ciliumnetworkpolicies", "ml", "p"),
    ("update", "coordination.k8s.io", "leases", "zonemedic", "someone-else"),
    ("get", "coordination.k8s.io", "leases", "kube-system", "zonemedic-leader"),
    ("create", "coordination.k8s.io", "leases", "ml", ""),
    ("delete", "coordination.k8s.io", "leases", "zonemedic", "zonemedic-leader"),
    ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "kueue"),
    ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", ""),
    ("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "zonemedic"),
]


@needs_kubectl
def test_rbac_in_the_twin_authorizer_allows_exactly_what_the_agent_uses() -> None:
    from agent.twin.auth import Attributes, Authorizer, UserInfo, load_rbac
    from agent.twin.resources import lookup
    from agent.twin.store import Store

    docs = render("base")
    store = Store()
    try:
        for namespace in ("ml", "zonemedic"):
            store.create(lookup("namespaces"), {"metadata": {"name": namespace}})
        assert load_rbac(store, docs) == 5  # the roles, their bindings, the service account
        authorizer = Authorizer(store)
        account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
        agent = UserInfo.service_account(account["namespace"], account["name"])
        for expected, cases in ((True, AGENT_USES), (False, AGENT_NEVER)):
            for verb, group, resource, namespace, name in cases:
                attrs = Attributes(verb, group, resource, namespace=namespace, name=name)
                assert authorizer.allowed(agent, attrs) is expected, attrs
    finally:
        store.close()


@needs_kubectl
def test_the_admission_webhook_in_deploy_is_the_one_the_command_prints_for_its_config() -> None:
    from agent.admission.manifest import webhook_configuration

    shipped = yaml.safe_load((ROOT / "deploy" / "base" / "admission-webhook.yaml").read_text())
    config = yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text())
    settings = build(Settings, config)
    assert settings.admission.enabled and settings.admission.cert_file is None
    assert shipped == webhook_configuration(settings)
    docs = render("base")
    rendered = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    (hook,) = rendered["webhooks"]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["reinvocationPolicy"]) == (
        "Ignore", "None", "IfNeeded")
    assert hook["admissionReviewVersions"] == ["v1"] and hook["timeoutSeconds"] <= 5
    assert hook["clientConfig"]["service"] == {"namespace": "zonemedic", "name": "zonemedic",
                                               "path": "/admission/mutate", "port": 443}
    # the Service's 443 reaches the container's admission port, the agent's admission.port
    service = next(d for d in docs if d["kind"] == "Service")
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "admission"]
    assert (port["port"], port["targetPort"]) == (443, "admission")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"name": "admission", "containerPort": settings.admission.port, "protocol": "TCP"} in ports
    # the agent's policy lets the API server (only) reach that port; the PDB is kept
    policy = next(d for d in docs if d["kind"] == "CiliumNetworkPolicy")
    callers = [rule for rule in policy["spec"]["ingress"]
               if any(p["port"] == str(settings.admission.port) for t in rule["toPorts"]
                      for p in t["ports"])]  # fmt: skip
    assert callers == [{"fromEntities": ["kube-apiserver"], "toPorts": [
        {"ports": [{"port": str(settings.admission.port), "protocol": "TCP"}]}]}]
    assert any(d["kind"] == "PodDisruptionBudget" for d in docs)


@needs_kubectl
def test_the_cert_manager_component_mounts_its_certificate_and_drops_the_ca_patch(
    tmp_path: Path,
) -> None:
    overlay = ROOT / "deploy" / "overlays" / f"cert-manager-test-{tmp_path.name}"
    overlay.mkdir()
    try:
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            "resources: [../../base]\ncomponents: [../../components/cert-manager]\n")
        docs = render(str(overlay.relative_to(ROOT / "deploy")))
    finally:
        shutil.rmtree(overlay)
    config = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "zonemedic/zonemedic-admission"}
    certificate = next(d for d in docs if d["kind"] == "Certificate")
    assert "zonemedic.zonemedic.svc" in certificate["spec"]["dnsNames"]
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ZONEMEDIC_ADMISSION__CERT_FILE"] == "/etc/zonemedic/admission/tls.crt"
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert all("mutatingwebhookconfigurations" not in r["resources"] for r in role["rules"])
