"""The resource table of the twin's API server: one row per kind it serves.

The store, the HTTP layer, discovery and RBAC all read this table; adding a kind is one row. It
holds names and flags only (no objects, no I/O). `lookup` resolves what a user types (plural,
kind, singular or short name) to a row, the way kubectl's RESTMapper does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class UnknownResourceError(LookupError):
    """No row of the table matches the name (and group/version) asked for."""


@dataclass(frozen=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry of a custom resource's CRD: the header, the cell's
    type (string, integer, number, boolean, date), its JSONPath into the object, and priority 1
    for a column only `kubectl get -o wide` shows."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0

    def as_crd(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE_COLUMN = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class ResourceType:
    """One kind served by the twin. `builtin` kinds accept strategic merge patch; custom ones 415."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    builtin: bool = True
    categories: tuple[str, ...] = ()
    # Fields a fieldSelector may name besides metadata.name / metadata.namespace.
    field_labels: tuple[str, ...] = ()
    # A field label that is not its own JSON path: the dotted paths whose first non-empty value
    # it selects (an Event's `source` is `source.component`, else `reportingComponent`).
    field_paths: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # A custom resource's CRD printer columns (empty: the server's default NAME, AGE).
    printer_columns: tuple[PrinterColumn, ...] = field(default=())
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str, str]:
        """Storage key: kinds with the same plural in two versions are kept apart."""
        return (self.group, self.version, self.plural)

    def base_path(self, namespace: str | None = None) -> str:
        """The collection URL path, e.g. /api/v1/namespaces/ns/pods."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


_POD_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
_TRAINING_COLUMNS = (PrinterColumn("State", "string", ".status.conditions[-1:].type"), AGE_COLUMN)


def _training_job(kind: str, plural: str, version: str = "v1") -> ResourceType:
    return ResourceType(
        group="kubeflow.org",
        version=version,
        plural=plural,
        kind=kind,
        namespaced=True,
        singular=kind.lower(),
        subresources=("status",),
        builtin=False,
        categories=("all", "kubeflow"),
        printer_columns=_TRAINING_COLUMNS,
    )


_READ_ONLY_CREATE = ("create",)

# API groups a cluster serves only once their CRDs are installed: a scenario that runs Kueue
# installs them (`Store.install_group`); elsewhere discovery omits them and their paths are 404.
KUEUE_GROUP = "kueue.x-k8s.io"
OPTIONAL_GROUPS = frozenset({KUEUE_GROUP})

RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "namespace",
        ("ns",),
        ("status",),
    ),
    ResourceType("", "v1", "nodes", "Node", False, "node", ("no",), ("status",)),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        "pod",
        ("po",),
        ("status", "binding", "log", "exec", "attach", "portforward"),
        categories=("all",),
        field_labels=_POD_FIELDS,
    ),
    ResourceType(
        "", "v1", "services", "Service", True, "service", ("svc",), ("status",), categories=("all",)
    ),
    ResourceType(
        "", "v1", "events", "Event", True, "event", ("ev",), (), field_labels=_EVENT_FIELDS,
        field_paths=(("source", ("source.component", "reportingComponent")),),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True, "secret"),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, "serviceaccount", ("sa",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease"),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        "deployment",
        ("deploy",),
        ("status", "scale"),
        categories=("all",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        "replicaset",
        ("rs",),
        ("status", "scale"),
        categories=("all",),
    ),
    ResourceType("batch", "v1", "jobs", "Job", True, "job", (), ("status",), categories=("all",)),
    ResourceType(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        True,
        "networkpolicy",
        ("netpol",),
    ),
    ResourceType("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                 "MutatingWebhookConfiguration", False, "mutatingwebhookconfiguration"),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, "role"),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, "rolebinding"
    ),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, "clusterrole"
    ),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        "clusterrolebinding",
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        False,
        "selfsubjectaccessreview",
        verbs=_READ_ONLY_CREATE,
    ),
    ResourceType(
        "cilium.io",
        "v2",
        "ciliumnetworkpolicies",
        "CiliumNetworkPolicy",
        True,
        "ciliumnetworkpolicy",
        ("cnp", "ciliumnp"),
        ("status",),
        builtin=False,
        categories=("cilium", "ciliumpolicy"),
    ),
    ResourceType(
        "cilium.io",
        "v2",
        "ciliumclusterwidenetworkpolicies",
        "CiliumClusterwideNetworkPolicy",
        False,
        "ciliumclusterwidenetworkpolicy",
        ("ccnp",),
        ("status",),
        builtin=False,
        categories=("cilium", "ciliumpolicy"),
    ),
    # Kueue v0.14's kinds (kueue.x-k8s.io/v1beta1; served once installed, see OPTIONAL_GROUPS).
    ResourceType(
        KUEUE_GROUP, "v1beta1", "workloads", "Workload", True, "workload", ("wl",), ("status",),
        builtin=False,
        printer_columns=(
            PrinterColumn("Queue", "string", ".spec.queueName",
                          "Name of the queue this workload was submitted to"),
            PrinterColumn("Reserved in", "string", ".status.admission.clusterQueue",
                          "Name of the ClusterQueue where the workload is reserving quota"),
            PrinterColumn("Admitted", "string",
                          ".status.conditions[?(@.type=='Admitted')].status", "Admission status"),
            PrinterColumn("Finished", "string",
                          ".status.conditions[?(@.type=='Finished')].status", "Workload finished"),
            PrinterColumn("Age", "date", ".metadata.creationTimestamp",
                          "Time this workload was created"),
        ),
    ),
    ResourceType(
        KUEUE_GROUP, "v1beta1", "clusterqueues", "ClusterQueue", False, "clusterqueue", ("cq",),
        ("status",), builtin=False,
        printer_columns=(
            PrinterColumn("Cohort", "string", ".spec.cohort",
                          "Cohort that this ClusterQueue belongs to"),
            PrinterColumn("Strategy", "string", ".spec.queueingStrategy",
                          "The queueing strategy used to prioritize workloads", priority=1),
            PrinterColumn("Pending Workloads", "integer", ".status.pendingWorkloads",
                          "Number of pending workloads"),
            PrinterColumn("Admitted Workloads", "integer", ".status.admittedWorkloads",
                          "Number of admitted workloads that haven't finished yet", priority=1),
        ),
    ),
    ResourceType(
        KUEUE_GROUP, "v1beta1", "localqueues", "LocalQueue", True, "localqueue",
        ("queue", "queues", "lq"), ("status",), builtin=False,
        printer_columns=(
            PrinterColumn("ClusterQueue", "string", ".spec.clusterQueue", "Backing ClusterQueue"),
            PrinterColumn("Pending Workloads", "integer", ".status.pendingWorkloads",
                          "Number of pending workloads"),
            PrinterColumn("Admitted Workloads", "integer", ".status.admittedWorkloads",
                          "Number of admitted workloads that haven't finished yet."),
        ),
    ),
    ResourceType(
        KUEUE_GROUP, "v1beta1", "resourceflavors", "ResourceFlavor", False, "resourceflavor",
        ("flavor", "flavors", "rf"), builtin=False,
    ),
    ResourceType(KUEUE_GROUP, "v1beta1", "topologies", "Topology", False, "topology",
                 builtin=False),
    _training_job("PyTorchJob", "pytorchjobs"),
    _training_job("TFJob", "tfjobs"),
    _training_job("MPIJob", "mpijobs"),
    _training_job("XGBoostJob", "xgboostjobs"),
    _training_job("PaddleJob", "paddlejobs"),
    _training_job("JAXJob", "jaxjobs"),
    _training_job("MPIJob", "mpijobs", version="v2beta1"),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        "customresourcedefinition",
        ("crd", "crds"),
        ("status",),
        categories=("api-extensions",),
    ),
    ResourceType(
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "TrainJob",
        True,
        "trainjob",
        subresources=("status",),
        builtin=False,
        printer_columns=(
            PrinterColumn("State", "string", ".status.conditions[-1:].type"),
            AGE_COLUMN,
        ),
    ),
    ResourceType(
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainingruntimes",
        "TrainingRuntime",
        True,
        "trainingruntime",
        builtin=False,
    ),
    ResourceType(
        "trainer.kubeflow.org",
        "v1alpha1",
        "clustertrainingruntimes",
        "ClusterTrainingRuntime",
        False,
        "clustertrainingruntime",
        builtin=False,
    ),
    ResourceType(
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        "JobSet",
        True,
        "jobset",
        subresources=("status",),
        builtin=False,
        printer_columns=(
            PrinterColumn("TerminalState", "string", ".status.terminalState",
                          "Final state of JobSet"),
            PrinterColumn("Restarts", "string", ".status.restarts", "Number of restarts"),
            PrinterColumn("Completed", "string",
                          '.status.conditions[?(@.type=="Completed")].status'),
            PrinterColumn("Suspended", "string", ".spec.suspend", "JobSet suspended"),
            PrinterColumn("Age", "date", ".metadata.creationTimestamp",
                          "Time this JobSet was created"),
        ),
    ),
)


def lookup(
    plural_or_kind: str, group: str | None = None, version: str | None = None
) -> ResourceType:
    """The row for a plural, kind, singular or short name; the first row wins when two match.

    `lookup("mpijobs")` is kubeflow.org/v1; pass version="v2beta1" for mpi-operator's MPIJob.
    Raises UnknownResourceError when nothing matches.
    """
    name = plural_or_kind.lower()
    for rt in RESOURCES:
        if group is not None and rt.group != group:
            continue
        if version is not None and rt.version != version:
            continue
        if name in (rt.plural, rt.singular, rt.kind.lower()) or name in rt.short_names:
            return rt
    where = "/".join(p for p in (group, version) if p is not None)
    raise UnknownResourceError(
        f"the server doesn't have a resource type {plural_or_kind!r}"
        + (f" in {where}" if where else "")
    )


def by_kind(api_version: str, kind: str) -> ResourceType:
    """The row for an object's apiVersion and kind (as found in ownerReferences or a body)."""
    group, _, version = api_version.rpartition("/")
    for rt in RESOURCES:
        if rt.group == group and rt.version == version and rt.kind == kind:
            return rt
    raise UnknownResourceError(f"no kind {kind!r} is registered for version {api_version!r}")


def groups() -> dict[str, list[str]]:
    """Group name -> its versions, in table order (core group is "")."""
    out: dict[str, list[str]] = {}
    for rt in RESOURCES:
        versions = out.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
    return out
