"""health/plan/scheduler_annotations.py: Volcano's unhealthy GPU ids and HAMi's device register,
merged with what others wrote and undone on recovery."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hetero_exporter.health.detect.rules import Verdict
from hetero_exporter.health.plan.scheduler_annotations import VOLCANO_KEY, plan_scheduler_annotations
from hetero_exporter.model import DeviceIdentity, DeviceSample

# the two V100s of HAMi's docs/develop/protocol.md example (the ':'-separated register format)
V100 = ["GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"]
HAMI_OLD = (f"{V100[0]},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
            f"{V100[1]},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:")
NVIDIA_KEY = "hami.io/node-nvidia-register"


def _devices(vendor="nvidia", uuids=V100):
    return {u: DeviceSample(identity=DeviceIdentity(vendor=vendor, kind="gpu", index=i, uuid=u), timestamp=1.0)
            for i, u in enumerate(uuids)}


def _verdicts(devices, failed=()):
    return {u: Verdict(u, "failed" if u in failed else "ok") for u in devices}


def _hami_json(health=(True, True)):
    """As HAMi's MarshalNodeDevices writes it (json tags with omitempty: a false health is left out)."""
    out = []
    for i, (u, h) in enumerate(zip(V100, health)):
        e = {"id": u, "count": 10, "devmem": 32768, "devcore": 100, "type": "NVIDIA-Tesla V100-PCIE-32GB",
             "mode": "hami-core"}
        if i:
            e["index"] = i
        if h:
            e["health"] = True
        out.append(e)
    return json.dumps(out)


def _plan(annotations, failed=(), integrations=("volcano", "hami"), owned=None, devices=None):
    devices = devices or _devices()
    return plan_scheduler_annotations(annotations, _verdicts(devices, failed), devices, integrations, owned or {})


def _apply(annotations, p):
    out = dict(annotations)
    for k, v in p.patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def test_volcano_ids_are_merged_and_undone_on_recovery():
    ann = {VOLCANO_KEY: "5"}  # someone else's
    p = _plan(ann, failed=[V100[1]], integrations=["volcano"])
    assert p.patch == {VOLCANO_KEY: "1,5"} and p.owned == {VOLCANO_KEY: ["1"]}
    ann = _apply(ann, p)
    assert not _plan(ann, failed=[V100[1]], integrations=["volcano"], owned=p.owned).writes  # idempotent
    back = _plan(ann, integrations=["volcano"], owned=p.owned)
    assert back.patch == {VOLCANO_KEY: "5"} and back.owned == {}


def test_volcano_key_is_deleted_when_we_were_the_only_writer():
    p = _plan({}, failed=V100, integrations=["volcano"])
    assert p.patch == {VOLCANO_KEY: "0,1"}
    back = _plan(_apply({}, p), integrations=["volcano"], owned=p.owned)
    assert back.patch == {VOLCANO_KEY: None}


def test_volcano_ids_someone_else_wrote_stay_theirs():
    p = _plan({VOLCANO_KEY: "1"}, failed=[V100[1]], integrations=["volcano"])
    assert not p.patch and p.owned == {}
    assert not _plan({VOLCANO_KEY: "1"}, integrations=["volcano"], owned=p.owned).patch


def test_a_malformed_volcano_value_is_kept_as_it_is():
    p = _plan({VOLCANO_KEY: "GPU-xxxx-1234"}, failed=[V100[0]], integrations=["volcano"])
    assert not p.patch and any("not a list of GPU indices" in line for line in p.explain)


def test_volcano_lists_only_nvidia_gpus():
    amd = _devices("amd", ["amd-0", "amd-1"])
    assert not _plan({}, failed=["amd-0"], integrations=["volcano"], devices=amd).patch


def test_the_vendors_volcano_names_come_from_their_specs():
    """Issue 26: no vendor literal in the core; a plugin vendor whose spec says its indices are
    Volcano's is listed like NVIDIA."""
    import dataclasses
    from hetero_exporter import vendors
    zeta = dataclasses.replace(vendors.spec("amd"), name="zeta", volcano_gpu_indices=True)
    vendors.register(zeta)
    try:
        p = _plan({}, failed=["zeta-1"], integrations=["volcano"], devices=_devices("zeta", ["zeta-0", "zeta-1"]))
        assert p.patch == {VOLCANO_KEY: "1"}
    finally:
        vendors.unregister("zeta")


