"""agent.app.front_access: the Kamailio defines and trusted-source list for sip.access; kamailio -c accepts them."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from twisted.internet import defer

from agent.app.front_access import FrontAccessList, address_list, front_defines
from agent.app.supervisor_main import kamailio_defines
from sip.guard import AccessSettings, DigestUser, TrustedSources
from tests.fakes import FakeReactor
from tests.unit.test_sip_guard_names import FakeNameResolver

OPS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "ops")


def test_no_access_no_defines() -> None:
    """Without sip.access the front runs as before (no permissions module, no ACL)."""
    assert front_defines(AccessSettings(), "/x") == {}


def test_defines_follow_the_access_settings() -> None:
    """ACL on; digest users let untrusted INVITEs through to be challenged; drop and ban settings carried over."""
    d = front_defines(AccessSettings(trusted_sources=("10.0.0.0/8",), untrusted="drop", ban_after_failures=4,
                                     ban_window_s=30.5, ban_s=900), "/run/x/trusted.list")
    assert d == {"WITH_ACCESS": "1", "ADDRESS_LIST": '"/run/x/trusted.list"', "AUTH_BAN_AFTER": "4",
                 "HT_AUTHFAIL": '"authfail=>size=8;autoexpire=31;"', "HT_AUTHBAN": '"authban=>size=8;autoexpire=900;"',
                 "UNTRUSTED_DROP": "1"}
    d = front_defines(AccessSettings(users=(DigestUser("a", "b"),)), "/l")
    assert d["WITH_DIGEST"] == "1" and "UNTRUSTED_DROP" not in d


def test_address_list_has_networks_and_resolved_names() -> None:
    """Group 1 lines: each network with its prefix, each resolved address of a name (v4 /32, v6 /128)."""
    t = TrustedSources(["203.0.113.0/24", "2001:db8::/32", "sip.carrier.example"])
    t.set_addresses("sip.carrier.example", ["192.0.2.7", "2001:db8::7"])
    lines = address_list(t).splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == ["1 203.0.113.0 24", "1 2001:db8:: 32", "1 192.0.2.7 32  # sip.carrier.example",
                         "1 2001:db8::7 128  # sip.carrier.example"]


def test_list_is_rewritten_and_reloaded_when_a_name_moves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Written before Kamailio starts; a name that resolves elsewhere later rewrites it and reloads Kamailio."""
    reactor = FakeReactor()
    reactor.nameResolver = FakeNameResolver()  # type: ignore[attr-defined]
    reactor.nameResolver.table["sbc.example"] = ["192.0.2.1"]
    reloads: list[str] = []
    path = str(tmp_path / "trusted.list")
    fal = FrontAccessList(AccessSettings(trusted_sources=("sbc.example",), resolve_interval_s=60), path, reactor,
                          lambda: defer.succeed(reloads.append("reload")))
    fal.start()
    assert "1 192.0.2.1 32" in open(path).read() and reloads == []
    fal.running = True
    reactor.advance(60)
    assert reloads == []  # same answer: nothing to do
    reactor.nameResolver.table["sbc.example"] = ["192.0.2.2"]
    reactor.advance(60)
    text = open(path).read()
    assert "1 192.0.2.2 32" in text and "192.0.2.1" not in text and reloads == ["reload"]
    fal.stop()


def test_kamailio_define_option_parses_name_value() -> None:
    """--kamailio-define NAME=VALUE pairs; a malformed one is a clear error."""
    assert kamailio_defines(["PIKE_REQS=50", 'TLS_CFG="/a=b"']) == (("PIKE_REQS", "50"), ("TLS_CFG", '"/a=b"'))
    with pytest.raises(ValueError, match="expects NAME=VALUE"):
        kamailio_defines(["PIKE_REQS"])


@pytest.mark.skipif(shutil.which("kamailio") is None, reason="kamailio is not installed")
@pytest.mark.parametrize("extra", [
    ("WITH_ACCESS=1",),
    ("WITH_ACCESS=1", "WITH_DIGEST=1"),
    ("WITH_ACCESS=1", "UNTRUSTED_DROP=1"),
])
def test_kamailio_accepts_the_access_defines(tmp_path, extra) -> None:  # type: ignore[no-untyped-def]
    """kamailio -c parses the config with each combination of the access defines (permissions module loaded)."""
    ds = tmp_path / "dispatcher.list"
    ds.write_text("1 sip:127.0.0.1:5160 0 0\n")
    acl = tmp_path / "trusted.list"
    acl.write_text("1 127.0.0.1 32\n")
    argv = ["kamailio", "-c", "-f", os.path.join(OPS, "kamailio", "kamailio.cfg"), "-A", f'DISPATCHER_LIST="{ds}"',
            "-A", f'CTL_SOCKET="unix:{tmp_path}/ctl"', "-A", "LISTEN=udp:127.0.0.1:5999",
            "-A", f'ADDRESS_LIST="{acl}"']
    for d in extra:
        argv += ["-A", d]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "config file ok" in out, out
