"""Vendor tools found below a host root and run with their driver libraries (sdk/host_tools.py,
sdk/cli_collector.find_tool, ``--host-root`` / ``host_root`` / ``HOST_ROOT``).

A fake host root holds, for every CLI vendor's tools, an executable that behaves like a real
vendor tool without its driver: unless its library (a marker file) is in a folder on its
LD_LIBRARY_PATH it exits 127 with the loader's "error while loading shared libraries". So a run
that succeeds proves the tool was found below the host root *and* run with its spec's library
folders below it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from hetero_exporter import config as config_mod
from hetero_exporter import registry, vendors
from hetero_exporter.cli import agent, build_parser, main
from hetero_exporter.sdk import host_tools, runner
from hetero_exporter.sdk import versions as sdk_versions
from hetero_exporter.sdk.cli_collector import CliCalls, find_tool
from hetero_exporter.sdk.contract import CollectorOptions, HostPaths, Unavailable

GATE = """#!/bin/sh
# a vendor tool: it cannot start without its driver library {lib}
IFS=:
for d in $LD_LIBRARY_PATH; do
  if [ -e "$d/{lib}" ]; then exec {target} "$@"; fi
done
echo "{tool}: error while loading shared libraries: {lib}: cannot open shared object file: No such file or directory" >&2
exit 127
"""


def _soon() -> float:
    """A cycle deadline (monotonic) far enough for a slow machine."""
    return time.monotonic() + 60


def _write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _concrete(pattern: str) -> str:
    """A folder a library pattern names (a glob component becomes 'driver')."""
    return "/".join("driver" if any(c in part for c in "*?[") else part for part in pattern.split("/"))


def _lib_name(tool: str) -> str:
    return f"lib{tool.replace('-', '_')}_driver.so"


def install_gated(root: Path, tool, target: str) -> tuple[Path, Path]:
    """``tool`` (a ToolSpec) in its last host folder below ``root``, answering through
    ``target`` only when its library (in its last library folder) is on LD_LIBRARY_PATH;
    returns (the tool, the library)."""
    exe = _write_exe(root / tool.dirs[-1].lstrip("/") / tool.name,
                     GATE.format(lib=_lib_name(tool.name), target=target, tool=tool.name))
    lib = root / _concrete(tool.library_dirs[-1]).lstrip("/") / _lib_name(tool.name)
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_text("")
    return exe, lib


def cli_tools() -> list[tuple[str, object]]:
    """(vendor, ToolSpec) of every tool of every spec that declares driver library folders."""
    return [(name, t) for name, s in sorted(vendors.specs().items()) for t in s.tools if t.library_dirs]


@pytest.fixture
def bare_path(monkeypatch, tmp_path):
    """PATH without any vendor tool, so that only the host root can supply one."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}:/usr/bin:/bin")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    for _, t in cli_tools():
        for var in (*t.env, *(v for v, _ in t.home_env)):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv(host_tools.HOST_ROOT_ENV, raising=False)


def test_every_tool_but_nvidia_smi_declares_driver_libraries():
    """nvidia-smi and NVML come through the NVIDIA container toolkit; every other tool runs
    from the host root with its libraries."""
    without = {t.name for s in vendors.specs().values() for t in s.tools if not t.library_dirs}
    assert without == {"nvidia-smi"}
    assert all(os.path.isabs(d) for _, t in cli_tools() for d in (*t.dirs, *t.library_dirs))


@pytest.mark.parametrize("vendor,tool", cli_tools(), ids=lambda x: getattr(x, "name", x))
def test_every_cli_tool_is_found_below_the_host_root_and_runs_only_with_its_libraries(
        vendor, tool, tmp_path, bare_path):
    root = tmp_path / "host"
    exe, lib = install_gated(root, tool, f"echo ok-{tool.name}")
    found = find_tool(HostPaths(root=str(root)), tool.name, vendor=vendor)
    assert found == str(exe) and found.host_path == f"{tool.dirs[-1]}/{tool.name}"
    assert str(lib.parent) in found.env["LD_LIBRARY_PATH"].split(":")
    assert CliCalls(found, tool.name).call([], _soon()).strip() == f"ok-{tool.name}"
    # the same tool without its library folders: the loader's error, as a real tool gives it
    with pytest.raises(runner.CliError, match="error while loading shared libraries"):
        runner.run([str(exe), "-v"], 10)


