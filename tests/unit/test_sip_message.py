"""sip.message: reading an INVITE for admission decisions."""
import pytest

from sip.message import parse_request, uri_user

INVITE = (
    "INVITE sip:1000@127.0.0.1:5060 SIP/2.0\r\n"
    "Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-1\r\n"
    "f: \"Alice\" <sip:+15551234567@example.com>;tag=abc\r\n"
    "To: <sip:1000@127.0.0.1>\r\n"
    "i: call-1@host\r\n"
    "CSeq: 1 INVITE\r\n"
    "X-OpenClaw-Region: eu\r\n"
    "Content-Length: 0\r\n\r\n"
)


def test_invite_fields_for_admission():
    """Called number from the Request-URI, caller from From, compact headers expanded."""
    req = parse_request(INVITE)
    assert req.method == "INVITE"
    assert req.called == "1000"
    assert req.caller == "+15551234567"
    assert req.call_id == "call-1@host"
    assert req.to_tag is None
    assert req.header("x-openclaw-region") == "eu"


def test_to_tag_marks_an_in_dialog_request():
    """A To tag is read from the header parameters, not from the URI."""
    req = parse_request(INVITE.replace("To: <sip:1000@127.0.0.1>", "To: <sip:1000@127.0.0.1;tag=uri>;tag=xyz"))
    assert req.to_tag == "xyz"


def test_malformed_request_line_is_a_value_error():
    """Garbage raises ValueError naming the bad line."""
    with pytest.raises(ValueError, match="not a SIP request line"):
        parse_request("HELLO\r\n\r\n")


@pytest.mark.parametrize("uri,user", [
    ("sip:1000@host", "1000"), ("sips:bob@host;transport=tls", "bob"), ("tel:+441234;phone-context=x", "+441234"),
    ("sip:host.example.com", ""), ("http://x", ""),
])
def test_uri_user(uri, user):
    """The user part of SIP and tel URIs; none for a host-only URI."""
    assert uri_user(uri) == user
