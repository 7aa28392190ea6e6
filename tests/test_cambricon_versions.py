"""Cambricon runtime version: Neuware's version file below the host root
(/usr/local/neuware/version.txt), else None; never the driver version cnmon prints."""

from __future__ import annotations

from hetero_exporter.collectors.cambricon import versions
from hetero_exporter.collectors.cambricon.cnmon import collector as C

TABLE = """\
+------------------------------------------------------------------------------+
| CNMON v5.10.13                                               Driver v5.10.13 |
+-------------------------------+----------------------+-----------------------+
| Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |
| Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | SR-IOV   Compute-Mode |
|===============================+======================+=======================|
| 0     /   MLU370-X8    v1.1.6 |         0000:39:00.0 | 0%                N/A |
|  0%   32C        106 W/ 250 W |     0 MiB/ 23374 MiB | N/A           Default |
+-------------------------------+----------------------+-----------------------+
"""


def _identity(host_root):
    t = C.parse_table(TABLE)
    runtime = versions.discover(str(host_root)).runtime_version
    return C._identity(t.cards[0], "u", t.driver_version, runtime=runtime)


def test_no_neuware_file_no_runtime_version(tmp_path):
    ident = _identity(tmp_path)
    assert ident.driver_version == "5.10.13" and ident.runtime_version is None
    assert C.table_snapshot(C.parse_table(TABLE)).devices[0].identity.runtime_version is None


def test_the_neuware_file_gives_the_runtime_version(tmp_path):
    versions.write_fake(str(tmp_path), "3.10.2")
    assert _identity(tmp_path).runtime_version == "3.10.2"
    info = versions.discover(str(tmp_path))
    assert info.runtime_version == "3.10.2" and info.source


def test_an_empty_or_wordy_file_is_no_version(tmp_path):
    path = tmp_path / "usr/local/neuware/version.txt"
    path.parent.mkdir(parents=True)
    path.write_text("")
    assert versions.discover(str(tmp_path)).runtime_version is None
    path.write_text("Neuware: unknown\n")
    assert versions.discover(str(tmp_path)).runtime_version is None
