"""The packaged YAML tables parsed ahead of time (hetero_exporter/packaged.py, issue 39 §5): the
bundle is a cache of the strict YAML parse and nothing else, and load_yaml's JSON reading of a JSON
object answers what YAML answers. That a plain run never imports PyYAML is
tests/test_footprint_imports.py's."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from hetero_exporter import packaged, validate

PACKAGED = sorted(p for top in ("hetero_exporter", "collectors") for p in (ROOT / top).rglob("*.yaml")
                  if "__pycache__" not in p.parts)


def test_every_packaged_table_is_answered_by_the_bundle_as_yaml_parses_it():
    assert len(PACKAGED) >= 30  # fault, kernel-log, profile tables, policy, scenarios
    for path in PACKAGED:
        text = path.read_text(encoding="utf-8")
        hit = packaged.parsed(text)
        assert hit is not None, f"{path.relative_to(ROOT)} is not in tables.jsonl (run collectors/generate.py)"
        assert packaged._same(hit[0], validate.parse_yaml(text)), path
        assert validate.load_yaml(text) == hit[0]


def test_a_hit_is_a_new_object_each_time():
    text = (ROOT / "hetero_exporter" / "health" / "detect" / "policy.yaml").read_text(encoding="utf-8")
    first, second = packaged.parsed(text), packaged.parsed(text)
    assert first is not None and second is not None
    assert first[0] == second[0] and first[0] is not second[0]


def test_a_table_edited_since_the_bundle_misses_and_is_parsed_as_yaml():
    text = (ROOT / "collectors" / "nvidia" / "faults.yaml").read_text(encoding="utf-8")
    edited = text.replace("vendor: nvidia", "vendor: nvidia  # edited", 1)
    assert edited != text
    assert packaged.parsed(edited) is None
    assert validate.load_yaml(edited) == validate.parse_yaml(text)
    with pytest.raises(validate.NotYaml, match="duplicate key") as e:
        validate.load_yaml(text + "\nvendor: again\n")
    assert "\n" not in str(e.value) and "line" in str(e.value)  # one line, naming where


def test_without_the_bundle_nothing_is_answered(tmp_path):
    text = PACKAGED[0].read_text(encoding="utf-8")
    assert packaged.parsed(text, bundle=tmp_path / "absent.jsonl") is None
    (tmp_path / "other.jsonl").write_text(packaged.bundle_text([("x.yaml", "a: 1\n", {"a": 1})]))
    assert packaged.parsed(text, bundle=tmp_path / "other.jsonl") is None
    assert packaged.parsed("a: 1\n", bundle=tmp_path / "other.jsonl") == ({"a": 1},)


@pytest.mark.parametrize("doc, why", [
    ({1: "a"}, "does not come back"),                      # YAML's integer key; JSON's keys are strings
    ({"when": datetime.date(2026, 12, 7)}, "cannot be written"),  # a YAML timestamp
    ({"x": float("nan")}, "cannot be written"),
    ({"x": (1, 2)}, "does not come back"),
])
def test_a_parse_json_cannot_carry_is_refused_by_the_generator(doc, why):
    with pytest.raises(packaged.NotCarried, match=why):
        packaged.bundle_text([("collectors/x/faults.yaml", "x", doc)])


def test_the_bundle_writes_a_text_once():
    text = packaged.bundle_text([("a.yaml", "k: 1\n", {"k": 1}), ("b.yaml", "k: 1\n", {"k": 1})])
    assert text.count("\n") == 1 and "\ta.yaml\t" in text


# JSON objects whose numbers both readers spell alike (JSON's exponent floats are strings to YAML 1.1),
# text of the Basic Multilingual Plane (json.dumps escapes the others as surrogate pairs, which PyYAML
# refuses: such a JSON config now reads, where it was "not valid YAML")
_TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=12)
_SCALARS = st.none() | st.booleans() | st.integers(-10**30, 10**30) | _TEXT \
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6).filter(
        lambda f: "e" not in repr(f))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _VALUES, max_size=5), st.booleans())
def test_a_json_object_reads_as_yaml_reads_it(doc, indent):
    text = json.dumps(doc, indent=2 if indent else None)
    assert packaged._same(validate.load_yaml(text), validate.parse_yaml(text))


@pytest.mark.parametrize("text", [
    '{"a": 1, "a": 2}',          # a duplicate key: YAML's strict loader names it
    '{"a": NaN}', '{"a": 1e400}',  # not JSON, or not finite: YAML reads them as before
    '{"a": 1,}',                  # JSON refuses a trailing comma; YAML's flow mapping takes it
    "{" * 5000 + "}" * 5000,      # too deep for json: YAML answers as it did before
    '{"a": ' + "1" * 5000 + "}",  # an integer too long to convert: the ValueError callers catch
])
def test_what_json_refuses_is_answered_by_yaml_as_before(text):
    def outcome(f):
        try:
            return ("ok", f(text))
        except (ValueError, RecursionError) as e:  # NotYaml is a ValueError
            return ("error", type(e).__name__)
    assert outcome(validate.load_yaml) == outcome(validate.parse_yaml)


def test_json_reads_what_yaml_misreads():
    """The two differences, both JSON's reading of a JSON document: an exponent is a number (a string
    to YAML 1.1, which then fails the field's check), and an escaped character outside the BMP reads."""
    assert validate.load_yaml('{"interval": 1e1}') == {"interval": 10.0}
    assert validate.parse_yaml('{"interval": 1e1}') == {"interval": "1e1"}
    assert validate.load_yaml(json.dumps({"name": "\U00010000"})) == {"name": "\U00010000"}
    with pytest.raises(validate.NotYaml):
        validate.parse_yaml(json.dumps({"name": "\U00010000"}))


@pytest.mark.parametrize("text, why", [
    ("vendor: acme\nfaults: {a: 1\n", "not valid YAML"),                    # cut short
    ("vendor: acme\nvendor: acme2\nfaults: {}\n", "duplicate key 'vendor'"),  # the second would win silently
])
def test_a_table_outside_the_bundle_that_is_not_yaml_is_a_fault_table_error(tmp_path, text, why):
    """A third-party vendor's table is parsed by PyYAML's strict loader, and a bad one is named as
    any malformed fault table is (one line, the file), not a YAML traceback."""
    from hetero_exporter.model.faults import FaultTableError, read_table
    path = tmp_path / "faults.yaml"
    path.write_text(text)
    with pytest.raises(FaultTableError, match=why) as e:
        read_table("acme", str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)
