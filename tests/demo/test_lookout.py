"""What the demo sees: the PromQL of the target's GPU utilization (table-driven), the conditions read
from what reached the fake Slack (a real server over HTTP), and no utilization without Prometheus."""

from __future__ import annotations

import pytest
from slack_sdk import WebClient

from agent.demo.lookout import Lookout, utilization_expr
from agent.demo.stage import Stage, Target
from agent.fakes.slack import FakeSlack


@pytest.mark.parametrize(("target", "expr"), [
    (Target("PyTorchJob", "ml", "llm", {"training.kubeflow.org/job-name": "llm"}),
     'avg(DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod!=""} * on (namespace, pod) group_left '
     'max by (namespace, pod) (kube_pod_labels{namespace="ml",'
     'label_training_kubeflow_org_job_name="llm"}))'),
    (Target("group", "vision", "resnet", {"team": "cv", "app": "resnet"}),
     'avg(DCGM_FI_DEV_GPU_UTIL{namespace="vision",pod!=""} * on (namespace, pod) group_left '
     'max by (namespace, pod) (kube_pod_labels{namespace="vision",'
     'label_app="resnet",label_team="cv"}))'),
])
def test_the_utilization_query_joins_the_target_pods_labels(target: Target, expr: str) -> None:
    assert utilization_expr(target) == expr


def test_the_slack_conditions_follow_the_post_its_edit_and_its_thread() -> None:
    stage = Stage("seed-degraded", metrics=False)  # not entered: nothing else runs
    with FakeSlack() as slack:
        stage.slack = slack
        look = Lookout(stage)
        client = WebClient(token=slack.bot_token, base_url=slack.base_url)
        assert not (look.thread_says("Approved by") or look.message_is("open")
                    or look.utilization_shown())

        posted = client.chat_postMessage(channel="C1", text="[open] split", blocks=[
            {"type": "section", "text": {"type": "mrkdwn", "text": "*split* found"}}])
        assert look.message_is("open") and not look.message_is("resolved")
        assert not look.utilization_shown()

        client.chat_update(channel="C1", ts=posted["ts"], text="[resolved] split", blocks=[
            {"type": "section", "text": {"type": "mrkdwn", "text": "GPU utilization: 41%"}}])
        assert look.message_is("resolved") and look.utilization_shown()
        assert not look.thread_says("Resolved")

        client.chat_postMessage(channel="C1", text="Resolved: co-located", thread_ts=posted["ts"])
        assert look.thread_says("Resolved") and not look.thread_says("Rejected by")


def test_without_prometheus_there_is_no_utilization() -> None:
    look = Lookout(Stage("seed-degraded", metrics=False))
    assert look.utilization_now() is None
    assert look.utilization_samples(start=0.0, end=60.0) == []