@pytest.mark.parametrize("vendor,tool", cli_tools(), ids=lambda x: getattr(x, "name", x))
def test_a_missing_tool_says_every_place_it_looked(vendor, tool, tmp_path, bare_path):
    root = tmp_path / "host"
    root.mkdir()
    with pytest.raises(Unavailable) as e:
        find_tool(HostPaths(root=str(root)), tool.name, vendor=vendor)
    msg = str(e.value)
    assert msg.startswith(f"{tool.name} not found on PATH, in {root}{tool.dirs[0]}")
    for d in tool.dirs:
        assert f"{root}{d}, " in msg or f"{root}{d} " in msg
        assert f", {d}" in msg
    assert f"({tool.why_missing})" in msg


def test_without_a_host_root_the_message_lists_the_folders_as_they_are(bare_path):
    with pytest.raises(Unavailable, match=r"^npu-smi not found on PATH, in /usr/local/sbin, /usr/local/bin, "
                                          r"/usr/sbin, /usr/bin \(Ascend driver tools not installed\)$"):
        find_tool(HostPaths(), "npu-smi", vendor="ascend")


def test_a_configured_path_is_looked_for_below_the_host_root(tmp_path, bare_path):
    tool = vendors.spec("cambricon").tool("cnmon")
    root = tmp_path / "host"
    exe, _ = install_gated(root, tool, "echo ok")
    configured = f"{tool.dirs[-1]}/cnmon"
    found = find_tool(HostPaths(root=str(root)), "cnmon", vendor="cambricon", path=configured)
    assert found == str(exe) and runner.run([found], 10, env=found.env).stdout.strip() == "ok"
    with pytest.raises(Unavailable, match=re.escape(f"not found or not executable at /opt/cnmon, {root}/opt/cnmon")):
        find_tool(HostPaths(root=str(root)), "cnmon", vendor="cambricon", path="/opt/cnmon")


def test_absolute_symlinks_resolve_below_the_host_root_and_install_variables_point_there(tmp_path, bare_path):
    """/usr/local/corex -> /usr/local/corex-4.1.0 (absolute) is followed inside the host root,
    not into the container; COREX_HOME is the install folder below the host root."""
    tool = vendors.spec("iluvatar").tool("ixsmi")
    root = tmp_path / "host"
    real = root / "usr/local/corex-4.1.0"
    _write_exe(real / "bin/ixsmi", GATE.format(lib="libixml.so", target="env", tool="ixsmi"))
    (real / "lib64").mkdir()
    (real / "lib64/libixml.so").write_text("")
    os.symlink("/usr/local/corex-4.1.0", root / "usr/local/corex")
    assert host_tools.host_path(str(root), "/usr/local/corex/bin/ixsmi") == "/usr/local/corex-4.1.0/bin/ixsmi"
    found = find_tool(HostPaths(root=str(root)), tool.name, vendor="iluvatar")
    assert found == str(real / "bin/ixsmi")
    out = CliCalls(found, "ixsmi").call([], _soon())
    assert f"LD_LIBRARY_PATH={real}/lib64\n" in out and f"COREX_HOME={real}\n" in out


def test_a_symlink_loop_or_dotdot_stays_below_the_host_root(tmp_path):
    root = tmp_path / "host"
    (root / "a").mkdir(parents=True)
    os.symlink("/a/loop", root / "a/loop")
    os.symlink("../../../../etc", root / "a/up")
    assert host_tools.host_path(str(root), "/a/loop/x").startswith("/a/loop")  # unresolvable: not existing
    assert host_tools.host_path(str(root), "/a/up/passwd") == "/etc/passwd"
    assert host_tools.inside(str(root), "/a/up/passwd") == f"{root}/etc/passwd"


def test_glob_library_folders_expand_in_order_and_a_c_library_folder_is_left_out(tmp_path, bare_path):
    root = tmp_path / "host"
    for d in ("usr/local/Ascend/driver/lib64/driver", "usr/local/Ascend/driver/lib64/common",
              "usr/local/Ascend/driver/lib64/.hidden", "usr/local/dcmi", "usr/lib64"):
        (root / d).mkdir(parents=True)
    (root / "usr/lib64/libc.so.6").write_text("")
    tool = vendors.spec("ascend").tool("npu-smi")
    assert host_tools.library_dirs(str(root), tool.library_dirs) == [
        "/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/common",
        "/usr/local/Ascend/driver/lib64/driver", "/usr/local/dcmi"]
    spec = dataclasses.replace(tool, library_dirs=("/usr/lib64", "/usr/local/dcmi"))
    _write_exe(root / "usr/local/sbin/npu-smi", "#!/bin/sh\n")
    found = host_tools.tool_path(str(root), "/usr/local/sbin/npu-smi", spec)
    assert found.env["LD_LIBRARY_PATH"] == f"{root}/usr/local/dcmi"


