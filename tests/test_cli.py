"""The command line as a person meets it, through the real entry point (`agent.cli.main` in process,
the installed `zonemedic` console script as a process): `--version` from the package metadata, an
example at the end of every `--help` (and every example parses), readable logs on stderr for the
one-shot commands (warnings and errors unless `-v`), JSON logs for `run` unless stderr is a terminal
or `--log-format text` says so."""

from __future__ import annotations

import importlib.metadata
import os
import pty
import shlex
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import agent
from agent.cli import build_parser, command_parsers, main
from agent.commands.examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
ZONEMEDIC = str(Path(sys.executable).with_name("zonemedic"))  # the installed console script


def command_paths() -> list[str]:
    """Every command path the parser offers: "", "run", "db upgrade", ..."""
    return [path for path, _ in command_parsers(build_parser())]


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZONEMEDIC_")}
    return subprocess.run(
        [ZONEMEDIC, *args], capture_output=True, text=True, timeout=60, check=False,
        env={**clean, **(env or {})}, cwd=cwd or ROOT,
    )


def test_version_comes_from_the_package_metadata() -> None:
    result = cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"zonemedic {importlib.metadata.version('zonemedic')}\n"
    assert importlib.metadata.version("zonemedic") == agent.__version__  # the source says the same


@pytest.mark.parametrize("path", command_paths())
def test_every_help_ends_with_examples_that_parse(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*path.split(), "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "\nexamples:\n" in out, f"`zonemedic {path} --help` has no example"
    examples = out.split("\nexamples:\n", 1)[1].splitlines()
    ours = [line.strip() for line in examples if line.strip().startswith("zonemedic")]
    assert any(line.startswith(f"zonemedic {path}".strip()) for line in ours)
    parser = build_parser()
    for line in ours:
        argv = shlex.split(line, comments=True)[1:]
        if argv != ["--version"]:
            parser.parse_args(argv)  # argparse exits (code 2) on an example that does not parse


def test_every_example_row_names_a_command_or_one_not_yet_offered() -> None:
    offered = set(command_paths())
    pending = {"incidents approve", "incidents reject", "incidents snooze"}  # decisions (issue 10)
    assert set(EXAMPLES) - offered <= pending


def test_the_diagnose_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = [e for e in EXAMPLES["diagnose"] if "examples/" in e]
    assert main(shlex.split(line)[1:]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert {f["verdict"] for f in out["findings"]} >= {"zone_split_blocked"}


def test_one_shot_commands_log_warnings_only_and_readably(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'zm.db'}"
    quiet = cli("db", "upgrade", "--database", url)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""  # alembic's info lines are not for a person by default
    assert "is at revision" in quiet.stdout
    for args in (("db", "current", "-v", "--database", url), ("-v", "db", "current", "--database", url)):
        verbose = cli(*args)
        assert verbose.returncode == 0, verbose.stderr
        lines = verbose.stderr.splitlines()
        assert lines and all(line.startswith("zonemedic: info: ") for line in lines), lines
        assert "Context impl SQLiteImpl" in verbose.stderr
    as_json = cli("db", "current", "-v", "--log-format", "json", "--database", url)
    records = [orjson.loads(line) for line in as_json.stderr.splitlines()]
    assert records and {r["level"] for r in records} == {"info"}


def unreachable_database_config(tmp_path: Path) -> Path:
    """A config whose database refuses connections: `run` logs warnings, then exits 1 in ~1 s."""
    path = tmp_path / "config.yaml"
    path.write_text(
        f"data_dir: {tmp_path}\nplaybooks_dir: {ROOT / 'playbooks'}\n"
        "database: {url: 'postgresql+psycopg://postgres@127.0.0.1:9/zm', start_timeout: 1s,"
        " connect_timeout: 1s}\n"
    )
    return path


def test_run_logs_json_when_stderr_is_not_a_terminal_and_text_when_asked(tmp_path: Path) -> None:
    config = unreachable_database_config(tmp_path)
    piped = cli("run", "--config", str(config))
    assert piped.returncode == 1
    *logs, error = piped.stderr.splitlines()
    records = [orjson.loads(line) for line in logs]
    assert records and all(r["level"] == "warning" and "unavailable" in r["message"] for r in records)
    assert error.startswith("zonemedic: database ") and "Traceback" not in piped.stderr
    text = cli("run", "--config", str(config), "--log-format", "text")
    *logs, _ = text.stderr.splitlines()
    assert logs and all(" warning database " in line and not line.startswith("{") for line in logs)


def test_run_logs_text_on_a_terminal(tmp_path: Path) -> None:
    config = unreachable_database_config(tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ZONEMEDIC_")}
    leader, follower = pty.openpty()
    chunks: list[bytes] = []
    try:
        proc = subprocess.Popen(
            [ZONEMEDIC, "run", "--config", str(config)], stdout=subprocess.DEVNULL,
            stderr=follower, env=clean, cwd=ROOT,
        )
        os.close(follower)  # the child holds the terminal now; reading ends when it exits
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=60)
    finally:
        os.close(leader)
    assert proc.returncode == 1
    lines = b"".join(chunks).decode().splitlines()
    assert any(" warning database " in line for line in lines), lines
    assert not any(line.startswith("{") for line in lines)


# --------------------------------------------------------------------------------------------
# one convention for machine output: `--output json`, or its alias `--json`, on every command

MACHINE_OUTPUT = {  # command path -> the arguments it needs besides the output flag
    "diagnose": ["examples/split-blocked.yaml"],
    "explain": ["--snapshot", "examples/split-blocked.yaml", "--from", "ml/resnet-worker-0",
                "--to", "ml/resnet-master-0", "--port", "23456"],
    "whatif": ["--snapshot", "examples/split-blocked.yaml", "--delete",
               "CiliumNetworkPolicy/ml/zone-b-only"],
    "sweep": ["--once"],
    "demo": [],
    "incidents list": [],
    "incidents show": ["1"],
    "incidents patch": ["1"],
    "incidents stats": [],
    "incidents approve": ["1"],
    "incidents reject": ["1"],
    "incidents snooze": ["1"],
    "admissions": [],
}


def test_every_command_with_machine_output_takes_both_spellings() -> None:
    parser = build_parser()
    offered = {path: sub for path, sub in command_parsers(parser)}
    with_output = {path for path, sub in offered.items() if "--output" in sub._option_string_actions}
    assert with_output == set(MACHINE_OUTPUT)
    for path, sub in offered.items():
        assert ("--json" in sub._option_string_actions) == (path in with_output), path
    for path, needed in MACHINE_OUTPUT.items():
        long_form = parser.parse_args([*path.split(), *needed, "--output", "json"])
        alias = parser.parse_args([*path.split(), *needed, "--json"])
        assert long_form.output == alias.output == "json", path
        assert "--json" in offered[path].format_help()


def test_json_and_output_json_print_the_same(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'zm.db'}"
    assert cli("db", "upgrade", "--database", database).returncode == 0
    for argv in (["diagnose", "examples/split-blocked.yaml"],
                 ["explain", *MACHINE_OUTPUT["explain"]],
                 ["incidents", "list", "--database", database]):
        long_form, alias = cli(*argv, "--output", "json"), cli(*argv, "--json")
        assert (long_form.returncode, alias.returncode) == (0, 0), alias.stderr
        assert alias.stdout == long_form.stdout != ""
        orjson.loads(alias.stdout)