def test_hami_colon_format_health_set_false_and_back_only_where_we_set_it():
    ann = {NVIDIA_KEY: HAMI_OLD.replace(",0,true:", ",0,false:", 1)}  # HAMi itself marks the first unhealthy
    p = _plan(ann, failed=[V100[1]], integrations=["hami"])
    assert p.patch == {NVIDIA_KEY: HAMI_OLD.replace(",0,true:", ",0,false:")} and p.owned == {NVIDIA_KEY: [V100[1]]}
    ann2 = _apply(ann, p)
    assert not _plan(ann2, failed=[V100[1]], integrations=["hami"], owned=p.owned).writes
    back = _plan(ann2, integrations=["hami"], owned=p.owned)
    assert back.patch == ann and back.owned == {}  # the first stays unhealthy: HAMi's own mark


def test_hami_rewrite_is_reapplied_while_the_device_stays_failed():
    p = _plan({NVIDIA_KEY: HAMI_OLD}, failed=[V100[0]], integrations=["hami"])
    again = _plan({NVIDIA_KEY: HAMI_OLD}, failed=[V100[0]], integrations=["hami"], owned=p.owned)  # HAMi rewrote it
    assert again.patch == p.patch and again.owned == p.owned


def test_hami_json_format_keeps_other_fields():
    key = "hami.io/node-register-nvidia"
    p = _plan({key: _hami_json()}, failed=[V100[0]], integrations=["hami"])
    doc = json.loads(p.patch[key])
    assert doc[0]["health"] is False and doc[1]["health"] is True
    assert {k: v for k, v in doc[0].items() if k != "health"} == {
        k: v for k, v in json.loads(_hami_json())[0].items() if k != "health"}
    back = _plan(_apply({key: _hami_json()}, p), integrations=["hami"], owned=p.owned)
    assert [e["health"] for e in json.loads(back.patch[key])] == [True, True]
    other = _plan({key: _hami_json((False, True))}, integrations=["hami"], owned={})
    assert not other.patch  # an omitted (false) health that is not ours is left alone


def test_oversized_or_malformed_hami_annotations_are_not_rewritten():
    big = HAMI_OLD + "x" * 70000
    p = _plan({NVIDIA_KEY: big}, failed=[V100[0]], integrations=["hami"])
    assert not p.patch and any("65536" in line for line in p.explain)
    p = _plan({NVIDIA_KEY: "GPU-1,2,3"}, failed=[V100[0]], integrations=["hami"])
    assert not p.patch and any("neither" in line for line in p.explain)
    p = _plan({NVIDIA_KEY: '[{"id": "x", "health": "yes"}]'}, failed=[V100[0]], integrations=["hami"])
    assert not p.patch


def test_nothing_without_opt_in_and_ours_removed_when_turned_off():
    assert not _plan({NVIDIA_KEY: HAMI_OLD, VOLCANO_KEY: ""}, failed=V100, integrations=[]).writes
    on = _plan({NVIDIA_KEY: HAMI_OLD}, failed=V100)
    ann = _apply({NVIDIA_KEY: HAMI_OLD}, on)
    off = _plan(ann, failed=V100, integrations=[], owned=on.owned)
    assert off.patch == {NVIDIA_KEY: HAMI_OLD, VOLCANO_KEY: None} and off.owned == {}


def test_unknown_integration_is_explained():
    assert any("unknown scheduler integration" in line for line in _plan({}, integrations=["kueue"]).explain)


_value = st.text(alphabet=st.sampled_from(list("0123456789,:-abcGPU truefalse[]{}\"")), max_size=120) | st.sampled_from(
    [HAMI_OLD, _hami_json(), _hami_json((False, False)), "1,2", "", "[]", "null"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([VOLCANO_KEY, NVIDIA_KEY, "hami.io/node-register-mlu", "other"]), _value,
                       max_size=4),
       st.dictionaries(st.sampled_from([VOLCANO_KEY, NVIDIA_KEY]), st.lists(st.text(max_size=6), max_size=3)
                       | st.integers(), max_size=2),
       st.lists(st.sampled_from(V100), max_size=2))
def test_hostile_annotations_never_raise(annotations, owned, failed):
    p = _plan(annotations, failed=failed, owned=owned)
    for k, v in p.patch.items():
        assert v is None or (isinstance(v, str) and len(v.encode()) <= 65536)
    assert all(isinstance(ids, list) for ids in p.owned.values())
