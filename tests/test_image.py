"""The image, built and run (issue 36).

Always: scripts/pip_forward.py (this machine's pip settings into the build, nothing of them left in
the image) and the scripts' argument errors. With an image: scripts/check-image.sh runs the agent
inside it (version, inspect --simulate, run --simulate answering /readyz and /metrics). The image
is the one HETERO_IMAGE names (HETERO_IMAGE_STORE: the store it was built in), or, with
HETERO_BUILD_IMAGE=1 and buildah, one scripts/build-image.sh builds here in a store of its own.
.ci/run sets neither: it builds and checks the image itself, once, beside its second test run.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPTS = ROOT / "scripts"
BUILD, CHECK = SCRIPTS / "build-image.sh", SCRIPTS / "check-image.sh"


def _load_pip_forward():
    spec = importlib.util.spec_from_file_location("pip_forward", SCRIPTS / "pip_forward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pip_forward = _load_pip_forward()


# --- pip settings into the build ------------------------------------------------------------------

def test_the_environment_overrides_the_files_and_only_where_from_keys_pass():
    listing = "\n".join([
        "global.index-url='https://files.invalid/simple'",
        "global.require-virtualenv='true'",  # would stop the build's system pip: not forwarded
        "install.find-links='/srv/wheels'",
        "install.index-url='https://install.invalid/simple'",
        ":env:.index-url='https://env.invalid/simple'",
        ":env:.config-file='/etc/other.conf'",  # its contents are in the listing already
        ":env:.user='1'",
        "not a setting",
        "global.retries=[1]",  # not a string: ignored
    ])
    assert pip_forward.settings(listing, {"PIP_INDEX_URL": "unused: pip said it"}) == {
        "global": {"index-url": "https://env.invalid/simple"},
        "install": {"find-links": "/srv/wheels"},
    }


def test_without_pip_the_pip_environment_is_forwarded():
    environ = {"PIP_INDEX_URL": "https://mirror.invalid/simple", "PIP_TRUSTED_HOST": "mirror.invalid",
               "PIP_REQUIRE_VIRTUALENV": "1", "HOME": "/home/x"}
    assert pip_forward.settings(None, environ) == {
        "global": {"index-url": "https://mirror.invalid/simple", "trusted-host": "mirror.invalid"}}


def test_local_paths_move_below_root_with_their_mount_points_made(tmp_path):
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    conf = {"global": {
        "extra-index-url": f"file://{tmp_path}/pypi/simple https://pypi.invalid/simple",
        "find-links": str(tmp_path / "wheels"),
        "cert": str(tmp_path / "ca.pem"),
        "constraint": str(tmp_path / "missing.txt"),
    }}
    home = tmp_path / "home"
    home.mkdir()
    mounts = pip_forward.relocate(conf, home)
    assert mounts[0] == (str(home), "/root")
    inside = dict(mounts[1:])
    # an index is mounted from its parent: its pages link to ../../files/
    assert set(inside) == {str(tmp_path / "pypi"), str(tmp_path / "wheels"), str(tmp_path / "ca.pem")}
    assert all(p.startswith("/root/.pip-forward/") for p in inside.values()), inside
    g = conf["global"]
    assert g["extra-index-url"] == f"file://{inside[str(tmp_path / 'pypi')]}/simple https://pypi.invalid/simple"
    assert g["find-links"] == inside[str(tmp_path / "wheels")]
    assert g["cert"] == inside[str(tmp_path / "ca.pem")]
    assert g["constraint"] == str(tmp_path / "missing.txt")  # not here: pip here would not find it either
    for host, path in inside.items():
        point = home / path.removeprefix("/root/")  # made in home: the read-only /root needs no new entry
        assert point.exists() and point.is_dir() == Path(host).is_dir(), point


def test_pip_forward_writes_what_pip_here_resolves(tmp_path):
    (tmp_path / "wheels").mkdir()
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nfind-links = {tmp_path / 'wheels'}\nindex-url = https://file.invalid/simple\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": str(config), "PIP_INDEX_URL": "https://env.invalid/simple",
            "PIP_TRUSTED_HOST": "env.invalid"}
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "pip_forward.py"), str(home)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    mounts = dict(line.split("\t") for line in proc.stdout.splitlines())
    assert mounts[str(home)] == "/root"
    written = configparser.ConfigParser(interpolation=None)
    written.read(home / ".config" / "pip" / "pip.conf")
    assert written["global"]["index-url"] == "https://env.invalid/simple"
    assert written["global"]["trusted-host"] == "env.invalid"
    assert written["global"]["find-links"] == mounts[str(tmp_path / "wheels")]


# --- the scripts' arguments -----------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    ([], "--tag NAME is required"),
    (["--tag"], "usage:"),
    (["--tag", "x", "--frobnicate"], "unknown argument: --frobnicate"),
    (["--tag", "x", "--base", "y", "--stand-in"], "exclude each other"),
])
def test_build_image_refuses_bad_arguments_with_exit_2(args, says):
    proc = subprocess.run(["bash", str(BUILD), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_check_image_wants_one_image():
    proc = subprocess.run(["bash", str(CHECK)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage: scripts/check-image.sh IMAGE" in proc.stderr


# --- the agent inside the image ---------------------------------------------------------------------

def _buildah(store: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", "--storage-driver", "vfs", "--root", str(store / "root"),
                           "--runroot", str(store / "run"), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """(name, environment for the scripts) of a built image, or a skip saying how to have one."""
    named = os.environ.get("HETERO_IMAGE")
    if named:
        yield named, dict(os.environ)
        return
    if os.environ.get("HETERO_BUILD_IMAGE") != "1":
        pytest.skip("no image: HETERO_IMAGE=NAME checks a built one (HETERO_IMAGE_STORE=DIR where it was "
                    "built elsewhere), HETERO_BUILD_IMAGE=1 builds one here; .ci/run builds and checks "
                    "the image itself beside its second test run")
    if shutil.which("buildah") is None or os.geteuid() != 0:
        pytest.skip("HETERO_BUILD_IMAGE=1 needs buildah and root (apt-get install buildah debootstrap)")
    store = tmp_path_factory.mktemp("image-store")
    env = {**os.environ, "HETERO_IMAGE_STORE": str(store)}
    name = "localhost/hetero-exporter:pytest"
    try:
        proc = subprocess.run(["bash", str(BUILD), "--tag", name], env=env, capture_output=True,
                              text=True, timeout=1500, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        yield name, env
    finally:
        _buildah(store, "rm", "--all")
        _buildah(store, "rmi", "--all", "--force")
        shutil.rmtree(store, ignore_errors=True)  # gigabytes of vfs layers: not left for pytest's rotation


def test_the_agent_answers_inside_the_image(image):
    name, env = image
    proc = subprocess.run(["bash", str(CHECK), name], env=env, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "hetero-exporter 0." in out
    assert "node sim-node-1: " in out
    assert "/readyz 200" in out and "/metrics 200: " in out
    assert "SIGTERM: stopped cleanly (exit 0)" in out
    assert out.rstrip().endswith("all checks passed"), out[-500:]


def test_check_image_fails_on_an_image_without_the_agent(image):
    """The stand-in base (python3, no agent) must not pass: the checks are not vacuous."""
    _, env = image
    store = env.get("HETERO_IMAGE_STORE")
    base = "localhost/hetero-exporter-stand-in:bookworm"
    if not store or _buildah(Path(store), "inspect", "--type", "image", base).returncode != 0:
        pytest.skip(f"no {base} in the image store (the image was built on the real base, or elsewhere)")
    proc = subprocess.run(["bash", str(CHECK), base], env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and "all checks passed" not in proc.stdout, proc.stdout[-2000:]
