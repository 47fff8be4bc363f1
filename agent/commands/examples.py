"""The examples every `zonemedic ... --help` ends with, one row per command path.

Who calls it: `agent.cli.build_parser`, which appends `EXAMPLES[path]` as the epilog of the parser
of that command path ("" is `zonemedic` itself, "incidents list" is `zonemedic incidents list`).
Kept in one table so that a new command without an example is caught by one test, and so that
command modules stay about their commands. Rows for commands an installation does not offer (the
twin's, in the production image) are simply not used. What it does not do: run anything.
"""

from __future__ import annotations

from agent.model.workload import PYTORCH

_CONFIG = "/etc/zonemedic/config/config.yaml"

EXAMPLES: dict[str, list[str]] = {
    "": [
        "zonemedic diagnose cluster.yaml",
        "zonemedic sweep --once --config config.yaml",
        "zonemedic incidents list --config config.yaml --since 7d",
        "zonemedic run --config config.yaml --log-format text -v",
    ],
    "run": [
        f"zonemedic run --config {_CONFIG}",
        "zonemedic run --config config.yaml --log-format text -v   # readable logs in a terminal",
    ],
    "sweep": [
        "zonemedic sweep --once --config config.yaml",
        "zonemedic sweep --once --config config.yaml --output json --no-digest",
    ],
    "diagnose": [
        f"kubectl get nodes,pods,{PYTORCH.plural},networkpolicies,ciliumnetworkpolicies -A -o yaml"
        " > cluster.yaml",
        "zonemedic diagnose cluster.yaml",
        "zonemedic diagnose examples/split-blocked.yaml"
        " --config examples/split-blocked.config.yaml --json",
        "zonemedic diagnose cluster.yaml --config /etc/zonemedic/config/config.yaml"
        "   # the agent's config: its diagnosis: section (groups)",
    ],
    "explain": [
        "zonemedic explain --from ml/llm-finetune-worker-0 --to ml/llm-finetune-master-0"
        " --port 23456/TCP",
        "zonemedic explain --from ml --from-labels app=trainer,role=worker"
        " --to ml/llm-finetune-master-0 --port 23456 --json   # a pod that does not exist yet",
        "zonemedic explain --snapshot cluster.yaml --matrix --namespace ml --port 23456"
        " --port 29500",
    ],
    "whatif": [
        "zonemedic whatif --snapshot cluster.yaml --apply allow-nccl.yaml",
        "zonemedic whatif --snapshot cluster.yaml --delete CiliumNetworkPolicy/ml/zone-b-only"
        " --json",
    ],
    "config": ["zonemedic config check config.yaml"],
    "admission": ["zonemedic admission manifest --config config.yaml"],
    "admission manifest": [
        "zonemedic admission manifest --config deploy/base/config.yaml",
        "zonemedic admission manifest --config config.yaml --url https://10.0.0.5:8443/admission/mutate",
    ],
    "admissions": [
        "zonemedic admissions --config config.yaml --since 7d",
        "zonemedic admissions --config config.yaml --outcome placed --json",
    ],
    "config check": [
        "zonemedic config check /etc/zonemedic/config/config.yaml",
        "zonemedic config check deploy/base/config.yaml   # pod paths: checked against the pod's"
        " layout",
        "ZONEMEDIC_HTTP__PORT=9090 zonemedic config check config.yaml   # overrides are checked too",
    ],
    "playbooks": ["zonemedic playbooks check playbooks/"],
    "playbooks check": ["zonemedic playbooks check playbooks/"],
    "incidents": [
        "zonemedic incidents list --config config.yaml --status awaiting_approval",
        "zonemedic incidents show 42 --config config.yaml",
    ],
    "incidents list": [
        "zonemedic incidents list --config config.yaml --since 7d --verdict zone_split_blocked",
        "zonemedic incidents list --database sqlite:///zonemedic.db --job ml/resnet --json",
    ],
    "incidents show": ["zonemedic incidents show 42 --config config.yaml"],
    "incidents patch": [
        "zonemedic incidents patch 42 --config config.yaml --format kustomize",
        "zonemedic incidents patch 42 --database sqlite:///zonemedic.db --format json6902 --json",
    ],
    "incidents stats": ["zonemedic incidents stats --config config.yaml --since 30d"],
    "incidents approve": [
        'zonemedic incidents approve 42 --by alice --reason "co-locate in us-east-1a"',
    ],
    "incidents reject": ['zonemedic incidents reject 42 --by alice --reason "ends within the hour"'],
    "incidents snooze": ["zonemedic incidents snooze 42 --for 24h --by alice"],
    "db": [
        "zonemedic db upgrade --config config.yaml",
        "zonemedic db purge --config config.yaml --older-than 90d",
    ],
    "db upgrade": [
        "zonemedic db upgrade --database postgresql+psycopg://zonemedic@db:5432/zonemedic",
        "zonemedic db upgrade --config config.yaml",
    ],
    "db current": ["zonemedic db current --config config.yaml"],
    "db purge": ["zonemedic db purge --config config.yaml --older-than 90d"],
    "demo": [
        "zonemedic demo                          # seed-degraded: ~40% GPU utilization, then ~85%",
        "zonemedic demo --scenario lab --interactive",
        "zonemedic demo --scenario seed-blocked --json   # the same as --output json",
    ],
    "twin": ["zonemedic twin up --scenario seed-blocked --kubeconfig twin.kubeconfig"],
    "twin up": [
        "zonemedic twin up --scenario seed-blocked --kubeconfig twin.kubeconfig",
        "kubectl --kubeconfig twin.kubeconfig get pods -A -o wide",
        "kubectl --kubeconfig twin.kubeconfig logs -n ml llm-finetune-worker-0 -p"
        "   # the simulated workload's log",
    ],
    "twin apiserver": [
        "zonemedic twin apiserver --kubeconfig twin.kubeconfig --port 6443",
    ],
}


def epilog(path: str) -> str | None:
    """The `examples:` block for a command path, or None when the table has no row for it."""
    lines = EXAMPLES.get(path)
    if not lines:
        return None
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)
