"""Admission-time prevention: the agent's mutating admission webhook.

A training job (every kind of `agent.model.workload`, and a configured generic group's objects:
its Deployments and batch Jobs, or, for a group placed pod by pod, its Pods one by one)
is placed in one zone the policies allow as it is created, before its first pod is scheduled,
with the same zone pin, toleration and zone-mirroring label the remediation planner writes
(`agent.remediation.planner`), or, on a Kueue-managed job, Kueue's Topology Aware Scheduling
annotations.

The package's rooms: `review` (the `admission.k8s.io/v1` AdmissionReview in and out), `jsonpatch`
(an RFC 6902 patch from two documents), `subject` (what is being created: its kind, the pods it will
make), `decision` (where it goes and why: pure, over the watch cache's parsed view), `pod_gang` (the
gang a group's Pod belongs to, as it is created), `documents` (the JSON helpers the decision
uses), `manifest`
(the MutatingWebhookConfiguration), `certificates` (the serving certificate: files, or made at
start-up), `server` (the HTTPS server), `webhook` (one request end to end: decide, count, record).
"""
