"""Write the README's performance section from bench/results.json (`make bench-report`).

Reads the full-size figures (not `--quick` ones) of bench/results.json and replaces what lies
between `<!-- bench:start -->` and `<!-- bench:end -->` in README.md: one table per benchmark
(figure, median, p95, target, met, and when/where measured: date, git revision, load average),
the notes below (what each benchmark does and what keeps its figures where they are) and the cost
model (time and memory at three sizes along each axis, with the growth exponent). Nothing in that
section is edited by hand: change the notes here, or measure again. `--check`: exit 1 when the
README is not what this script would write (for CI). Usage: `python bench/report.py [--check]`.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results import fmt, load, target_text  # noqa: E402

README = ROOT / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"

ORDER = [
    "agent_detection", "agent_steady", "agent_standby", "agent_sync", "diagnose_yaml",
    "diagnose_scale", "explain_latency", "admission_latency", "whatif_scale",
    "policy_check", "remediation", "slack_clicks", "store_queries", "twin_apiserver", "twin_idle",
]
TITLES = {
    "agent_detection": "Detection latency (`bench/agent_detection.py`)",
    "agent_steady": "The agent at 150,000 pods: start-up and steady state (`bench/agent_steady.py`)",
    "agent_standby": "Hand-over to a warm standby at 150,000 pods (`bench/agent_standby.py`)",
    "agent_sync": "Initial sync of 150,000 pods (`bench/agent_sync.py`)",
    "diagnose_yaml": "Offline diagnosis of 40 MB `kubectl get -o yaml` dumps (`bench/diagnose_yaml.py`)",
    "diagnose_scale": "Offline diagnosis at scale (`bench/diagnose_scale.py`)",
    "explain_latency": "Explaining a flow at 150,000 pods (`bench/explain_latency.py`)",
    "admission_latency": "The admission webhook at 150,000 pods (`bench/admission_latency.py`)",
    "whatif_scale": "What if a policy is deleted, over every job at 150,000 pods (`bench/whatif_scale.py`)",
    "policy_check": "Policy evaluator (`bench/policy_check.py`)",
    "remediation": "Remediation (`bench/remediation.py`)",
    "slack_clicks": "Slack clicks (`bench/slack_clicks.py`)",
    "store_queries": "Incident store (`bench/store_queries.py`)",
    "twin_apiserver": "Twin API server (`bench/twin_apiserver.py`)",
    "twin_idle": "Twin cluster at idle (`bench/twin_idle.py`)",
}
NOTES = {
    "agent_detection": (
        "Last pod bound -> incident visible in the database, 20 rounds, jobs created while the "
        "agent runs (seed-blocked's split PyTorchJob), on the seed cluster and with 2,000 other "
        "jobs. The cache knows each job's expected pods (a Kubeflow job's replica counts; a "
        "generic group's Deployments and batch Jobs) and flags the watch event that binds the "
        "last one; the detector diagnoses that job at once instead of after the 500 ms debounce "
        "window, which still batches every other change (before: median 501 ms, p95 510 ms). "
        "The same split seen by the shipped alert `TrainingJobSplitAcrossZones` on a real "
        "Prometheus scraping the same twin, measured with a test copy of the rules (`for: 5s` "
        "instead of `for: 2m`, scrape and evaluation every 1 s); the shipped `for: 2m` adds 115 s. "
        "Since the right verdict first (issue 19, commit 2e6c0ea, found by bisecting this bench "
        "with `--quick`: median 14.0 ms at its parent, 2,032 ms at it) a job is recorded only on a verdict no zone-mirroring "
        "label still to come can change. seed-blocked's zone-boundary policies select pods by "
        "`netpol.example.com/zone`, which the twin's kubelet (emulating the binding webhook) "
        "stamps when the pod starts, `pod_start_seconds` (2 s) after its bind: last bind -> "
        "incident stored is that wait plus the agent's own part, so the 100 ms target is on the "
        "latter, last label written -> incident stored (the label's watch event completes the "
        "gang again and is diagnosed at once, no debounce). Before 2e6c0ea the incident was "
        "stored ~10 ms after the bind, with verdict `zone_split_degraded`, and changed to "
        "`zone_split_blocked` when the labels came 2 s later: the first message carried a "
        "verdict that changed. The alert ratios are measured from the last bind as before."
    ),
    "agent_steady": (
        "The agent (SQLite store, leader election, Prometheus behind a counting proxy) on the "
        "synthetic 150,000-pod cluster (2,000 jobs, a quarter split), in its own process. "
        "Start-up to first full diagnosis: from building the agent to the end of its first "
        "cluster-wide batch as the leader, every job diagnosed and every finding recorded in a "
        "fresh database (the 500 split jobs open their incidents and queue their playbook "
        "messages), with its parts below (before: 29.4 s, measured until 3 s without a batch). "
        "The start-up change is due at once and the election's first step runs before the "
        "detector, so the first batch is one cluster-wide diagnosis by the leader (it was a "
        "follower's parse, then the leader's diagnosis, each after the 500 ms window); the "
        "mirror's first state is one bulk load with the garbage collector paused, facts built "
        "once and the containers a job's pods share parsed once (in-process on the same cache: "
        "7.6 s -> 2.0 s); the batch reads the open incidents once, not once per job (4 s of "
        "store queries gone). The store's batched write path (`IncidentStore.record_findings`: "
        "200 findings per transaction, multi-row inserts and updates, each new incident's "
        "timeline event, preview, approval request and outbox messages in the transaction that "
        "opens it) took recording 500 new incidents from 10.8 s (~10 ms of CPU each, four "
        "transactions per incident) to 1.2 s wall, 0.70 s of CPU; the mirror counts its facts in "
        "bulk and parses well-typed pods on a short path. Start-up was then 26.9 s wall, 11.3 s of "
        "CPU at load ~10. The informers' lists now share one pause of the cyclic garbage "
        "collector (each paused it alone, so the first list to end turned it back on while the "
        "pods were listing) and freeze the heap when the last large list ends (the first "
        "collection after the sync scanned every object allocated during it); the first pod "
        "list is indexed with one `JobRef` per job, the informer's pod slimmer looks shared "
        "parts up in place, and topology identifies a job's pods once per job. Interleaved "
        "runs on the same shared machine: before 14.1-18.2 s wall, 8.5-9.7 s of CPU (load "
        "6-12); after 8.0-8.2 s wall, 6.3-7.8 s of CPU in four runs of five (load 2-8; one at "
        "load ~7: 24.1 s, 10.2 s of CPU); the run shown is one on a quiet machine (load 1.1), "
        "the code of every split of the day merged: 7.7 s wall, 7.6 s of CPU, the target met "
        "with little to spare (a loaded machine misses it). "
        "Other helpers' suites share the 2 cores, so the CPU figure (the agent process's user + "
        "system time over the same span) is the honest one; what is left is the pod list's JSON "
        "decoding (~1 s of CPU, orjson already), slimming (0.8 s), the mirror's parse (1.8 s) "
        "and the diagnosis (0.9 s). Re-diagnosis after one pod event is the detector batch: the mirror "
        "visits only the changed objects and keeps the cluster-wide facts pod by pod, so a batch "
        "costs its job, not the cluster (before: 0.35-0.40 s). A steady-state sweep reads the "
        "watch cache (0 list requests on the twin's audit) and fetches utilization for every "
        "job in 2 queries."
    ),
    "agent_standby": (
        "Two agents on one SQLite database with the shipped lease timings (15 s lease, 10 s renew "
        "deadline, 2 s retry); the standby's cache synced and its mirror parsed while it "
        "follows. The leader is killed (its lease must expire) or stopped (it releases the "
        "lease); a new split PyTorchJob appears inside the hand-over. The follower remembers the "
        "jobs of the last changes it saw; the new term's first batch, due at once, diagnoses and "
        "records those first, then every job, problems with no open incident before the "
        "re-detections (before: the split came after the diagnosis of all 2,000 jobs, 7.9 s "
        "into the term at load ~10). The term-start batch re-detects the 500 open incidents "
        "through the store's batched write path (multi-row updates, one transaction per 200): "
        "after a crash 18.7 s -> 6.3 s at load ~10. Blind time after a crash is bounded by the lease duration; "
        "after a release, by the retry period."
    ),
    "agent_sync": (
        "The agent's paged list (limit/continue, 5,000 a page; the next page is fetched on a "
        "helper thread while the current one is slimmed) into its slim cache, against the same "
        "list parsed into the kubernetes client's model classes, each in its own process (before: "
        "14.9 s vs 79.9 s, x5.4; memory x11). The twin sorts a paged list's keys once per list "
        "(it sorted all 150,000 keys for every page: 5.7 s of server time)."
    ),
    "diagnose_yaml": (
        "`zonemedic diagnose` as a subprocess on two kubectl-style YAML Lists of ~40 MB: 15,000 "
        "pods with managed fields, conditions and container statuses, and 78,000 compact pods "
        "(no managed fields: five times the objects in the same bytes). kubectl's block style "
        "is read line by line (each distinct line's reading cached; the same resolver and "
        "constructors as SafeLoader), anything else from libyaml's parser events without the "
        "node graph; a List's items are parsed one at a time (before: the compact dump 14-18 s, "
        "8.3 s of CPU building libyaml's 5.6 million events; the managed-fields dump 10.7 s and "
        "1.74 GB on this machine, 37 s and 2.2 GB when the issue was filed). A key's value "
        "written out again (a job's pods' containers and owner reference) is looked up by its "
        "lines and read once, shared, while such lines repeat, and parsed once (`PodParts`); an "
        "ASCII text is checked for non-printable characters at memory speed: the compact dump "
        "from 12.0 s of CPU to 7.7 s (same output, same peak RSS, load ~7), 2.95 -> 2.36 "
        "billion instructions at a tenth of the size (callgrind). The figures here were measured on "
        "a quiet machine (load average ~1): the compact dump 2.8 s, wall and CPU alike; the same "
        "bench at load 7-13 earlier that day gave 8.7 s of CPU and 25 s of wall (CPU time "
        "inflates on two shared cores too), and the difference between the two revisions was not "
        "bisected. The CPU figures are the children's user + system time."
    ),
    "diagnose_scale": (
        "Synthetic JSON snapshot: 5,000 nodes, 150,000 pods (2,000 Kubeflow jobs, a quarter "
        "split), 1,000 policies; then the same cluster doubled. Pods that no policy selector can "
        "tell apart form one identity class (one policy check per class pair, cached across "
        "jobs); the garbage collector is paused while parsing and the snapshot frozen."
    ),
    "explain_latency": (
        "One `GET /api/explain` answer as the agent computes it (`LiveExplainer.explain` over "
        "the pipeline's parsed view: the evaluator's trace of the flow, both identities) at "
        "150,000 pods (18,750 PyTorchJobs of 8 over 50 namespaces) and the 1,000 policies of "
        "`policy_check`, for 300 random worker -> master flows, first asked and asked again; "
        "HTTP and the mirror's catch-up on changed objects are not included."
    ),
    "admission_latency": (
        "One AdmissionReview answered by the agent's webhook (`agent.admission.webhook`, mode "
        "enforce) over HTTPS on loopback, timed by another process (a `multiprocessing` spawn) "
        "from the request written to the answer read, on one keep-alive connection as "
        "kube-apiserver reuses its connections (the server keeps HTTP/1.1 connections open; "
        "no TLS handshake per request), the CA verified: 2,000 new 8-pod PyTorchJobs (after 50 "
        "not counted) across 50 namespaces, their templates carrying a zone-mirroring label "
        "that lies, against the watch cache's parsed view of 150,000 bound pods on 2,400 8-GPU "
        "nodes in three zones (85% of the GPUs taken) and `policy_check`'s 1,000 policies (the "
        "heap frozen as the agent freezes it after its initial sync), the view handed out anew "
        "every half second by a thread beside the requests as the agent's is. About 90% are "
        "placed (the patch returned); the rest, in a sandbox namespace whose tier a clusterwide "
        "deny guards, have a flow denied in every zone and pass unchanged after the same "
        "search. Per request the webhook asks the planner for the plan without its rendered "
        "diff and hand-overs (`plan_remediation(explain=False)`: the same changes; the diff "
        "was 22% of the answer), hands it the zone's freest nodes per node shape (each shape "
        "ranked once per view, not per request), and merges the changes into its own copy in "
        "place. The planned object shares what the plan leaves alone with the request (the JSON "
        "diff walks only what changed), the pods are modelled once per request, the planner "
        "parses each quantity and affinity term once, and a policy that also requires a "
        "namespace is indexed by it (a new identity no longer scans every namespace's zone "
        "policies): the serving thread's CPU per answer (second figure) went from median "
        "2.42 ms, p99 3.54 ms (2c5cd4d, same quiet machine, 2026-12-04; HTTPS p99 4.34 ms) "
        "to the figures here, the 2,000 answers byte-equal. The tail is the first request of each label combination (its "
        "identity class evaluated against the 1,000 policies once; 150 of the 2,000 here) and "
        "scheduling on this 2-core machine: under load (other benchmarks and tests beside it, "
        "load average 4-6) the HTTPS p99 reaches 10 ms while the CPU per answer's p99 stays near "
        "3 ms: the rest is waiting for a CPU. The records are written by a background writer, off the answer's "
        "path, and not part of the figure (no store here)."
    ),
    "whatif_scale": (
        "`diagnose_scale`'s synthetic cluster (5,000 nodes, 150,000 pods, 2,000 Kubeflow jobs, "
        "1,000 policies) with one zone-boundary policy deleted: the jobs the deleted policy can "
        "select in some placement diagnosed before and after (every other keeps its verdict); "
        "the required flows of the jobs with a touched pod, and every declared-port flow to or "
        "from the 516 pods the policy selected (to and from every pod of the cluster: 154 "
        "million pod pairs, 43 million of which change) compared per identity-class pair, each "
        "verdict put together from its two hops, cached by what the hop reads; policy sets "
        "built from scratch each run; groups the evaluator cannot tell apart (the same keys "
        "before and after, the same declared ports) compared once. *From scratch* is "
        "`zonemedic whatif` on a parsed dump: it finds the jobs and the cluster facts "
        "(capacity, zone-mirroring keys) first. *Facts and jobs held* is the same answer given "
        "those two. *Agent POST /api/whatif* is the agent's own answer (`LiveWhatIf`: the body "
        "parsed, the held jobs brought up to date for the cache generation, the blast radius, "
        "its JSON; the pods by shape kept per generation, one pod per shape classified): "
        "first asked with nothing done before (every job found, the live policy set's caches "
        "cold), the background warm-up (`LiveWhatIf.warm`, run by the agent's warm-up thread "
        "once the caches are synced and again per cache generation: the jobs found, the pods "
        "by shape, each class's endpoint interned in the live policy set), first asked after "
        "that warm-up on a cluster parsed again (nothing else cached: the evaluator's hop "
        "verdicts stay cold), first asked after a pod change in one namespace (that "
        "namespace's jobs found again), asked again in the same generation. A declared-port "
        "pair is evaluated only where the change reaches one of its hops (a changed policy "
        "deciding the source's egress or the destination's ingress, or an end's class "
        "changing); where only the destination's ingress can change, the two hop verdicts are "
        "compared. Before these (2c5cd4d, quiet machine, 2026-12-04): from scratch 4.74 s, "
        "held 2.95 s, agent first asked 4.63 s, after the warm-up 2.33 s, after a pod change "
        "1.80 s, asked again 1.52 s. From scratch still misses 2 s (2.2 s): of it, the cluster "
        "facts ~0.45 s, grouping ~0.6 s, job finding ~0.3 s, declared-port flows ~0.4 s, and "
        "0.3-0.5 s of garbage collection over the parsed, unfrozen heap. The figures move "
        "by a few tenths of a second with the shared machine's load."
    ),
    "policy_check": "1,000 policies (CNP, CCNP, NetworkPolicy) over 50 namespaces, 2,000 jobs of 8 pods.",
    "remediation": (
        "An approved remediation of `seed-blocked` on the twin (fast pod timings, SQLite, no "
        "Prometheus; a fresh twin each round): from the approval committed to the suspend patch "
        "answered, and the whole remediation (plan, dry run, suspend, pods gone, resume, every "
        "pod bound in the target zone, re-diagnosed healthy) split into agent time (reads, "
        "diagnosis, planning, writes, the store) and waiting for the cluster (the executor's "
        "poll sleeps, 100 ms each). With Prometheus, verification also waits for the "
        "utilization to recover; on a real cluster, pod stop and start times dominate."
    ),
    "slack_clicks": (
        "100 concurrent signed button clicks, sent from another process, against the agent's "
        "/slack/events (uvicorn, SQLite, the fake Slack Web API); time to the HTTP response (the "
        "acknowledgement: the decision and the replies follow it). Once on 100 different "
        "incidents (100 decisions), once all on one incident (one decision, 99 told who "
        "decided); the run waits until every click was answered."
    ),
    "store_queries": (
        "100,000 incidents (10,000 jobs, one year) with 1,000,000 timeline events, the split "
        "ones carrying an egress figure (stats sums it by basis, read from the diagnosis by the "
        "database); repository call and whole command in-process, SQLite and PostgreSQL."
    ),
    "twin_apiserver": "A 150,000-pod list over HTTP, and write -> watcher latency at 1,000 writes/s.",
    "twin_idle": "The whole twin on `generated:nodes=100,zones=3,jobs=10`, after every pod runs.",
}
AXIS_TEXT = {
    "pods": "pods (service pods added; 300 jobs of 20 pods, 200 policies)",
    "jobs": "jobs (of 20 pods each; 10,000 service pods, 200 policies)",
    "policies": "policies (20,000 pods, 300 jobs of 20 pods)",
    "per_job": "pods per job (300 jobs; 10,000 service pods, 200 policies)",
}


def _when(rows: list[dict[str, Any]]) -> str:
    dates = sorted({r["date"][:10] for r in rows})
    revs = sorted({r["git_revision"] for r in rows})
    loads = [r["machine"].get("load_average_at_start", r["machine"]["load_average"]) for r in rows]
    cpus = rows[0]["machine"]["cpus"]
    return (f"Measured {', '.join(dates)} at revision {', '.join(revs)} on {cpus} CPUs, "
            f"load average {min(loads):.1f}-{max(loads):.1f} at the start (other work shared "
            f"the machine when above ~1).")


def bench_tables(rows: list[dict[str, Any]]) -> list[str]:
    by_bench: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["bench"] != "cost_model":
            by_bench[r["bench"]].append(r)
    out: list[str] = []
    for bench in [b for b in ORDER if b in by_bench] + sorted(set(by_bench) - set(ORDER)):
        figures = by_bench[bench]
        out += [f"### {TITLES.get(bench, bench)}", ""]
        if bench in NOTES:
            out += [NOTES[bench], ""]
        p99 = any(r.get("p99") is not None for r in figures)
        out += [
            f"| figure | median | p95 |{' p99 |' if p99 else ''} unit | target | met |",
            f"|---|---|---|{'---|' if p99 else ''}---|---|---|",
        ]
        for r in figures:
            met = {True: "yes", False: "**no**", None: ""}[r.get("met")]
            note = f" ({r['note']})" if r.get("note") else ""
            p99_cell = f" {fmt(r.get('p99'))} |" if p99 else ""
            out.append(f"| {r['figure']}{note} | {fmt(r['median'])} | {fmt(r.get('p95'))} |"
                       f"{p99_cell} {r['unit']} | {target_text(r)} | {met} |")
        out += ["", _when(figures), ""]
    return out


def cost_table(rows: list[dict[str, Any]]) -> list[str]:
    cost = [r for r in rows if r["bench"] == "cost_model"]
    if not cost:
        return []
    points: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    exponents: dict[str, dict[str, float]] = defaultdict(dict)
    for r in cost:
        sizes = r["sizes"]
        axis = sizes["axis"]
        what = r["figure"].rsplit(": ", 1)[1]
        if "growth exponent" in what:
            exponents[axis][what.replace(" growth exponent", "")] = r["median"]
        else:
            points[axis][sizes["value"]][what] = r["median"]
    out = [
        "### Cost model (`bench/cost_model.py`)",
        "",
        "`zonemedic diagnose` on synthetic JSON snapshots (1,000 nodes in 3 zones), one axis "
        "grown at a time from the base point (20,000 pods, 300 jobs of 20 pods, 200 policies). "
        "Exponent k: time (or memory) ~ size^k between the smallest and largest size (1.0 = "
        "linear).",
        "",
        "| grows | size | load (s) | diagnosis (s) | peak RSS (MB) |",
        "|---|---|---|---|---|",
    ]
    for axis in ("pods", "jobs", "policies", "per_job"):
        if axis not in points:
            continue
        for value in sorted(points[axis]):
            p = points[axis][value]
            out.append(f"| {AXIS_TEXT[axis]} | {value:,} | {fmt(p.get('load'))} | "
                       f"{fmt(p.get('diagnosis'))} | {fmt(p.get('peak RSS'))} |")
        e = exponents[axis]
        out.append(f"| {AXIS_TEXT[axis]} | exponent k | {fmt(e.get('load'))} | "
                   f"{fmt(e.get('diagnosis'))} | {fmt(e.get('peak RSS'))} |")
    out += ["", _when(cost), ""]
    return out


def section(rows: list[dict[str, Any]]) -> str:
    full = [r for r in rows if not r["quick"]]
    lines = [
        START,
        "",
        "Generated by `bench/report.py` from `bench/results.json` (`make bench` measures, `make "
        "bench-report` writes this section); do not edit by hand. Figures from the 2-core "
        "development machine; targets from the issues; a benchmark reports, it never fails on a "
        "missed target.",
        "",
        *bench_tables(full),
        *cost_table(full),
        END,
    ]
    return "\n".join(lines)


def main() -> int:
    check = "--check" in sys.argv[1:]
    text = README.read_text()
    if START not in text or END not in text:
        print(f"README.md has no {START} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = head + section(load()) + tail
    if check:
        return 0 if new == text else 1
    README.write_text(new)
    print("README.md performance section written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
