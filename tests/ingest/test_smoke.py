from tests.factories import full_snapshot


def test_full_snapshot_round_trip(api):
    snap = full_snapshot()
    r = api.post_snapshots([snap])
    assert r.status_code == 200, r.content
    assert r.json()["results"][0]["status"] == "created"
    got = api.get(f"/snapshots/{snap['snapshot_id']}")
    assert got.status_code == 200, got.content
    body = got.json()
    assert [b["messages"] for b in body["blocks"]] == [b["messages"] for b in snap["blocks"]]
    assert body["validation"][0]["check"] == "json_schema"
