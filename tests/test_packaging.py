"""Packaging: the wheel holds the core, the collectors (under hetero_exporter.collectors) and the data."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile

import pytest

from conftest import ROOT


def _package_dirs() -> set[str]:
    found = {"hetero_exporter." + ".".join(p.parent.relative_to(ROOT / "hetero_exporter").parts)
             for p in (ROOT / "hetero_exporter").rglob("__init__.py")}
    found = {f.rstrip(".") for f in found}
    found |= {"hetero_exporter.collectors" + "".join("." + x for x in p.parent.relative_to(ROOT / "collectors").parts)
              for p in (ROOT / "collectors").rglob("__init__.py")}
    return found


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing = _package_dirs() - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (whl,) = out.glob("hetero_exporter-*.whl")
    with zipfile.ZipFile(whl) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_wheel_contains_collectors_and_data(wheel):
    for name in ("hetero_exporter/model/types.py", "hetero_exporter/collectors/nvidia/nvml/collector.py",
                 "hetero_exporter/collectors/nvidia/nvml/fake.py", "hetero_exporter/profiles/profiles.yaml",
                 "hetero_exporter/simulate/scenarios/default.yaml",
                 "hetero_exporter/sdk/faults.py"):
        assert name in wheel, name
    for data in ("faults.yaml", "profiles.yaml"):  # the vendors' fault tables and device profiles
        tables = [n for n in wheel if n.startswith("hetero_exporter/collectors/") and n.endswith("/" + data)]
        shipped = list((ROOT / "collectors").glob("*/" + data))
        assert shipped and len(tables) == len(shipped), data
    assert "hetero_exporter/scoring/shapes.yaml" in wheel
    # data folders and tests are not packages
    assert not any(n.startswith(("collectors/", "tests/", "dashboards/", "deploy/")) for n in wheel)


def test_wheel_has_the_console_script(wheel):
    ep = next(n for n in wheel if n.endswith(".dist-info/entry_points.txt"))
    assert "hetero-exporter = hetero_exporter.cli:main" in wheel[ep].decode()
