"""The advisory shapes of SECURITY.md through the Kamailio front: refused there, before any worker's pjsip.

Same shapes as tests/integration/test_doors.py, sent to Kamailio's port; Kamailio's
statistics show it answered them itself (nothing dispatched), and a real call works after.
"""
from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from tests.integration.conftest import ROOT, run_sipp
from tests.integration.test_doors import MULTIPART_SHAPES, SDP, exchange, request
from tests.integration.test_front_security import front_stats, stop
from tests.integration.test_workers import start_node

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kamailio") is None or shutil.which("kamcmd") is None,
                       reason="kamailio is not installed (ops/bootstrap.sh installs it)"),
]

SIPP_DIR = os.path.join(ROOT, "ops", "sipp")


def test_front_refuses_the_advisory_shapes_and_calls_work_after(tmp_path: Any) -> None:
    """Multipart INVITEs get 415 + Accept, SUBSCRIBE/PUBLISH/MESSAGE and out-of-dialog NOTIFY 405, unknown
    methods 501, all from Kamailio (nothing dispatched); an overlong ice-ufrag offer is answered by a worker
    without ICE; then a SIPp call is answered."""
    node = start_node(str(tmp_path))
    try:
        target = node.target
        for name, body, ctype, extra in MULTIPART_SHAPES:
            reply = exchange(target, lambda port: request("INVITE", target, port, extra, body, ctype))
            assert reply.startswith("SIP/2.0 415"), (name, reply[:300])
            assert "Accept: application/sdp" in reply
        for method, extra, code in (("SUBSCRIBE", "Event: presence\r\nExpires: 60\r\n", 405),
                                    ("PUBLISH", "Event: presence\r\n", 405), ("MESSAGE", "", 405),
                                    ("NOTIFY", "Event: presence\r\nSubscription-State: terminated;reason=x\r\n", 405),
                                    ("FROBNICATE", "", 501)):
            reply = exchange(target, lambda port: request(method, target, port, extra))
            assert reply.startswith(f"SIP/2.0 {code}"), (method, reply[:300])
            assert "Allow: INVITE" in reply
        stats = front_stats(node)
        assert stats["rejected_multipart"] == 3 and stats["rejected_method"] == 5
        assert stats.get("dispatched", 0) == 0
        ice = SDP + f"a=ice-ufrag:{'u' * 1500}\r\na=ice-pwd:{'p' * 40}\r\n"
        reply = exchange(target, lambda port: request("INVITE", target, port, body=ice, ctype="application/sdp"),
                         timeout_s=10)
        assert reply.startswith("SIP/2.0 200") and "ice-ufrag" not in reply, reply[:300]
        result = run_sipp(os.path.join(SIPP_DIR, "bench-call.xml"), target, "-s", "1000", "-m", "1", "-d", "1500")
        assert result.returncode == 0, result.stdout.decode(errors="replace")[-2000:]
    finally:
        stop(node)


def test_front_reduces_multipart_to_sdp_with_sdp_only(tmp_path: Any) -> None:
    """sip.doors.multipart: sdp_only: Kamailio keeps the SDP part of each shape (filter_body) and the worker
    gets a plain SDP offer: answered 200, except the SDP part cut at the one-character Content-ID, which
    pjmedia refuses as a bad SDP (400). No worker's pjsip ever parses the multipart body."""
    path = os.path.join(str(tmp_path), "doors.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("sip:\n  doors:\n    multipart: sdp_only\n")
    node = start_node(str(tmp_path), "--config", path)
    try:
        target = node.target
        for n, ((name, body, ctype, extra), code) in enumerate(zip(MULTIPART_SHAPES, (200, 200, 400)), 1):
            reply = exchange(target, lambda port: request("INVITE", target, port, extra, body, ctype), timeout_s=10)
            assert reply.startswith(f"SIP/2.0 {code}"), (name, reply[:300])
            assert front_stats(node)["multipart_reduced"] == n
        log = node.log()
        assert "multipart body reduced" not in log and "refused: 415" not in log  # workers saw plain SDP
    finally:
        stop(node)
