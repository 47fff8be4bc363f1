"""`zonemedic admission manifest`: print the MutatingWebhookConfiguration of the admission webhook.

`zonemedic admission manifest [--config FILE] [--url URL]` prints, as YAML, the
MutatingWebhookConfiguration for that configuration's `admission:` (and `diagnosis.groups`)
settings (`agent.admission.manifest`): the one in deploy/base/admission-webhook.yaml is this
command's output for deploy/base/config.yaml. `--url` (or `admission.url`) writes a
`clientConfig.url` instead of the Service reference. Bad input (a configuration `config check`
refuses, a URL that is not https://) is one line, exit 2. Reads nothing else, changes nothing.
Called by `agent.cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from agent.errors import InputError
from agent.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "admission", help="the admission webhook (print its MutatingWebhookConfiguration)",
        description="Work with the agent's mutating admission webhook.",
    )
    actions = parser.add_subparsers(dest="admission_action", metavar="ACTION")
    actions.required = True
    manifest = actions.add_parser(
        "manifest", help="print the MutatingWebhookConfiguration for a configuration",
        description="Print the MutatingWebhookConfiguration (YAML) the agent's admission "
        "settings call for.",
    )
    manifest.add_argument("--config", metavar="FILE", help="the agent's configuration file (YAML)")
    manifest.add_argument("--url", metavar="URL",
                          help="call the webhook at this https:// URL (clientConfig.url) instead "
                          "of through the Service")  # fmt: skip
    manifest.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from agent.admission.manifest import webhook_configuration

    if args.url is not None and not str(args.url).startswith("https://"):
        raise InputError(f"--url: must start with https://, got {args.url!r}")
    settings = load_settings(Path(args.config) if args.config else None, os.environ)
    manifest = webhook_configuration(settings, url=args.url)
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False))
    return 0
