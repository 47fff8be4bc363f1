"""The agent's own serving certificate renewed while it runs: two replicas over one store, each
serving over HTTPS, a certificate valid for seconds; both take the one renewed certificate without
a restart, and the twin's webhook configuration holds its CA (patched by the cluster writer)."""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client, config

from agent.admission.certificates import ServingContext, make_certificate, write_pair
from agent.admission.manifest import webhook_configuration
from agent.admission.server import AdmissionServer
from agent.runtime.admission import ca_patcher
from agent.runtime.certificate_renewal import CertificateRenewal, renew_margin
from agent.settings import AdmissionSettings, DiagnosisSettings, GroupSpec, Settings
from agent.store.repository import IncidentStore
from tests.support.admission import POD_GROUP
from tests.support.waiting import wait
from tests.twin.apiserver_harness import running_twin

VALIDITY = timedelta(seconds=6)  # renewed in its last third: about every 4 s
NAMES = ["127.0.0.1"]


@dataclass
class Replica:
    renewal: CertificateRenewal
    server: AdmissionServer


def served_certificate(port: int, ca_pem: str) -> bytes:
    """The certificate the server on `port` presents, verified against `ca_pem`."""
    context = ssl.create_default_context(cadata=ca_pem)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:  # fmt: skip
        found = tls.getpeercert(binary_form=True)
    assert found is not None
    return found


def der(pem: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[client.ApiClient]:
    with running_twin(tmp_path / "twin") as twin:
        api_client = config.new_client_from_config(config_file=str(twin.kubeconfig))
        yield api_client
        api_client.close()


def test_two_replicas_renew_one_certificate_before_its_end_and_patch_its_ca(
    tmp_path: Path, store: IncidentStore, api: client.ApiClient
) -> None:
    settings = replace(Settings(), admission=AdmissionSettings(
        enabled=True, url="https://127.0.0.1:1/admission/mutate"))
    client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        webhook_configuration(settings))
    margin = renew_margin(VALIDITY)

    def first() -> datetime:
        return datetime.now(UTC)

    start = store.shared_certificate(
        cluster=settings.cluster_name, now=first(), renew_before=margin,
        make=lambda: make_certificate(NAMES, now=first(), validity=VALIDITY))  # fmt: skip
    replicas = []
    for number in range(2):
        directory = tmp_path / f"replica-{number}"
        serving = ServingContext(*write_pair(start, directory))
        server = AdmissionServer(lambda _body: (200, b"{}"), host="127.0.0.1", port=0,
                                 context=serving.context)  # fmt: skip
        server.start()
        renewal = CertificateRenewal(start, names=NAMES, cluster=settings.cluster_name, store=store,
                                     serving=serving, directory=directory,
                                     patch_ca=ca_patcher(settings, api_client=api), now=first,
                                     validity=VALIDITY)  # fmt: skip
        renewal.start(0.2)
        replicas.append(Replica(renewal, server))
    try:
        assert served_certificate(replicas[0].server.port, start.ca_pem) == der(start.cert_pem)

        def agreed() -> bool:
            a, b = (r.renewal for r in replicas)
            return (a.renewals >= 1 and b.renewals >= 1 and a.current.cert_pem == b.current.cert_pem
                    and a.current.not_after > first() + margin)  # fmt: skip

        wait(agreed, timeout=30, what="both replicas to serve one renewed certificate")
        renewed = replicas[0].renewal.current
        assert renewed.cert_pem != start.cert_pem and renewed.ca_pem != start.ca_pem
        assert renewed.not_after > start.not_after
        for replica in replicas:  # the same server, a new certificate: no restart
            assert served_certificate(replica.server.port, renewed.ca_pem) == der(renewed.cert_pem)

        def patched() -> bool:
            read = client.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
                settings.admission.configuration_name)
            bundle = base64.b64decode(read.webhooks[0].client_config.ca_bundle or "").decode()
            return bundle.startswith(replicas[0].renewal.current.ca_pem)

        wait(patched, timeout=10, what="the renewed CA in the webhook configuration's caBundle")
    finally:
        for replica in replicas:
            replica.renewal.stop()
            replica.server.stop()


def test_without_a_store_the_served_certificate_is_kept_until_its_last_third(tmp_path: Path) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    start = make_certificate(NAMES, now=now, validity=timedelta(days=3))
    serving = ServingContext(*write_pair(start, tmp_path))
    patched: list[str] = []
    clock = [now]
    renewal = CertificateRenewal(start, names=NAMES, cluster="c", store=None, serving=serving,
                                 directory=tmp_path, patch_ca=patched.append, now=lambda: clock[0],
                                 validity=timedelta(days=3))  # fmt: skip
    assert renewal.check() is False and patched == []  # two days left: more than a third
    clock[0] = now + timedelta(days=2, hours=1)
    assert renewal.check() is True
    assert renewal.current.cert_pem != start.cert_pem
    assert patched == [renewal.current.ca_pem + start.ca_pem]  # the new CA, then the old one
    assert serving.loads == 2


@pytest.mark.parametrize("installed_groups", [[], [POD_GROUP]])
def test_the_ca_reaches_the_main_webhook_even_when_the_pods_webhooks_are_not_installed(
    api: client.ApiClient, installed_groups: list[GroupSpec]
) -> None:
    """A group set `admit_pods` after the manifest was applied: the installed configuration lacks
    its pods webhook, and the main webhook is still patched (the pods webhook too when there)."""
    admission = AdmissionSettings(enabled=True, url="https://127.0.0.1:1/admission/mutate")
    installed = Settings(admission=admission, diagnosis=DiagnosisSettings(groups=installed_groups))
    running = Settings(admission=admission, diagnosis=DiagnosisSettings(groups=[POD_GROUP]))
    registration = client.AdmissionregistrationV1Api(api)
    registration.create_mutating_webhook_configuration(webhook_configuration(installed))
    ca_pem = make_certificate(NAMES, now=datetime.now(UTC)).ca_pem
    ca_patcher(running, api_client=api)(ca_pem)
    read = registration.read_mutating_webhook_configuration(admission.configuration_name)
    assert len(read.webhooks) == 1 + len(installed_groups)
    for hook in read.webhooks:
        assert base64.b64decode(hook.client_config.ca_bundle or "").decode() == ca_pem
