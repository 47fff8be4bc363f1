"""Adapters that read the world: Kubernetes list+watch cache, Prometheus queries, Alertmanager hooks."""