def test_the_agents_library_path_and_install_variables_are_kept(tmp_path, bare_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/agent/lib")
    monkeypatch.setenv("NEUWARE_HOME", "/custom/neuware")
    tool = vendors.spec("cambricon").tool("cnmon")
    root = tmp_path / "host"
    install_gated(root, tool, "env")
    (root / "usr/local/neuware").mkdir(parents=True, exist_ok=True)
    found = find_tool(HostPaths(root=str(root)), "cnmon", vendor="cambricon")
    assert found.env == {"LD_LIBRARY_PATH": f"{root}/usr/local/neuware/lib64:/agent/lib"}
    out = CliCalls(found, "cnmon").call([], _soon())
    assert "NEUWARE_HOME=/custom/neuware\n" in out  # passed through (ToolSpec.env), not replaced


# --------------------------------------------------------------------------- chroot


def test_chroot_mode_falls_back_with_a_warning_when_the_root_is_not_whole(tmp_path, bare_path, caplog):
    tool = vendors.spec("metax").tool("mx-smi")
    root = tmp_path / "host"
    install_gated(root, tool, "echo ok")
    with caplog.at_level(logging.WARNING, logger="hetero_exporter.sdk.host_tools"):
        found = find_tool(HostPaths(root=str(root), exec_mode="chroot"), "mx-smi", vendor="metax")
        find_tool(HostPaths(root=str(root), exec_mode="chroot"), "mx-smi", vendor="metax")
    assert found.chroot is None and CliCalls(found, "mx-smi").call([], _soon()).strip() == "ok"
    warned = [r.getMessage() for r in caplog.records if "cannot chroot" in r.getMessage()]
    assert len(warned) == 1 and "not a whole root: no usr" not in warned[0] and "no etc, lib" in warned[0]


def test_the_probe_says_why_chroot_cannot_be_used(tmp_path, monkeypatch):
    root = tmp_path / "host"
    for d in ("usr", "etc", "lib64"):
        (root / d).mkdir(parents=True)
    assert host_tools._probe(str(tmp_path / "nothing")) == "not a whole root: no usr, etc, lib"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert host_tools._probe(str(root)) == "needs root with CAP_SYS_CHROOT"


def test_chroot_mode_runs_the_host_path_through_chroot_with_host_library_folders(tmp_path, bare_path, monkeypatch):
    """The runner's argv is ``chroot ROOT HOST_PATH ARGS``; LD_LIBRARY_PATH holds host paths.
    A stand-in chroot command (root + path) keeps this test free of privileges."""
    tool = vendors.spec("enflame").tool("efsmi")
    root = tmp_path / "host"
    install_gated(root, tool, "env")
    fake_chroot = _write_exe(tmp_path / "bin/chroot", '#!/bin/sh\nroot=$1; shift; tool=$1; shift\n'
                                                      'echo "argv0=$tool"\nexec "$root$tool" "$@"\n')
    monkeypatch.setattr(host_tools, "chroot_unusable", lambda r: None)
    monkeypatch.setattr(host_tools, "chroot_command", lambda: str(fake_chroot))
    found = find_tool(HostPaths(root=str(root), exec_mode="chroot"), "efsmi", vendor="enflame")
    assert found.chroot == str(root) and found.env == {"LD_LIBRARY_PATH": "/opt/tops/lib"}
    # the fake chroot does not change the root, so the gate finds the library by host path
    # only when that path exists here too: point it at the host root's copy
    found.env["LD_LIBRARY_PATH"] = f"{root}/opt/tops/lib"
    out = CliCalls(found, "efsmi").call([], _soon())
    assert f"argv0={tool.dirs[-1]}/efsmi\n" in out
    assert runner.invocations().get("efsmi", 0) >= 1  # counted under the tool's name, not chroot's


def _install_sh(root: Path) -> None:
    """/bin/sh and the shared libraries ldd lists for it, at the same paths below ``root``."""
    sh = os.path.realpath("/bin/sh")
    listed = subprocess.run(["ldd", sh], capture_output=True, text=True, timeout=10).stdout
    libs = [w for line in listed.splitlines() for w in line.split() if w.startswith("/")]
    for src, dest in [(sh, "/bin/sh"), *((p, p) for p in libs)]:
        target = root / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(src), target)


