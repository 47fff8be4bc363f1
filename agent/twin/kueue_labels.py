"""The names Kueue (v0.14, API kueue.x-k8s.io/v1beta1) reads and writes on jobs, pods and Workloads.

Shared by the twin's Kueue modules (jobs, workloads, webhook, admission, topology ungater): the
queue-name label, the Topology Aware Scheduling annotations on pod templates, the scheduling gate,
the labels and annotations Kueue injects at admission, the Workload finalizer, and the condition
types and reasons of a Workload. Constants only.
"""

from __future__ import annotations

from agent.twin.resources import lookup

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PODSET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
PODSET_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Workload condition types
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
REQUEUED = "Requeued"
PREEMPTED = "Preempted"
# reasons
DEACTIVATED = "Deactivated"
REACTIVATED = "Reactivated"
INADMISSIBLE = "Inadmissible"
PENDING = "Pending"
FAILED_TO_START = "FailedToStart"

WORKLOADS = lookup("workloads", group="kueue.x-k8s.io")
CLUSTER_QUEUES = lookup("clusterqueues", group="kueue.x-k8s.io")
LOCAL_QUEUES = lookup("localqueues", group="kueue.x-k8s.io")
RESOURCE_FLAVORS = lookup("resourceflavors", group="kueue.x-k8s.io")
TOPOLOGIES = lookup("topologies", group="kueue.x-k8s.io")
