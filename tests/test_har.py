"""HAR metrics and load verification on hand-made HARs."""

from __future__ import annotations

from quicbed.client.har import metrics, normalize_protocol, verify

HOST = "quicbed.test"


def _har(protos: list[str], sizes: list[int], status: int = 200, onload: float = 150.0) -> dict:
    entries = []
    for i, (p, n) in enumerate(zip(protos, sizes, strict=True)):
        entries.append(
            {
                "request": {"url": f"https://{HOST}/5kb/{'' if i == 0 else 'img-000.jpg'}"},
                "response": {"status": status, "httpVersion": p, "content": {"size": n}},
                "timings": {"dns": -1, "connect": 10.0 if i == 0 else -1, "ssl": 5.0, "wait": 20},
                "connection": "1",
            }
        )
    return {"log": {"pages": [{"pageTimings": {"onLoad": onload}}], "entries": entries}}


def test_metrics_and_valid_load() -> None:
    m = metrics(_har(["h3", "h3"], [300, 5120]), {"loadEventEnd": 160, "responseStart": 80}, {HOST})
    assert m["plt_ms"] == 150 and m["objects"] == 2 and m["bytes"] == 5420
    assert m["protocols"] == ["h3"] and m["nav_load_ms"] == 160 and m["ttfb_ms"] == 80
    assert verify(m, arm="h3", host=HOST, expected_objects=2, expected_bytes=5420) == []


def test_wrong_protocol_bytes_and_status_are_reasons() -> None:
    m = metrics(_har(["h2", "http/1.1"], [300, 100], status=404), None, {HOST})
    reasons = verify(m, arm="h3", host=HOST, expected_objects=2, expected_bytes=5420)
    text = "; ".join(reasons)
    assert "protocol h2, http/1.1 on the h3 arm" in text
    assert "non-200" in text and "400 body bytes, the page has 5420" in text


def test_no_load_event_is_invalid() -> None:
    m = metrics(_har(["h2"], [300], onload=-1), None, {HOST})
    assert m["plt_ms"] is None
    assert verify(m, arm="h2", host=HOST, expected_objects=1, expected_bytes=300)


def test_protocol_names() -> None:
    assert normalize_protocol("h3-29") == "h3" and normalize_protocol("HTTP/2.0") == "h2"
