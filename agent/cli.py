"""Command-line entry point: ``openclaw-voice``.

Sub-commands:
  serve           answer SIP calls (embedded speech server unless regions are configured)
  speech-server   run the embedded Riva-compatible speech server alone
  call            place a test call and report what the agent said and how fast
  dialplan check  validate dialplan files
"""
from __future__ import annotations

import argparse
import sys
from typing import Any


class _TurnAction(argparse.Action):
    """Collect --say/--wav/--dtmf in the order given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from agent.caller import CallerTurn

        turns = getattr(namespace, "turns", None) or []
        kind = {"--say": "say", "--wav": "wav", "--dtmf": "dtmf"}[option_string or "--say"]
        turns.append(CallerTurn(kind, values))
        namespace.turns = turns


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openclaw-voice", description="OpenClaw Voice: a telephony voice agent")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="answer SIP calls")
    s.add_argument("--config", "-c", help="server config file (YAML); see docs/configuration.md")
    s.add_argument("--host", help="SIP listen address (default 0.0.0.0)")
    s.add_argument("--port", type=int, help="SIP UDP port (default 5060)")
    s.add_argument("--capacity", type=int, help="calls accepted at once (at most 4 per process)")
    s.add_argument("--metrics-port", type=int, help="port of /metrics and /healthz (default 9464)")
    s.add_argument("--speech-uri", help="host:port of a Riva server (default: start the embedded one)")
    s.add_argument("--dialplan", action="append", help="dialplan file (repeatable; default dialplans/default.yaml)")
    s.add_argument("--call-records", help="JSON-lines file of call records ('' to only log them)")
    s.add_argument("--log-format", choices=("text", "json"), default="text")

    ss = sub.add_parser("speech-server", help="run the embedded Riva-compatible speech server")
    ss.add_argument("--listen", default="127.0.0.1:50051", help="address to listen on (host:port)")

    c = sub.add_parser("call", help="place a test call")
    c.add_argument("uri", help="SIP URI to call, e.g. sip:1000@127.0.0.1:5060")
    c.add_argument("--say", action=_TurnAction, dest="turns", help="a caller turn, spoken with flite (repeatable)")
    c.add_argument("--wav", action=_TurnAction, dest="turns", help="a caller turn from a WAV file (repeatable)")
    c.add_argument("--dtmf", action=_TurnAction, dest="turns", help="a caller turn of DTMF digits (repeatable)")
    c.add_argument("--voice", default="kal16", help="flite voice of the caller (kal16, rms, awb, slt)")
    c.add_argument("--codec", action="append", choices=("PCMU", "PCMA", "G722"), help="offer only these codecs")
    c.add_argument("--barge-in-at", type=int, metavar="MS",
                   help="start the first turn MS ms after the agent starts talking, interrupting it")
    c.add_argument("--silence", type=float, default=1.2, help="seconds of agent silence that end its reply")
    c.add_argument("--speech-uri", help="speech server for synthesis/transcription (default: embedded)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")

    d = sub.add_parser("dialplan", help="dialplan tools")
    dsub = d.add_subparsers(dest="dialplan_command", required=True)
    dc = dsub.add_parser("check", help="validate dialplan files")
    dc.add_argument("paths", nargs="+")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from agent.serve import main_serve

        return main_serve(args)
    if args.command == "speech-server":
        from agent.speech_server import run

        return run(args.listen)
    if args.command == "call":
        from agent.caller import main_call

        return main_call(args)
    if args.command == "dialplan":
        return _dialplan_check(args.paths)
    return 2


def _dialplan_check(paths: list[str]) -> int:
    from agent.dialplan import DialplanError, load_dialplan

    status = 0
    for path in paths:
        try:
            load_dialplan(path)
        except DialplanError as e:
            print(str(e), file=sys.stderr)
            status = 1
        else:
            print(f"{path}: ok")
    return status


if __name__ == "__main__":
    sys.exit(main())
