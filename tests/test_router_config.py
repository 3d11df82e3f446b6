"""router.toml: one strict schema; a bad file refuses to start with one error, and a mistake never widens the gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from centralmcp_batch.router.catalog import ALLOW_LIST_NEEDS_DISTRUST
from centralmcp_batch.router.config import ConfigError, load_router
from centralmcp_batch.testing import call

ROOT = Path(__file__).resolve().parents[1]
TICKETS = 'module = "tests.backends.tickets:tickets_server"\n'


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "router.toml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'trust_annotations = "false"',
            (
                "backend 't': key 'trust_annotations' is 'false' (a string); "
                "expected true or false (a TOML boolean, not a string)"
            ),
        ),
        (
            "trust_anotations = false",
            (
                "backend 't': unknown key 'trust_anotations'; "
                "the keys are module, command, args, env, url, trust_annotations, read_allow, concurrency"
            ),
        ),
        (
            'read_allow = "get_ticket"',
            "backend 't': key 'read_allow' is 'get_ticket' (a string); expected a list of tool names (strings)",
        ),
        (
            "read_allow = [1, 2]",
            "backend 't': key 'read_allow' is [1, 2] (an array); expected a list of tool names (strings)",
        ),
        ('concurrency = "2"', "backend 't': key 'concurrency' is '2' (a string); expected a positive whole number"),
        ("concurrency = 2.5", "backend 't': key 'concurrency' is 2.5 (a float); expected a positive whole number"),
        ("concurrency = 0", "backend 't': key 'concurrency' is 0 (an integer); expected a positive whole number"),
        ("concurrency = true", "backend 't': key 'concurrency' is True (a boolean); expected a positive whole number"),
        (
            'url = "http://127.0.0.1:1/mcp"',
            "backend 't': needs exactly one of module, command or url, got module and url",
        ),
        ('args = ["x"]', "backend 't': key 'args' applies to a command backend only, and this one has 'module'"),
        ('read_allow = ["get_ticket"]', f"backend 't': {ALLOW_LIST_NEEDS_DISTRUST}"),
        ('trust_annotations = true\nread_allow = ["get_ticket"]', f"backend 't': {ALLOW_LIST_NEEDS_DISTRUST}"),
    ],
)
def test_a_bad_key_refuses_with_one_error_naming_backend_key_given_and_expected(
    tmp_path: Path, extra: str, message: str
) -> None:
    path = write(tmp_path, "[backends.t]\n" + TICKETS + extra + "\n")
    with pytest.raises(ConfigError) as refused:
        load_router(path)
    assert str(refused.value) == f"{path}: {message}"


def test_a_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[backends.t\n" + TICKETS)
    with pytest.raises(ConfigError) as refused:
        load_router(path)
    assert str(refused.value).startswith(f"{path}: not valid TOML: Expected ']'")


def test_an_env_table_with_a_wrong_value_never_shows_its_values(tmp_path: Path) -> None:
    path = write(tmp_path, '[backends.t]\ncommand = "x"\nenv = { TOKEN = "s3cret-token", N = 5 }\n')
    with pytest.raises(ConfigError, match="key 'env' is a table; expected a table of string values") as refused:
        load_router(path)
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("name = 'r'\n", "no [backends.NAME] tables"),
        ("nmae = 'r'\n[backends.t]\n" + TICKETS, "unknown top-level key 'nmae'; the keys are name and backends"),
        ("name = 3\n[backends.t]\n" + TICKETS, "key 'name' is 3 (an integer); expected a non-empty string"),
        (
            "[backends.t]\nread_allow = []\n",
            "backend 't': needs exactly one of module, command or url, got none of them",
        ),
        ("[backends]\nt = 'python'\n", "backend 't': expected a [backends.t] table, got 'python' (a string)"),
    ],
)
def test_the_file_itself_is_checked(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as refused:
        load_router(path)
    assert str(refused.value) == f"{path}: {message}"


@pytest.mark.anyio
async def test_a_valid_untrusted_table_reads_only_its_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    path = write(
        tmp_path,
        "[backends.t]\n" + TICKETS + 'trust_annotations = false\nread_allow = ["get_ticket"]\nconcurrency = 2\n',
    )
    router = load_router(path)
    calls = [
        {"name": "get_ticket", "arguments": {"ticket_id": "T-0001"}},
        {"name": "list_tickets"},
        {"name": "close_ticket", "arguments": {"ticket_id": "T-1"}},
    ]
    response = (await call(router.server, "invoke_read_tool_batch", {"calls": calls})).structured
    assert [item["status"] for item in response["results"]] == ["ok", "blocked", "blocked"]
    assert router.catalog.find("get_ticket").concurrency == 2  # type: ignore[union-attr]


def test_a_module_backend_that_cannot_be_imported_says_how_to_make_it_importable(tmp_path: Path) -> None:
    path = write(tmp_path, '[backends.inv]\nmodule = "inventory_server_not_installed"\n')
    with pytest.raises(ModuleNotFoundError) as refused:
        load_router(path)
    text = str(refused.value)
    assert text.startswith("backend 'inv': no module named 'inventory_server_not_installed'") and "PYTHONPATH" in text


def test_serve_refuses_a_bad_file_with_its_one_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[backends.t]\n" + TICKETS + 'trust_annotations = "false"\n')
    finished = subprocess.run(
        [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert finished.returncode == 1
    lines = [line for line in finished.stderr.splitlines() if "error" in line]
    assert lines == [
        (
            f"centralmcp-batch: error: cannot start the router: ConfigError: {path}: backend 't': "
            "key 'trust_annotations' is 'false' (a string); expected true or false (a TOML boolean, not a string)"
        )
    ]
