"""sip.screening: the gate modules' decisions are counted by reason, and malformed text is left to pjsip."""
from __future__ import annotations

from sip.doors import DoorSettings
from sip.guard import AccessSettings, InboundGuard
from sip.rejection import ReplaceBody
from sip.screening import RequestScreen
from tests.fakes import FakeReactor
from tests.unit.test_sip_doors import GOOD, req


def test_doors_are_counted_by_reason() -> None:
    """415, 405/501 and reductions each call on_refused with their label; a good INVITE is not counted."""
    counted: list[str] = []
    screen = RequestScreen(FakeReactor(), None, DoorSettings(), counted.append)
    assert screen.door(req(ctype="application/sdp", body="v=0\r\n"), "192.0.2.1") is None
    ctype, body = GOOD
    assert screen.door(req(ctype=ctype, body=body), "192.0.2.1").status == 415  # type: ignore[union-attr]
    assert screen.door(req("SUBSCRIBE"), "192.0.2.1").status == 405  # type: ignore[union-attr]
    assert screen.door(req("XYZ"), "192.0.2.1").status == 501  # type: ignore[union-attr]
    reduced = RequestScreen(FakeReactor(), None, DoorSettings(multipart="sdp_only"), counted.append)
    v = reduced.door(req(ctype=ctype, body=body), "192.0.2.1")
    assert isinstance(v, ReplaceBody) and (v.type, v.subtype) == ("application", "sdp") and v.fallback.status == 415
    assert counted == ["unsupported_media", "method_not_allowed", "method_not_allowed", "multipart_reduced"]


def test_unparsable_text_is_left_to_pjsip() -> None:
    """Text the SIP reader cannot parse is not answered here (pjsip answers or drops it as before)."""
    screen = RequestScreen(FakeReactor(), None, None)
    assert screen.door("garbage\r\n\r\n", "192.0.2.1") is None
    assert screen.other("garbage\r\n\r\n", "192.0.2.1") is None


def test_other_requests_are_screened_only_for_bans_and_out_of_dialog() -> None:
    """A banned source's REGISTER is dropped; in-dialog requests are never screened by access."""
    clock = FakeReactor()
    guard = InboundGuard(AccessSettings(trusted_sources=("10.0.0.0/8",)))
    guard.bans.fail("192.0.2.7", 0.0)
    for _ in range(4):
        guard.bans.fail("192.0.2.7", 0.0)
    screen = RequestScreen(clock, guard, None)
    assert screen.other(req("REGISTER"), "192.0.2.7").status == 0  # type: ignore[union-attr]
    assert screen.other(req("BYE", to_tag="t"), "192.0.2.7") is None
    assert screen.other(req("REGISTER"), "192.0.2.8") is None
