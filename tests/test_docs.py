"""The docs site stays true: every environment variable and every hook is documented, the generated tables hold."""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from centralmcp_batch import hookspecs, settings
from centralmcp_batch.cli import PROG

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("centralmcp_batch_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generator = load_generator()


def pages() -> dict[str, str]:
    """Every page's Markdown as the site renders it: generated tables filled in."""
    manifest = generator.manifest_data()
    return {
        str(page.relative_to(DOCS)): generator.render(page.read_text(), manifest) for page in sorted(DOCS.rglob("*.md"))
    }


def variables_the_package_reads() -> set[str]:
    named: set[str] = set()
    for source in (ROOT / "centralmcp_batch").rglob("*.py"):
        named |= set(re.findall(r"[\"'](CENTRALMCP_[A-Z0-9_]+)[\"']", source.read_text()))
    return named


def test_every_environment_variable_the_package_reads_is_in_the_configuration_page() -> None:
    configuration = pages()["reference/configuration.md"]
    named = variables_the_package_reads()
    assert len(named) >= 10  # the search found the package's settings, not nothing
    missing = sorted(name for name in named if f"`{name}`" not in configuration)
    assert not missing, missing


def test_every_batch_setting_has_a_generated_row_with_its_default_and_range() -> None:
    configuration = pages()["reference/configuration.md"]
    assert generator.MARKER.format("settings") not in configuration
    for setting in settings.SETTINGS:
        row = next(line for line in configuration.splitlines() if line.startswith(f"| `{setting.env}` |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == f"{setting.default:g}"
        assert cells[2].startswith(f"{setting.minimum:g}")
        assert setting.maximum is None or cells[2].endswith(f"{setting.maximum:g}")
        assert len(cells[3]) > 20


def test_the_hand_written_rows_give_each_router_and_demo_setting_its_default_and_range() -> None:
    """The reference router's and the demo's numbers are read through ``Setting`` too, but their rows are typed."""
    from centralmcp_batch.ratelimit import RATE
    from centralmcp_batch.router.core import CURSOR_TTL, MAX_BYTES, MAX_ITEMS
    from centralmcp_batch.router.demo import LATENCY

    configuration = pages()["reference/configuration.md"]
    for setting in (RATE, MAX_ITEMS, MAX_BYTES, CURSOR_TTL, LATENCY):
        row = next(line for line in configuration.splitlines() if line.startswith(f"| `{setting.env}` |"))
        default, accepted = (cell.strip() for cell in row.strip("|").split("|")[1:3])
        bounds = "and up" if setting.maximum is None else f"to {setting.maximum:g}"
        assert default == f"{setting.default:g}", (setting.env, default)
        assert accepted.startswith(f"{setting.minimum:g} {bounds}"), (setting.env, accepted)


def test_every_hookspec_is_in_the_generated_table_and_the_reference() -> None:
    hooks_page = pages()["reference/hooks.md"]
    assert "::: centralmcp_batch.hookspecs" in (DOCS / "reference" / "hooks.md").read_text()
    names = [name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("centralmcp_")]
    assert len(names) >= 9
    for name in names:
        arguments = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"`{name}({arguments})`" in hooks_page, name


def test_every_hook_row_means_what_the_specs_first_paragraph_says_whole() -> None:
    """A summary that wraps onto a second line was cut off mid-sentence in the table."""
    rows = {
        line.split("`")[1].partition("(")[0]: line
        for line in pages()["reference/hooks.md"].splitlines()
        if line.startswith("| [`centralmcp_")
    }
    assert len(rows) == len(generator.specs())
    for name, spec in generator.specs():
        meaning = rows[name].rstrip(" |").rpartition(" | ")[2]
        first = " ".join((inspect.getdoc(spec) or "").partition("\n\n")[0].split())
        assert meaning == first and meaning.endswith("."), (name, meaning)


def test_every_hookspec_documents_each_of_its_parameters() -> None:
    """mkdocstrings renders the ``:param:`` lines; a parameter without one would be a blank row."""
    for name, spec in generator.specs():
        doc = inspect.getdoc(spec) or ""
        for parameter in inspect.signature(spec).parameters:
            assert f":param {parameter}:" in doc, (name, parameter)


def test_the_settings_table_refuses_to_drift_from_plugin_toml() -> None:
    manifest = generator.manifest_data()
    changed_default = copy.deepcopy(manifest)
    changed_default["settings"][0]["default"] = 1
    no_meaning = copy.deepcopy(manifest)
    del no_meaning["settings"][1]["description"]
    extra = copy.deepcopy(manifest)
    extra["settings"].append(
        {"env": "CENTRALMCP_NOT_READ", "default": 1, "minimum": 0, "description": "nothing reads it"}
    )
    missing = copy.deepcopy(manifest)
    missing["settings"].pop()
    for broken in (changed_default, no_meaning, extra, missing):
        with pytest.raises(generator.DocsDrift):
            generator.settings_table(broken)


def test_the_hook_table_refuses_a_hook_plugin_toml_does_not_place() -> None:
    manifest: dict[str, Any] = generator.manifest_data()
    manifest["hooks"]["calls"] = [name for name in manifest["hooks"]["calls"] if name != "centralmcp_batch_completed"]
    with pytest.raises(generator.DocsDrift, match="centralmcp_batch_completed"):
        generator.hooks_table(manifest)


def test_every_page_is_in_the_nav_and_every_nav_page_exists() -> None:
    nav = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    on_disk = set(pages())
    assert on_disk - set(nav) == set(), "a page nobody can reach"
    assert set(nav) - on_disk == set(), "a nav entry with no page"


def test_every_test_count_a_page_states_is_what_pytest_collects() -> None:
    """A page's "(`tests/test_x.py`, N tests" is held to pytest's own count: those drifted as tests came."""
    stated: dict[str, int] = {}
    for text in pages().values():
        for path, count in re.findall(r"`(tests/test_\w+\.py)`, (\d+) tests", text):
            stated[path] = int(count)
    assert len(stated) >= 3  # the search found the reliability page's counts, not nothing
    collected = subprocess.run(
        # -m "": the slow tier's tests count too (pyproject's addopts leave them out of a plain run)
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "", *sorted(stated)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    counts = Counter(line.split("::", 1)[0] for line in collected.stdout.splitlines() if "::" in line)
    assert dict(counts) == stated


def test_the_site_builds_strictly_and_shows_every_hook_and_variable(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed; .ci/checks builds the site with it")
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    hooks_html = (site / "reference" / "hooks" / "index.html").read_text()
    for name, _ in generator.specs():
        assert f'id="centralmcp_batch.hookspecs.{name}"' in hooks_html, name
    configuration_html = (site / "reference" / "configuration" / "index.html").read_text()
    for name in variables_the_package_reads():
        assert name in configuration_html, name


def test_the_router_mode_variable_has_its_own_row_in_the_configuration_page() -> None:
    configuration = pages()["reference/configuration.md"]
    assert settings.ROUTER_MODE in variables_the_package_reads()
    row = next(line for line in configuration.splitlines() if line.startswith(f"| `{settings.ROUTER_MODE}` |"))
    assert "`minimal`" in row and "registers nothing" in row


def test_no_page_includes_the_readme_and_every_snippet_names_a_file() -> None:
    """The README is the repository's front page, not a source of docs fragments (snippets read from the root)."""
    included = [
        (name, target) for name, text in pages().items() for target in re.findall(r'^--8<--\s+"([^"]+)"', text, re.M)
    ]
    assert ("changelog.md", "CHANGELOG.md") in included
    for name, target in included:
        assert Path(target.partition(":")[0]).name != "README.md", name
        assert (ROOT / target.partition(":")[0]).is_file(), (name, target)


def long_options(parser: Any) -> set[str]:
    return {
        option
        for action in parser._actions  # argparse keeps no public list of its arguments
        if action.help != "==SUPPRESS==" and action.option_strings
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def test_every_option_of_serve_and_plugins_is_in_the_reference_router_guide() -> None:
    from centralmcp_batch import cli

    subcommands = next(action for action in cli.build_parser()._actions if action.dest == "command").choices
    assert isinstance(subcommands, dict)  # argparse's subparsers action maps each name to its parser
    guide = pages()["guides/reference-router.md"]
    for name in ("serve", "plugins"):
        options = long_options(subcommands[name])
        assert "--config" in options, name
        missing = sorted(option for option in options if f"`{option}" not in guide and f" {option} " not in guide)
        assert not missing, (name, missing)


def section_of(page: str, title: str) -> str:
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", page, re.S | re.M)
    assert match, f"no section '{title}'"
    return match.group(1)


def test_the_performance_page_holds_every_table_target_and_option_of_the_benchmark() -> None:
    """The page's tables are the benchmark's own output: same titles, same columns, every target, before the plots."""
    from centralmcp_batch import bench

    page = pages()["performance.md"]
    figures = page.split("\n## Plots\n", 1)[0]
    assert figures != page, "the page has no '## Plots' section"
    for title, columns in bench.TABLES.values():
        table = section_of(figures, title)
        assert table.strip().splitlines()[0] == "| " + " | ".join(columns) + " |", title
        assert len(table.strip().splitlines()) >= 3, title  # a header, a rule and at least one row
    targets = section_of(figures, "Targets")
    for target in bench.targets({}):
        assert f"- {target['target']}: " in targets, target["target"]
    for option in long_options(bench.parser()):
        assert f"bench {option}" in figures or f" {option} " in figures, option
    # Other pages link to the two decisions by their headings.
    for title in ("The output schema, a documented decision", "Sync tools in a worker thread, a documented decision"):
        assert len(section_of(figures, title).strip()) > 500, title


def test_the_performance_page_is_for_users_and_runs_every_benchmark() -> None:
    """About 300 lines (the history of the figures is in git); each benchmark in ``benchmarks/`` is shown
    run, in a sh block, so a reader can measure what the page says."""
    page = pages()["performance.md"]
    assert len(page.splitlines()) <= 320
    commands = "\n".join(body for language, body in fenced_blocks(page) if language == "sh")
    scripts = sorted(path.name for path in (ROOT / "benchmarks").glob("*.py") if "def main(" in path.read_text())
    assert scripts == ["account_rate.py", "centralmcp_baseline.py", "rate_stores.py"]
    for script in scripts:
        assert f"python benchmarks/{script}" in commands, script
    for regime in ("Latency-bound: concurrency", "Rate-bound: tokens", "What the rate store costs", "Memory"):
        assert len(section_of(page, regime).strip()) > 300, regime


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a page as (language, body); a block without a language has ''."""
    blocks = re.findall(r"^```(\w*)[ \t]*\n(.*?)^```", text, re.S | re.M)
    return [(language, body.removesuffix("\n")) for language, body in blocks]


def shown_command_lines() -> list[tuple[str, list[str]]]:
    """The arguments after ``centralmcp-batch`` in every command a page's console or sh block runs."""
    found = []
    texts = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8"), **pages()}
    for name, text in texts.items():
        for language, body in fenced_blocks(text):
            if language not in ("console", "sh"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                if language == "console" and not line.startswith("$ "):
                    continue  # a line of output
                for command in line.removeprefix("$ ").split("&&"):
                    words = shlex.split(command, comments=True)
                    # `claude mcp add`: its own options, the server's name, then `--` and the command
                    if words[:3] == ["claude", "mcp", "add"]:
                        words = words[words.index("--") + 1 :] if "--" in words else []
                    at = next((i for i, word in enumerate(words) if is_the_command(word)), None)
                    if at is not None and at + 1 < len(words):
                        found.append((name, words[at + 1 :]))
    return found


def is_the_command(word: str) -> bool:
    """``centralmcp-batch``, a path to it, or ``$(which centralmcp-batch)`` as the shell word before it runs."""
    return Path(word).name == PROG or word == f"$(which {PROG})"


def parses(arguments: list[str]) -> bool:
    from centralmcp_batch import bench, cli

    try:
        if arguments[0] == "bench":
            bench.parser().parse_args(arguments[1:])
        else:
            cli.build_parser().parse_args(arguments)
    except SystemExit:
        return False
    return True


def test_every_command_a_page_shows_parses_with_the_real_command(capsys: pytest.CaptureFixture[str]) -> None:
    """A renamed or removed option fails here, not in the hands of a reader who copies the line."""
    shown = shown_command_lines()
    assert len(shown) >= 12  # the search found the guides' commands, not nothing
    assert {arguments[0] for _, arguments in shown} >= {"serve", "demo", "plugins", "bench"}
    refused = [(name, " ".join(arguments)) for name, arguments in shown if not parses(arguments)]
    assert not refused, (refused, capsys.readouterr().err)


def test_the_claude_desktop_example_runs_a_command_that_parses() -> None:
    guide = pages()["guides/reference-router.md"]
    config = next(json.loads(body) for language, body in fenced_blocks(guide) if language == "json")
    server = config["mcpServers"]["centralmcp-batch"]
    assert Path(server["command"]).name == PROG
    assert parses(server["args"]), server["args"]


def test_the_synopsis_names_each_subcommands_options_exactly() -> None:
    """The four-line synopsis the README and the front page show, against each subcommand's parser."""
    from centralmcp_batch import bench, cli

    subcommands = next(action for action in cli.build_parser()._actions if action.dest == "command").choices
    assert isinstance(subcommands, dict)
    parsers = {**subcommands, "bench": bench.parser()}
    for name, text in {
        "README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
        "index.md": pages()["index.md"],
    }.items():
        synopsis = next(body for language, body in fenced_blocks(text) if language == "" and f"{PROG} serve" in body)
        lines = re.split(rf"^(?={PROG} )", synopsis, flags=re.M)
        shown = {line.split()[1]: set(re.findall(r"--[a-z][a-z-]*", line)) for line in lines if line.strip()}
        assert shown.keys() == parsers.keys(), name
        for command, options in shown.items():
            assert options == long_options(parsers[command]), (name, command)


def test_the_router_toml_example_and_its_error_are_what_the_parser_says() -> None:
    """The guide's example passes the strict schema, and its sample error is the parser's own text."""
    from centralmcp_batch.router.config import ConfigError, check_file

    guide = pages()["guides/reference-router.md"]
    example = next(body for language, body in fenced_blocks(guide) if language == "toml")
    check_file(tomllib.loads(example))
    said = re.search(r"for example `(backend 'tickets': key 'trust_annotations' is[^`]+)`", guide.replace("\n", " "))
    assert said, "the guide no longer shows the trust_annotations error"
    broken = example.replace("trust_annotations = false", 'trust_annotations = "false"')
    with pytest.raises(ConfigError) as refused:
        check_file(tomllib.loads(broken))
    assert str(refused.value) == said.group(1)


def test_the_host_guides_example_hooks_install_on_a_real_server() -> None:
    """Its hook names and arguments are the spec's: ``hosting.install`` refuses a misspelled hook or argument."""
    from centralmcp_batch import _compat, hosting

    guide = pages()["guides/your-host.md"]
    example = next(
        body for language, body in fenced_blocks(guide) if language == "python" and "class MyHostHooks" in body
    )
    namespace: dict[str, Any] = {}
    exec(compile(example, "your-host.md", "exec"), namespace)  # the page's own code, as a reader copies it
    hooks = namespace["MyHostHooks"](catalog={}, limiter=None, backends={})
    pm = hosting.install(_compat.new_server("docs-example"), hooks)
    implemented = {caller.name for caller in pm.get_hookcallers(hooks) or ()}
    assert implemented == {name for name, _ in generator.specs() if name in vars(type(hooks))}
    assert len(implemented) == 5  # three required host hooks and both optional ones


def test_the_batch_contracts_limits_table_holds_the_engines_own_numbers() -> None:
    from centralmcp_batch import budget, items, models

    page = pages()["reference/batch.md"]
    rows = {}
    for line in section_of(page, "Limits").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= set("-"):
            rows[cells[0]] = (cells[1], cells[2])
    by_env = {setting.env: setting for setting in settings.SETTINGS}
    budget_setting, concurrency = by_env[settings.RESPONSE_MAX_BYTES], by_env[settings.CONCURRENCY]
    expected = {
        "entries per batch": (f"{models.MAX_CALLS}", "-"),
        "id / name length": (f"{models.MAX_ID_CHARS} / {models.MAX_NAME_CHARS} characters", "-"),
        "arguments": (
            f"{models.MAX_ARGUMENT_BYTES:,} bytes as JSON, {models.MAX_ARGUMENT_DEPTH} levels deep",
            "-",
        ),
        "result nesting": (f"{items.MAX_RESULT_DEPTH} levels", "-"),
        "response budget": (
            f"{budget_setting.default:,.0f} bytes (minimum {budget_setting.minimum:,.0f})",
            f"`{budget_setting.env}`",
        ),
        "entries running at once": (
            f"{concurrency.default:g} ({concurrency.minimum:g} to {concurrency.maximum:g})",
            f"`{concurrency.env}`",
        ),
        "time per backend call": (f"{by_env[settings.CALL_TIMEOUT].default:g} s", f"`{settings.CALL_TIMEOUT}`"),
        "time per batch": (f"{by_env[settings.BATCH_TIMEOUT].default:g} s", f"`{settings.BATCH_TIMEOUT}`"),
        "error text per item": (f"{items.ERROR_CHARS} characters ({budget.SHORT_ERROR_CHARS} when shrunk)", "-"),
    }
    rows.pop("Limit", None)  # the header
    assert rows == expected


# -- the deployment page's log samples ---------------------------------------------------------

# Where the samples' stores are: the page shows a user's paths and hosts, the test makes its own.
SAMPLE_SQLITE_PATH = "/home/me/.cache/centralmcp-batch/rate.sqlite3"
SAMPLE_REDIS_HOST = "redis.internal:6379"


def limiter_log_samples() -> list[str]:
    """Each limiter line a ``text`` block of the deployment page shows."""
    blocks = [body for language, body in fenced_blocks(pages()["deployment.md"]) if language == "text"]
    return [line for body in blocks for line in body.splitlines() if " centralmcp_batch.ratelimit.limiter: " in line]


def as_pattern(sample: str, sqlite_path: str, redis_host: str) -> re.Pattern[str]:
    """The sample as a pattern over a real line: the test's own stores for the page's, ``...`` and the
    seconds of a rejoin for whatever the real line says there; everything else as the page writes it."""
    text = sample.replace(SAMPLE_SQLITE_PATH, sqlite_path).replace(SAMPLE_REDIS_HOST, redis_host)
    pattern = re.escape(text).replace(re.escape("..."), ".+")
    pattern = re.sub(r"back\\ after\\ [0-9]+\\.[0-9]", r"back\\ after\\ [0-9]+\\.[0-9]", pattern)
    return re.compile(pattern)


async def real_limiter_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> tuple[list[str], str, str]:
    """What the limiter logs in each situation the page describes, formatted as ``serve`` writes a line
    after its timestamp, with the SQLite path and Redis host it used."""
    import logging

    from redis_server import RedisServer

    from centralmcp_batch.ratelimit import RateLimiter, SqliteStore, open_store
    from centralmcp_batch.ratelimit.limiter import RETRY_SECONDS

    shared, corrupt = tmp_path / "rate.sqlite3", tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(b"not a database" * 100)
    redis = RedisServer(tmp_path)  # not started yet: unreachable, until it is
    with caplog.at_level(logging.WARNING, "centralmcp_batch.ratelimit.limiter"):
        routers = [RateLimiter(SqliteStore(shared), 8.0, 8), RateLimiter(SqliteStore(shared), 5.0, 5)]
        for _ in range(2):  # each takes a token in turn: the second then finds the first's numbers
            for router in routers:
                await router.acquire()
        limiters = [*routers, RateLimiter(SqliteStore(corrupt), 8.0, 8), RateLimiter(open_store(redis.url), 8.0, 8)]
        for limiter in limiters[2:]:
            await limiter.acquire()
        redis.start()
        try:
            await anyio.sleep(RETRY_SECONDS * 1.1)  # the limiter tries its store again at most this often
            await limiters[-1].acquire()
        finally:
            for limiter in limiters:
                await limiter.store.close()
            redis.stop()
    formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    records = [record for record in caplog.records if record.name == "centralmcp_batch.ratelimit.limiter"]
    return [formatter.format(record) for record in records], str(shared), f"127.0.0.1:{redis.port}"


@pytest.mark.anyio
async def test_the_deployment_pages_log_samples_are_lines_the_limiter_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines, sqlite_path, redis_host = await real_limiter_lines(tmp_path, caplog)
    samples = limiter_log_samples()
    assert len(samples) == 4, samples  # the mismatch, two outages, the rejoin
    for sample in samples:
        patterns = [as_pattern(sample, path, redis_host) for path in (sqlite_path, str(tmp_path / "corrupt.sqlite3"))]
        assert any(pattern.fullmatch(line) for pattern in patterns for line in lines), (sample, lines)
