"""sip.doors: multipart bodies and unserved methods, decided from the request text alone."""
from __future__ import annotations

import pytest

from sip.doors import ALLOW, DoorSettings, Reduced, bad_content_length, screen_doors, sdp_part
from sip.message import parse_request
from sip.rejection import Rejection

SDP = "v=0\r\no=x 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n"


def req(method: str = "INVITE", ctype: str = "", body: str = "", to_tag: str = "") -> str:
    c = f"Content-Type: {ctype}\r\n" if ctype else ""
    return (f"{method} sip:1000@192.0.2.9 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\n"
            f"From: <sip:a@192.0.2.1>;tag=x\r\nTo: <sip:1000@192.0.2.9>{';tag=' + to_tag if to_tag else ''}\r\n"
            f"Call-ID: c\r\nCSeq: 1 {method}\r\n{c}Content-Length: {len(body)}\r\n\r\n{body}")


def mp(parts: str, boundary: str = "b") -> tuple[str, str]:
    return f"multipart/mixed;boundary={boundary}", parts


GOOD = mp(f"--b\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--b\r\nContent-Type: application/isup\r\n\r\n"
          "\x01\x02\r\n--b--\r\n")


def test_plain_sdp_invite_and_served_methods_pass() -> None:
    """An INVITE with SDP, OPTIONS, and in-dialog REFER/NOTIFY/INFO/BYE go on to pjsip."""
    d = DoorSettings()
    assert screen_doors(parse_request(req(ctype="application/sdp", body=SDP)), d) is None
    assert screen_doors(parse_request(req("OPTIONS")), d) is None
    for method in ("REFER", "NOTIFY", "INFO", "BYE", "UPDATE"):
        assert screen_doors(parse_request(req(method, to_tag="t")), d) is None


@pytest.mark.parametrize("method, to_tag, status", [
    ("SUBSCRIBE", "", 405), ("PUBLISH", "", 405), ("NOTIFY", "", 405), ("MESSAGE", "", 405),
    ("REGISTER", "", 405), ("REFER", "", 405), ("INFO", "", 405), ("SUBSCRIBE", "t", 405),
    ("MESSAGE", "t", 405), ("PUBLISH", "t", 405), ("FROBNICATE", "", 501), ("FROBNICATE", "t", 501),
])
def test_unserved_methods_get_405_or_501_with_allow(method: str, to_tag: str, status: int) -> None:
    """Presence, IM and registration never reach pjsip's modules; unknown methods are 'not implemented'."""
    v = screen_doors(parse_request(req(method, to_tag=to_tag)), DoorSettings())
    assert isinstance(v, Rejection) and v.status == status and v.headers == (("Allow", ALLOW),)


def test_multipart_is_refused_415_by_default() -> None:
    """Any multipart body (even a good one) gets 415 with Accept: application/sdp."""
    ctype, body = GOOD
    v = screen_doors(parse_request(req(ctype=ctype, body=body)), DoorSettings())
    assert isinstance(v, Rejection) and v.status == 415 and v.headers == (("Accept", "application/sdp"),)
    v = screen_doors(parse_request(req(ctype="Multipart/Related; boundary=x", body="--x--", to_tag="t")),
                     DoorSettings())
    assert isinstance(v, Rejection) and v.status == 415


def test_sdp_only_reduces_a_good_body_to_its_sdp() -> None:
    """sdp_only: SDP + ISUP becomes the SDP part alone (CRLF lines)."""
    ctype, body = GOOD
    v = screen_doors(parse_request(req(ctype=ctype, body=body)), DoorSettings(multipart="sdp_only"))
    assert v == Reduced(SDP)


@pytest.mark.parametrize("ctype, body, message", [
    ("multipart/mixed", "--b\r\n\r\n--b--", "without a boundary"),
    ("multipart/mixed;boundary=b", f"--b\r\n--b\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--b--\r\n",
     "adjacent boundaries"),
    ("multipart/mixed;boundary=b", f"--b\r\nContent-Type: application/sdp\r\nContent-ID: <\r\n\r\n{SDP}\r\n--b--\r\n",
     "Content-ID"),
    ("multipart/mixed;boundary=b", f"--b\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n", "closing boundary"),
    ("multipart/mixed;boundary=b", f"preamble\r\n--b\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--b--",
     "does not start"),
    ("multipart/mixed;boundary=b", f"--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b--\r\n", "found 0"),
    ("multipart/mixed;boundary=b", f"--b\r\nContent-Type: application/sdp\r\n\r\n{SDP}\r\n--b\r\n"
     f"Content-Type: application/sdp\r\n\r\n{SDP}\r\n--b--\r\n", "found 2"),
    ("multipart/mixed;boundary=b", "--b\r\nContent-Type: application/sdp\r\n\r\nhello\r\n--b--\r\n", "v=0"),
    ("multipart/mixed;boundary=b", "--b\r\nno colon here\r\n\r\nv=0\r\n--b--\r\n", "malformed multipart part header"),
    ('multipart/mixed;boundary="bad boundary "', "--bad boundary \r\n", "invalid multipart boundary"),
])
def test_strict_parser_refuses_every_malformed_shape(ctype: str, body: str, message: str) -> None:
    """The strict reader names what is wrong; screen_doors then answers 415 instead of reducing."""
    with pytest.raises(ValueError, match=message):
        sdp_part(ctype, body, 16384)
    v = screen_doors(parse_request(req(ctype=ctype, body=body)), DoorSettings(multipart="sdp_only"))
    assert isinstance(v, Rejection) and v.status == 415


def test_strict_parser_bounds_the_size() -> None:
    """A body over multipart_max_bytes is not read at all."""
    ctype, body = GOOD
    with pytest.raises(ValueError, match="over 100 bytes"):
        sdp_part(ctype, body, 100)


@pytest.mark.parametrize("length, refused", [
    ("{n}", False), (" {n} ", False), ("0", False), ("{less}", False),  # a body longer than declared is cut, not refused
    ("{more}", True), ("9999", True), ("-1", True), ("abc", True), ("", True), ("99999999999999999999999", True),
])
def test_content_length_must_be_a_number_no_larger_than_the_body(length: str, refused: bool) -> None:
    """A datagram whose Content-Length is not a number, or promises more than came, gets 400 (RFC 3261 §18.3)."""
    body = SDP if length != "0" else ""
    n = len(body.encode())
    text = req(ctype="application/sdp", body=body).replace(
        f"Content-Length: {n}", "Content-Length: " + length.format(n=n, less=n - 5, more=n + 1))
    verdict = bad_content_length(text)
    if refused:
        assert verdict == Rejection(400, "Bad Request (Content-Length does not match the body)")
    else:
        assert verdict is None


def test_content_length_compact_duplicate_and_bare_lf() -> None:
    """The compact form l: is read, two Content-Length headers are refused, LF-only messages are measured too."""
    assert bad_content_length(req(body="").replace("Content-Length: 0", "l: 5")) is not None
    assert bad_content_length(req(body="").replace("Content-Length: 0", "Content-Length: 0\r\nContent-Length: 0"))
    lf = req(ctype="application/sdp", body="v=0\n").replace("\r\n", "\n")
    assert bad_content_length(lf) is None
    assert bad_content_length(lf.replace("Content-Length: 4", "Content-Length: 5")) is not None
    assert bad_content_length("OPTIONS sip:a SIP/2.0\r\nContent-Length: 10\r\n") is None  # no end of headers: pjsip's
