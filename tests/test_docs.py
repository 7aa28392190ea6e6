"""The documentation stays true (issue 29, item 5): README.md is short and starts with the two
commands; every relative link in README.md and docs/*.md points to a file that exists; every
`hetero-exporter COMMAND --flag` they show uses a command and flags the CLI has."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from hetero_exporter import cli, registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
INLINE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INVOCATION = re.compile(r"(?<![\w/.-])(?:[\w./-]*/)?hetero-exporter[ \t]+([a-z][a-z-]*)([^\n]*)")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)")
# a shell line ends an invocation at these; a pipe only when another program follows it
# (`[--collector.NAME | --no-collector.NAME]` is one synopsis)
END = re.compile(r"\s(?:&&|\|\||;|#)|\s\|\s+(?!-)")
COLLECTING = {"run", "inspect", "top", "health"}  # the commands that take --collector.NAME
PLACEHOLDERS = {"NAME"}  # --collector.NAME in a synopsis


def _markdown(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def code_texts(text: str) -> Iterator[str]:
    """The fenced blocks (with shell continuation lines joined) and the inline code spans."""
    prose = text
    for m in FENCE.finditer(text):
        yield m.group(2).replace("\\\n", " ")
        prose = prose.replace(m.group(0), "\n" * m.group(0).count("\n"), 1)
    for m in INLINE.finditer(prose):
        yield m.group(2).replace("\n", " ")


def invocations(text: str) -> Iterator[tuple[str, str]]:
    """(command, the rest of its line) of every `hetero-exporter COMMAND ...` in the code of ``text``."""
    for code in code_texts(text):
        for m in INVOCATION.finditer(code):
            rest = m.group(2)
            end = END.search(rest)
            yield m.group(1), rest[:end.start()] if end else rest


def _subparsers() -> dict:
    parser = cli.build_parser()
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return dict(action.choices)


def check_invocations(text: str) -> list[str]:
    """What is wrong with the `hetero-exporter ...` invocations in ``text``'s code: an unknown
    command, a flag its command does not take, an unknown collector or parse tool."""
    commands = _subparsers()
    collectors = set(registry.collector_entries())
    tools = set(registry.parsers()) | {cli.KERNEL_LOG_TOOL}
    problems = []
    for command, rest in invocations(text):
        shown = f"hetero-exporter {command}{rest}".strip()
        sub = commands.get(command)
        if sub is None:
            problems.append(f"{shown}: no command {command!r}")
            continue
        known = {o for a in sub._actions for o in a.option_strings}
        for flag in FLAG.findall(rest):
            name = flag.split("=", 1)[0]
            if name in known:
                continue
            collector = re.fullmatch(r"--(?:no-)?collector\.(\w+)", name)
            if collector and command in COLLECTING and collector.group(1) in collectors | PLACEHOLDERS:
                continue
            problems.append(f"{shown}: {command} has no flag {name}")
        if command == "parse":
            words = [w for w in re.sub(r"\[[^\]]*\]", " ", rest).split() if not w.startswith("-")]
            if words and words[0] not in tools | {"TOOL"}:
                problems.append(f"{shown}: parse knows no tool {words[0]!r}")
    return problems


def relative_links(text: str) -> Iterator[str]:
    prose = FENCE.sub("", text)
    prose = INLINE.sub("", prose)
    for m in LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor of the same page
        yield target.split("#", 1)[0]


# --- README ---------------------------------------------------------------------------------------

def test_the_readme_is_short():
    lines = _markdown(README).splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_readme_starts_with_the_run_and_the_test_command():
    text = _markdown(README)
    first, second = [m.group(2).strip() for m in FENCE.finditer(text)][:2]
    assert "pip install '.[all]'" in first and "hetero-exporter run --simulate-if-absent" in first, first
    assert "pytest" in second and "'.[all,test]'" in second, second
    # .ci/run runs the line after <!-- ci:test --> (its awk program), so that must be this block
    awk = re.search(r"awk '([^']*)' README.md", (ROOT / ".ci" / "run").read_text()).group(1)
    extracted = subprocess.run(["awk", awk, str(README)], capture_output=True, text=True, check=True).stdout
    assert extracted.strip() == second
    assert text.index("<!-- ci:run -->") < text.index(first) < text.index("<!-- ci:test -->") < text.index(second)
    assert text.index(second) < text.index("\n## "), "the two commands come before the first section"


def test_the_readme_shows_top_and_a_dashboard_and_maps_the_docs():
    text = _markdown(README)
    assert "](docs/img/top.svg)" in text and "](docs/img/overview.png)" in text
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in text, f"README's documentation map does not link docs/{page.name}"


# --- links ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(page):
    missing = []
    for target in relative_links(_markdown(page)):
        if not (page.parent / target).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_a_link_checker_sees_a_missing_file():
    assert list(relative_links("see [x](docs/nope.md#a), [y](https://example.com), [z](#here)")) == ["docs/nope.md"]
    assert list(relative_links("`[not](a-link.md)`\n```\n[nor](this.md)\n```\n")) == []


# --- commands and flags ---------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_shown_commands_and_flags_exist(page):
    text = _markdown(page)
    assert not check_invocations(text), check_invocations(text)


def test_the_pages_show_commands_at_all():
    found = {c for page in PAGES for c, _ in invocations(_markdown(page))}
    assert {"run", "top", "inspect", "health", "parse", "scheduler-extender", "score"} <= found, found


def test_a_made_up_flag_is_reported():
    text = ("Run `hetero-exporter inspect --simulate --frobnicate` and\n\n```sh\n"
            "hetero-exporter run --listen 127.0.0.1:9400 \\\n  --turbo --no-collector.nvml\n```\n")
    problems = check_invocations(text)
    assert any("no flag --frobnicate" in p for p in problems), problems
    assert any("no flag --turbo" in p for p in problems), problems
    assert len(problems) == 2, problems  # --simulate, --listen and --no-collector.nvml are real


def test_made_up_commands_collectors_and_tools_are_reported():
    problems = check_invocations("`hetero-exporter frob` `hetero-exporter run --collector.acme9` "
                                 "`hetero-exporter score --collector.nvml --pod P --nodes N` "
                                 "`hetero-exporter parse frob-smi FILE`")
    assert len(problems) == 4, problems
    assert "no command 'frob'" in problems[0]
    assert "no flag --collector.acme9" in problems[1]
    assert "score has no flag --collector.nvml" in problems[2]  # score does not collect
    assert "no tool 'frob-smi'" in problems[3]


def test_real_flags_pass():
    text = ("`hetero-exporter run --web.config.file FILE --collector.rocm_smi --no-collector.amdsmi` "
            "`hetero-exporter top --once --from http://h:9400` `hetero-exporter parse kernel-log FILE --json` "
            "`hetero-exporter scheduler-extender [--listen HOST:PORT] [--policy binpack|spread]` "
            "`hetero-exporter inspect --json | jq -r .devices` `hetero-exporter.io/devices`")
    assert check_invocations(text) == []
