"""This machine's pip settings for a container build: where wheels come from, and nothing else.

    python3 scripts/pip_forward.py DIR

Reads what pip itself says (`python3 -m pip config list`: every config file pip reads here, and
the PIP_* environment on top) and keeps the keys that say where and how packages are fetched.
DIR becomes a home folder for the build's root: DIR/.config/pip/pip.conf holds those settings,
with every local path they name (a file:// index, a find-links folder, a CA bundle, a
constraints file) moved below /root/.pip-forward/. Prints the mounts, `HOST_PATH<TAB>PATH`, one a
line, DIR at /root first. scripts/build-image.sh mounts them read-only: /root exists in every
base image, so the build leaves no mount point, empty file or setting in the image.
Without pip here, the PIP_* environment alone is forwarded.
"""

from __future__ import annotations

import ast
import configparser
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

# Where and how packages are fetched. Not forwarded: keys that would change what pip does in the
# build (require-virtualenv, user, target, prefix, no-binary, ...), which the Dockerfile decides.
FETCH_KEYS = frozenset({
    "index-url", "extra-index-url", "no-index", "find-links", "trusted-host", "cert", "client-cert",
    "proxy", "timeout", "default-timeout", "retries", "constraint",
})
INDEX_KEYS = frozenset({"index-url", "extra-index-url"})
LISTING_TIMEOUT_S = 60
BUILD_HOME = "/root"  # the build runs as root; pip reads $HOME/.config/pip/pip.conf
FORWARD_DIR = ".pip-forward"


def pip_listing() -> str | None:
    """`pip config list` of this machine's pip, or None where there is no pip."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                              text=True, timeout=LISTING_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def settings(listing: str | None, environ: dict[str, str]) -> dict[str, dict[str, str]]:
    """{section: {key: value}} as pip resolves them: the environment overrides every file."""
    found: dict[str, dict[str, str]] = {}
    env: dict[str, str] = {}
    if listing is None:
        env = {k[4:].lower().replace("_", "-"): v for k, v in environ.items() if k.startswith("PIP_")}
    for line in (listing or "").splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not (sep and dot):
            continue
        try:
            value = ast.literal_eval(raw)  # pip prints each value as a Python literal
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str):
            (env if section == ":env:" else found.setdefault(section, {}))[key] = value
    kept = {s: {k: v for k, v in keys.items() if k in FETCH_KEYS and k not in env}
            for s, keys in found.items()}
    kept.setdefault("global", {}).update({k: v for k, v in env.items() if k in FETCH_KEYS})
    return {s: keys for s, keys in kept.items() if keys}


def local_paths(conf: dict[str, dict[str, str]]) -> dict[str, str]:
    """{word of a value: host path to mount} for the words that are local paths. An index is
    mounted from its parent folder (a PEP 503 page links to ../../files/...); a missing path is
    left as it is (pip here would not find it either)."""
    found = {}
    for keys in conf.values():
        for key, value in keys.items():
            for word in value.split():
                path = unquote(urlsplit(word).path) if word.startswith("file:") else word
                if not path.startswith("/"):
                    continue
                target = Path(path).parent if key in INDEX_KEYS else Path(path)
                if target.exists() and target != Path("/"):
                    found[word] = str(target)
    return found


def relocate(conf: dict[str, dict[str, str]], home: Path) -> list[tuple[str, str]]:
    """Point conf's local paths below /root/.pip-forward/N (mount points made in home, so the
    read-only /root needs no new entry) and return the mounts, (host path, path in the build)."""
    mounts: dict[str, str] = {}
    words = local_paths(conf)
    for host in sorted(set(words.values())):
        mounts[host] = f"{BUILD_HOME}/{FORWARD_DIR}/{len(mounts)}"
        point = home / FORWARD_DIR / str(len(mounts) - 1)
        point.parent.mkdir(parents=True, exist_ok=True)
        point.mkdir() if Path(host).is_dir() else point.touch()
    for keys in conf.values():
        for key, value in keys.items():
            moved = []
            for word in value.split():
                host = words.get(word)
                if host is not None:
                    # the word's path below its mounted folder, in the word's own form
                    path = unquote(urlsplit(word).path) if word.startswith("file:") else word
                    inside = mounts[host] + path[len(host):]
                    word = "file://" + quote(inside) if word.startswith("file:") else inside
                moved.append(word)
            keys[key] = " ".join(moved)
    return [(str(home), BUILD_HOME)] + list(mounts.items())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: pip_forward.py DIR", file=sys.stderr)
        return 2
    listing = pip_listing()
    if listing is None:
        print("pip_forward: no pip here: forwarding the PIP_* environment only", file=sys.stderr)
    conf = settings(listing, dict(os.environ))
    home = Path(argv[0])
    mounts = relocate(conf, home)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_dict(conf)
    (home / ".config" / "pip").mkdir(parents=True, exist_ok=True)
    with open(home / ".config" / "pip" / "pip.conf", "w", encoding="utf-8") as out:
        parser.write(out)
    for host, inside in mounts:
        print(f"{host}\t{inside}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
