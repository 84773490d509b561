"""Command-line entry point: ``openclaw-voice``.

Sub-commands:
  serve           answer SIP calls (embedded speech server unless regions are configured)
  speech-server   run the embedded Riva-compatible speech server alone
  call            place a test call and report what the agent said and how fast
  dialplan check  validate dialplan files
  dialplan simulate  run a dialplan flow in the terminal, or scripted for CI
"""
from __future__ import annotations

import argparse
import faulthandler
import sys
from typing import Any


class _TurnAction(argparse.Action):
    """Collect --say/--wav/--dtmf in the order given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from agent.tools.caller import CallerTurn

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
    s.add_argument("--metrics-host", help="address of /metrics and /healthz (default 127.0.0.1, or metrics.host of the config)")
    s.add_argument("--rtp-port", type=int, help="first RTP port (default 4000)")
    s.add_argument("--rtp-port-range", type=int, help="how many RTP ports from --rtp-port (default 200)")
    s.add_argument("--drain-timeout", type=float, default=None, metavar="S",
                   help="when draining (SIGTERM to the supervisor, SIGUSR1 or POST /admin/drain to a "
                        "worker), calls still up after S seconds are ended with a goodbye (default 300)")
    w = s.add_argument_group("workers (see docs/scaling.md)")
    w.add_argument("--workers", type=int, default=1, metavar="N",
                   help="run N worker processes under a supervisor (default 1: one process, no supervisor)")
    w.add_argument("--front", choices=("none", "kamailio"), default="none",
                   help="kamailio: start Kamailio on --host:--port and dispatch calls to the workers")
    w.add_argument("--worker-port", type=int, metavar="PORT",
                   help="SIP port of worker 0; worker i listens on PORT+i (default: --port + 100)")
    w.add_argument("--worker-host", metavar="ADDR",
                   help="SIP/RTP address of the workers (default: --host; 127.0.0.1 when that is 0.0.0.0 "
                        "and --front kamailio)")
    w.add_argument("--run-dir", metavar="DIR",
                   help="where the supervisor writes dispatcher.list, kamailio.cfg defines and sockets "
                        "(default var/run/openclaw-PORT)")
    w.add_argument("--kamailio-cfg", metavar="FILE", help="Kamailio config (default ops/kamailio/kamailio.cfg)")
    w.add_argument("--kamailio-define", action="append", metavar="NAME=VALUE",
                   help="with --front kamailio: override a define of the Kamailio config (repeatable), "
                        "e.g. PIKE_REQS=50 (see ops/kamailio/kamailio.cfg and docs/security.md)")
    w.add_argument("--worker-id", type=int, help=argparse.SUPPRESS)
    w.add_argument("--front-source", action="append", help=argparse.SUPPRESS)
    w.add_argument("--embedded-speech", help=argparse.SUPPRESS)

    ss = sub.add_parser("speech-server", help="run the embedded Riva-compatible speech server")
    ss.add_argument("--listen", default="127.0.0.1:50051", help="address to listen on (host:port)")
    ss.add_argument("--general-alongside-hints", action="store_true",
                    help="the same as --open-speech general")
    ss.add_argument("--open-speech", choices=("whisper", "general", "hints"), default=None,
                    help="how words that are not the phrase hints are heard: whisper (default), general "
                         "(the general pocketsphinx model alongside) or hints (the hint decoder alone)")
    for flag, text in (("--tls-cert", "serve TLS with this PEM certificate"), ("--tls-key", "its PEM key"),
                       ("--tls-client-ca", "require client certificates from this PEM CA"),
                       ("--auth-token-env", "require 'authorization: Bearer <token>', the token from this variable"),
                       ("--auth-token-file", "... or from this file"),
                       ("--asr-model", "recognition model name reported and accepted (a version: docs/regions.md)"),
                       ("--tts-model-suffix", "appended to every synthesis model name flite-<voice>")):
        ss.add_argument(flag, help=text)

    from agent.regions.rollout_io import add_models_parser

    add_models_parser(sub)

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
    ct = c.add_argument_group("transport and encryption (see docs/sip-trunk.md)")
    ct.add_argument("--transport", choices=("udp", "tcp", "tls"), default="udp",
                    help="SIP transport of the call (adds ;transport= to the URI; default udp)")
    ct.add_argument("--srtp", choices=("off", "optional", "mandatory"), default="off",
                    help="offer SRTP (SDES): optional offers RTP/AVP with keys, mandatory RTP/SAVP")
    ct.add_argument("--tls-ca", metavar="PEM", help="CA bundle that signs the agent's certificate")
    ct.add_argument("--tls-cert", metavar="PEM", help="client certificate to present over TLS")
    ct.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    ct.add_argument("--tls-no-verify", action="store_true", help="do not verify the agent's certificate")

    lr = sub.add_parser("latency-report", help="turn and barge-in latency from a packet capture")
    lr.add_argument("capture", help="classic pcap with SIP and RTP (dumpcap -P / tshark -F pcap)")
    lr.add_argument("--png", help="also draw histograms to this PNG file")
    lr.add_argument("--json", action="store_true", help="print the summary as JSON")
    lr.add_argument("--voiced-dbfs", type=float, default=-40.0, help="level above which a packet is voiced")
    lr.add_argument("--caller-gap-ms", type=float, default=700.0,
                    help="caller pauses shorter than this stay inside one turn")
    lr.add_argument("--agent-gap-ms", type=float, default=450.0,
                    help="the agent counts as silent after a gap this long (flite pauses ~380 ms between sentences)")

    d = sub.add_parser("dialplan", help="dialplan tools")
    dsub = d.add_subparsers(dest="dialplan_command", required=True)
    dc = dsub.add_parser("check", help="validate dialplan files (structure, references, prompts)")
    dc.add_argument("paths", nargs="+", metavar="PATH",
                    help="dialplan files; several are checked together as one dialplan")
    dc.add_argument("--each", action="store_true", help="check each file on its own")
    dc.add_argument("--prepare", action="store_true",
                    help="also build every ask's intent matcher (fills the sentence-vector cache)")
    dsim = dsub.add_parser("simulate", help="run a dialplan in the terminal or from a script",
                           description="Type what the caller says; '#1' presses a key, an empty "
                                       "line is silence, /vars shows variables, /quit ends.")
    dsim.add_argument("paths", nargs="*", metavar="PATH",
                      help="dialplan files (a script may name its own with 'dialplan:')")
    dsim.add_argument("--number", default="1000", help="called number (default 1000)")
    dsim.add_argument("--caller", default="+15550000000", help="calling number")
    dsim.add_argument("--script", metavar="FILE", help="run the scenarios of a YAML script and "
                      "check the replies (exit status 1 on a mismatch)")
    dsim.add_argument("--webhooks", metavar="real|FILE",
                      help="call webhooks for real, or answer them from a mock file")
    dsim.add_argument("--now", metavar="ISO8601", help="the simulated time, e.g. 2025-03-04T10:00:00-05:00")
    dsim.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                      help="set a call variable, e.g. config.transfer_uri=sip:agent@pbx (repeatable)")
    dsim.add_argument("--transfer", default="succeed", metavar="succeed|REASON",
                      help="outcome of transfers (default succeed; else the failure reason)")
    dsim.add_argument("--model-reply", metavar="TEXT", help="what the dialogue model answers")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A crash inside a native library (pjsua2, pocketsphinx, flite) prints the Python stacks of
    # every thread to stderr, which the log collects, instead of dying silently.
    faulthandler.enable(all_threads=True)
    if args.command == "serve":
        from agent.app.serve import main_serve

        return main_serve(args)
    if args.command == "speech-server":
        from agent.speech.server.main import main as speech_main

        argv = ["--listen", args.listen, *(["--general-alongside-hints"] if args.general_alongside_hints else []),
                *(["--open-speech", args.open_speech] if args.open_speech else [])]
        for name in ("tls_cert", "tls_key", "tls_client_ca", "auth_token_env", "auth_token_file", "asr_model",
                     "tts_model_suffix"):
            if getattr(args, name):
                argv += ["--" + name.replace("_", "-"), getattr(args, name)]
        return speech_main(argv)
    if args.command == "models":
        from agent.regions.rollout_io import main_models

        return main_models(args)
    if args.command == "call":
        from agent.tools.caller import main_call

        return main_call(args)
    if args.command == "latency-report":
        from agent.tools.latency_report import main_report

        return main_report(args)
    if args.command == "dialplan":
        if args.dialplan_command == "simulate":
            return _dialplan_simulate(args)
        return _dialplan_check(args.paths, each=args.each, prepare=args.prepare)
    return 2


def _dialplan_check(paths: list[str], each: bool = False, prepare: bool = False) -> int:
    """Validate *paths* together (or each alone): every problem as file:line:column: message.
    *prepare*: build the intent matchers of the valid ones too."""
    from agent.dialplan.model import DialplanError, load_dialplans

    groups = [[path] for path in paths] if each else [paths]
    status = 0
    for group in groups:
        try:
            plan = load_dialplans(group)
        except DialplanError as e:
            print(str(e), file=sys.stderr)
            count = len(e.errors)
            print(f"{', '.join(group)}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
            status = 1
        else:
            flows = len(plan.flows)
            steps = sum(len(flow.steps) for flow in plan.flows.values())
            print(f"{', '.join(group)}: ok ({len(plan.routes)} routes, {flows} flows, "
                  f"{steps} steps; version {plan.digest})")
            if prepare:
                from agent.app.server import prepare_intent_matchers

                print(f"{', '.join(group)}: {prepare_intent_matchers(plan)} asks prepared")
    return status


def _dialplan_simulate(args: argparse.Namespace) -> int:
    """Run a flow interactively (stdin) or the scenarios of --script."""
    from agent.dialplan.model import DialplanError, load_dialplans
    from agent.tools.simulator import RealWebhooks, SimulatedCall, parse_now, run_interactive, run_script
    from agent.integrations.webhook import MockWebhooks

    variables: dict[str, str] = {}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"simulate: expected --var NAME=VALUE, found {item!r}", file=sys.stderr)
            return 2
        variables[name.strip()] = value
    if args.script:
        return run_script(args.paths, args.script, webhooks=args.webhooks, now=args.now,
                          variables=variables)
    if not args.paths:
        print("simulate: give the dialplan file(s), or --script", file=sys.stderr)
        return 2
    try:
        plan = load_dialplans(args.paths)
        now = parse_now(args.now) if args.now else None
        executor = None
        if args.webhooks == "real":
            executor = RealWebhooks()
        elif args.webhooks:
            executor = MockWebhooks.from_file(args.webhooks)
    except DialplanError as e:
        print(str(e), file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"simulate: {e}", file=sys.stderr)
        return 2
    kwargs = {"webhooks": executor} if executor is not None else {}
    call = SimulatedCall(plan, number=args.number, caller=args.caller, now=now, variables=variables,
                         transfer=args.transfer, model_reply=args.model_reply, **kwargs)
    try:
        return run_interactive(call)
    finally:
        if isinstance(executor, RealWebhooks):
            executor.close()


if __name__ == "__main__":
    sys.exit(main())
