"""Hypothesis fuzzing of the cnmon parsers that are new on the SDK: ``cnmon topo`` (the
MLU-Link matrix, sdk.tables.parse_matrix) and ``cnmon info`` (sdk.blocks). Random text and
mutated inputs (the fake's renders: no real capture of either is at hand) give a result or a
ParseError naming cnmon, never another exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_fakes import mutated, only_parse_errors
from hetero_exporter.collectors.cambricon.cnmon import collector as C
from hetero_exporter.collectors.cambricon.cnmon import fake

TOPOS = [fake.render_topo([0, 1, 2, 3], "mlulink"), fake.render_topo([0, 1], "pcie")]
INFOS = [fake.render_info([(C.MluCard(card=n, name="MLU370-X8", firmware="v1.1.6", bus_id=f"0000:1{n}:00.0",
                                      util_pct=30.0, temp_c=40.0, power_w=120.0, power_cap_w=250.0,
                                      memory_used_mib=1024, memory_total_mib=49152),
                            {"serial": f"SN{n}", "uuid": f"0000-{n}", "ecc_corrected": 1, "ecc_uncorrected": 0,
                             "temp_board": 38}) for n in range(2)])]
TOPO_ALPHABET = " \t\nMLU0123456789XMLULINKPHBPIXSYSCPU Affinity-:Legend="
INFO_ALPHABET = " \t\n:CardProductNameSerialUUIDECCOneBitMultiBoardTemperature0123456789 MiBW%C N/A"
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _only_parse_errors(fn, *args):
    return only_parse_errors("cnmon", fn, *args)


@FUZZ
@given(st.one_of(st.text(TOPO_ALPHABET, max_size=400), mutated(TOPOS, " X9MLU-\t", TOPO_ALPHABET)))
def test_topo_parser_gives_a_matrix_or_a_parse_error(text):
    topo = _only_parse_errors(C.parse_topo, text)
    if topo is not None:
        assert all(a in topo.cards and b in topo.cards and a != b for a, b, _ in topo.links)
        assert all(w in C.TOPO_FABRIC for _, _, w in topo.links)


@FUZZ
@given(st.one_of(st.text(INFO_ALPHABET, max_size=400), mutated(INFOS, " :9N/A\t", INFO_ALPHABET)))
def test_info_parser_gives_cards_or_a_parse_error(text):
    info = _only_parse_errors(C.parse_info, text)
    for card in info.cards if info is not None else ():
        _only_parse_errors(C.info_readings, card)


def test_the_fake_renders_parse_back():
    topo = C.parse_topo(TOPOS[0])
    assert {(a, b) for a, b, _ in topo.links} == {(a, b) for a in range(4) for b in range(4) if a != b}
    assert C.parse_topo(TOPOS[1]).links == ()
    r = C.info_readings(C.parse_info(INFOS[0]).cards[1])
    assert (r.serial, r.uuid, r.ecc_corrected, r.ecc_uncorrected, r.temp_board) == ("SN1", "0000-1", 1, 0, 38)
