"""Process set-up of ``openclaw-voice serve``: config, logging, reactor, shutdown."""
from __future__ import annotations

import gc
import sys
from dataclasses import replace
from typing import Any

from twisted.logger import (
    FilteringLogObserver, LogLevel, LogLevelFilterPredicate, globalLogBeginner, jsonFileLogObserver,
    textFileLogObserver, Logger,
)

from agent.yamlmarks import ConfigError

log = Logger(namespace="openclaw.serve")


def main_serve(args: Any) -> int:
    from agent.app.config import RegionSettings, load_config
    from agent.dialplan.model import DialplanError

    if getattr(args, "workers", 1) != 1 or getattr(args, "front", "none") != "none":
        if getattr(args, "workers", 1) < 1:
            print("openclaw-voice: --workers must be at least 1", file=sys.stderr)
            return 2
        from agent.app.supervisor_main import main_supervise

        return main_supervise(args)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"openclaw-voice: invalid config:\n{e}", file=sys.stderr)
        return 2
    config = config.with_overrides(host=args.host, port=args.port, capacity=args.capacity,
                                   rtp_port=getattr(args, "rtp_port", None),
                                   rtp_port_range=getattr(args, "rtp_port_range", None))
    if getattr(args, "front_source", None):
        access = config.sip.access
        config = replace(config, sip=replace(config.sip, access=replace(
            access, front_sources=access.front_sources + tuple(args.front_source))))
    if args.metrics_port is not None:
        config = replace(config, metrics=replace(config.metrics, port=args.metrics_port))
    if getattr(args, "metrics_host", None):
        config = replace(config, metrics=replace(config.metrics, host=args.metrics_host))
    if args.speech_uri:
        config = replace(config, speech=replace(config.speech, regions=(RegionSettings("cli", args.speech_uri),)))
    if getattr(args, "embedded_speech", None):
        # The supervisor's one embedded speech server, shared by its workers.
        config = replace(config, speech=replace(config.speech,
                                                regions=(RegionSettings("local", args.embedded_speech),)))
    if args.dialplan:
        config = replace(config, dialplans=tuple(args.dialplan))
    if args.call_records is not None:
        config = replace(config, call_records=args.call_records)
    if getattr(args, "worker_id", None) is not None:
        # A supervisor's worker serves every page on its own loopback port (the supervisor's
        # listener is the node's); configured status/admin ports belong to the supervisor.
        config = replace(config, status=replace(config.status, port=None), admin=replace(config.admin, port=None))

    observer = jsonFileLogObserver(sys.stdout) if args.log_format == "json" else textFileLogObserver(sys.stdout)
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    from agent.secrets import redact_log_event

    redacting = FilteringLogObserver(observer, [predicate])
    globalLogBeginner.beginLoggingTo([lambda event: redacting(redact_log_event(event))], redirectStandardIO=False)

    from twisted.internet import reactor

    from agent.app.server import AgentServer, install_signal_handlers, stop_reactor

    try:
        server = AgentServer(config, reactor)
    except (DialplanError, ConfigError) as e:
        print(f"openclaw-voice: invalid dialplan:\n{e}", file=sys.stderr)
        return 2
    server.worker_id = getattr(args, "worker_id", None)
    drain_timeout = getattr(args, "drain_timeout", None)
    server.drain_timeout_s = 300.0 if drain_timeout is None else drain_timeout
    server.on_idle = lambda: stop_reactor(reactor)
    outcome = {"status": 0}

    def failed(failure: Any) -> None:
        log.failure("server failed to start", failure)
        outcome["status"] = 1
        reactor.stop()

    reactor.callWhenRunning(lambda: server.start().addCallback(freeze_what_was_loaded).addErrback(failed))
    reactor.addSystemEventTrigger("before", "shutdown", server.stop)
    # After reactor.run() has installed its own handlers (it replaces SIGTERM's).
    reactor.callWhenRunning(install_signal_handlers, reactor, server)
    reactor.run()
    return outcome["status"]


def freeze_what_was_loaded(result: Any = None) -> Any:
    """Once the server has started, move what it loaded (dialplans, sentence encoders, prompt
    audio: objects that live as long as the process) out of the garbage collector's reach.

    A full collection walks every tracked object while holding the GIL; with them it took 45-60 ms,
    and pjmedia's clock thread, which runs each call's media frame in Python, waited for it: every
    call's audio stopped that long (a gap inside a prompt, ``ops/bench/turn-latency``'s pacing)."""
    gc.collect()
    gc.freeze()
    return result