def test_chroot_mode_really_runs_the_tool_inside_a_whole_host_root(tmp_path, bare_path):
    """A minimal whole root (sh and its libraries): the probe passes and the tool runs inside it,
    seeing its library folder at the host path."""
    if os.geteuid() != 0 or not host_tools._has_cap_sys_chroot() or host_tools.chroot_command() is None \
            or shutil.which("ldd") is None:
        pytest.skip("needs root with CAP_SYS_CHROOT, chroot and ldd")
    root = tmp_path / "host"
    for d in ("usr/bin", "etc", "lib"):
        (root / d).mkdir(parents=True, exist_ok=True)
    _install_sh(root)
    tool = vendors.spec("kunlunxin").tool("xpu_smi")
    install_gated(root, tool, "/bin/sh -c 'echo inside'")
    assert host_tools.chroot_unusable(str(root)) is None
    found = find_tool(HostPaths(root=str(root), exec_mode="chroot"), "xpu_smi", vendor="kunlunxin")
    assert found.chroot == str(root)
    assert CliCalls(found, "xpu_smi").call([], _soon()).strip() == "inside"


# --------------------------------------------------------------------------- versions, amdsmi


def test_version_files_are_read_through_absolute_links_of_the_host_root(tmp_path):
    root = tmp_path / "host"
    (root / "opt/rocm-6.2.0/.info").mkdir(parents=True)
    (root / "opt/rocm-6.2.0/.info/version").write_text("6.2.0-66\n")
    (root / "etc/alternatives").mkdir(parents=True)
    os.symlink("/opt/rocm-6.2.0", root / "etc/alternatives/rocm")
    os.symlink("/etc/alternatives/rocm", root / "opt/rocm")
    assert sdk_versions.read_version(str(root), ["opt/rocm/.info/version"]) == "6.2.0"


def test_amdsmi_without_its_library_says_how_to_use_the_host_roots(tmp_path, bare_path, monkeypatch):
    from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
    root = tmp_path / "host"
    (root / "opt/rocm-6.2.0/lib").mkdir(parents=True)
    (root / "opt/rocm-6.2.0/lib/libamd_smi.so").write_text("")
    os.symlink("/opt/rocm-6.2.0", root / "opt/rocm")

    def broken():
        raise Unavailable("amdsmi cannot be imported (KeyError: 'libamd_smi.so')")
    monkeypatch.setattr(amdsmi, "import_binding", broken)
    with pytest.raises(Unavailable) as e:
        amdsmi.create(CollectorOptions(host=HostPaths(root=str(root))))
    msg = str(e.value)
    assert f"the host root has {root}/opt/rocm-6.2.0/lib/libamd_smi.so" in msg
    assert f"ROCM_PATH={root}/opt/rocm-6.2.0 and LD_LIBRARY_PATH={root}/opt/rocm-6.2.0/lib" in msg
    assert "amd-smi fallback: amd-smi not found on PATH, in " in msg  # the CLI looked below it too
    assert amdsmi.host_library_hint(HostPaths()) == "" and amdsmi.host_library_hint(HostPaths(root=str(tmp_path))) == ""


# --------------------------------------------------------------------------- flag, config, env


