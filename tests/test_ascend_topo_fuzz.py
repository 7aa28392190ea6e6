"""Hypothesis fuzzing of the npu-smi topology parser (``npu-smi info -t topo``): random text
and mutated matrices (the fake's HCCS and PCIe renders, and the link-matrix captures of other
tools that print the same layout) give an NpuTopo or a ParseError naming npu-smi, never
another exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_fakes import mutated
from conftest import shared_fixtures
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.collectors.ascend.npu_smi import collector as N
from hetero_exporter.collectors.ascend.npu_smi import fake

# no real `npu-smi info -t topo` capture is at hand (../shared/fixtures/npu-smi has none)
TOPOS = [fake.render_topo([0, 1, 2, 3], "hccs"), fake.render_topo([0, 1], "pcie"),
         *[p.read_text() for p in shared_fixtures("npu-smi", "*topo*")]]
ALPHABET = " \t\nNPU0123456789XHCCSPIXPHBSYSNODECPU Affinity-,:Legend="
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.one_of(st.text(ALPHABET, max_size=400), mutated(TOPOS, " X9HNPU-\t", ALPHABET)))
def test_topo_parser_gives_a_matrix_or_a_parse_error(text):
    try:
        topo = N.parse_topo(text)
    except ParseError as e:
        assert str(e).startswith("npu-smi") and len(str(e)) > len("npu-smi: "), e
        return
    assert all(a in topo.npus and b in topo.npus and a != b for a, b, _ in topo.links)
    assert all(w in N.TOPO_FABRIC for _, _, w in topo.links)


def test_the_fake_render_parses_to_every_pair():
    topo = N.parse_topo(fake.render_topo([0, 1, 2], "hccs"))
    assert {(a, b) for a, b, _ in topo.links} == {(a, b) for a in range(3) for b in range(3) if a != b}