def test_host_root_precedence_flag_then_config_then_environment(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    env = {"HOST_ROOT": str(c)}
    cfg = config_mod.from_dict({"host_root": str(b)})
    assert config_mod.host_root(str(a), cfg, env) == str(a)
    assert config_mod.host_root(None, cfg, env) == str(b)
    assert config_mod.host_root(None, config_mod.Config(), env) == str(c)
    assert config_mod.host_root(None, config_mod.Config(), {}) is None
    assert config_mod.host_root("/", config_mod.Config(), env) is None  # / is the node itself
    with pytest.raises(config_mod.ConfigError, match=r"^HOST_ROOT: not an existing directory"):
        config_mod.host_root(None, config_mod.Config(), {"HOST_ROOT": str(tmp_path / "nope")})
    with pytest.raises(config_mod.ConfigError, match=r"^host_exec: not one of the choices"):
        config_mod.from_dict({"host_exec": "nsenter"})


def test_a_bad_host_root_exits_2_with_one_line(tmp_path, capsys):
    assert main(["inspect", "--host-root", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hetero-exporter: error: --host-root: not an existing directory")


def test_every_collector_gets_the_host_root_but_a_simulated_node_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv("HOST_ROOT", str(tmp_path))
    cfg = tmp_path / "config.yaml"
    # a bus that cannot be read: every default collector runs (a readable one with no accelerator: none)
    cfg.write_text(f"host_exec: chroot\nsysfs_root: {tmp_path / 'no-sysfs'}\ncollectors:\n  cnmon: {{host_root: /elsewhere}}\n")
    args, extra = build_parser().parse_known_args(["inspect", "--config", str(cfg), "--collector.cnmon"])
    w = agent(args, extra)
    assert w.env.host_root == str(tmp_path) and w.parts.paths == HostPaths(str(tmp_path), "chroot", str(tmp_path / "no-sysfs"))
    captured = {}
    monkeypatch.setattr(registry, "collector_factory", lambda e: lambda opts: captured.setdefault(e.name, opts))
    try:
        w.parts.sampler.collect()
    finally:
        w.close()
    assert captured["cnmon"].host.root == "/elsewhere"  # a collector's own setting wins
    assert captured["npu_smi"].host.root == str(tmp_path) and captured["npu_smi"].host.exec_mode == "chroot"
    args, extra = build_parser().parse_known_args(["inspect", "--simulate"])
    w = agent(args, extra)
    try:
        assert w.parts.paths.root is None
    finally:
        w.close()


# --------------------------------------------------------------------------- inspect end to end


def _one_device_per_vendor(tmp_path: Path) -> Path:
    doc = yaml.safe_load((ROOT / "fixtures/scenarios/all-vendors.yaml").read_text())
    doc["devices"] = [dict(g, count=1) for g in doc["devices"] if g["vendor"] != "nvidia"]
    doc["faults"] = []
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _fake_launchers(scenario_path: Path, workdir: Path) -> dict[tuple[str, str], str]:
    """(vendor, tool) -> the vendor's own fake executable for the scenario (what its collector
    writes when simulating), for every collector that runs a CLI."""
    from hetero_exporter.simulate import ManualClock, load
    scenario = load(str(scenario_path))
    out = {}
    for name, entry in registry.collector_entries().items():
        if entry.vendor == "nvidia":
            continue
        c = registry.collector_factory(entry)(CollectorOptions(scenario=scenario, clock=ManualClock(),
                                                              workdir=str(workdir / name)))
        exe = getattr(getattr(c, "cli", None), "exe", None)
        if isinstance(exe, str) and os.path.isfile(exe):
            out[(entry.vendor, os.path.basename(exe))] = exe
    return out


def test_inspect_with_a_host_root_finds_and_runs_every_cli_vendors_tools(tmp_path):
    scenario = _one_device_per_vendor(tmp_path)
    launchers = _fake_launchers(scenario, tmp_path / "fakes")
    assert {v for v, _ in launchers} == set(vendors.specs()) - {"nvidia"}
    root = tmp_path / "host"
    for (vendor, tool), exe in launchers.items():
        install_gated(root, vendors.spec(vendor).tool(tool), exe)
    sysfs = tmp_path / "sys"
    sysfs.mkdir()  # no PCI devices: every default collector is tried
    config = tmp_path / "config.yaml"
    config.write_text(f"sysfs_root: {sysfs}\ninterval: 120\ndefault_timeout: 100\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HOST_ROOT": str(root)}
    proc = subprocess.run([sys.executable, "-m", "hetero_exporter", "inspect", "--config", str(config), "--json",
                           "--no-collector.nvml"], capture_output=True, text=True, timeout=200, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    failed = {c["name"]: c.get("error") for c in doc["collectors"] if not c["ok"]}
    assert not failed, failed
    assert {d["identity"]["vendor"] for d in doc["devices"]} == set(vendors.specs()) - {"nvidia"}

    # the same node without the host root: every collector says where it looked
    proc = subprocess.run([sys.executable, "-m", "hetero_exporter", "inspect", "--config", str(config),
                           "--host-root", str(tmp_path / "fakes"), "--no-collector.nvml"],
                          capture_output=True, text=True, timeout=200, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"npu-smi not found on PATH, in {tmp_path}/fakes/usr/local/sbin," in proc.stdout
    assert f"cnmon not found on PATH, in {tmp_path}/fakes/usr/bin," in proc.stdout
