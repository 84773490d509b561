"""``openclaw-voice serve --workers N``: the supervisor's settings from the command line, and its entry point."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

from twisted.logger import Logger

from agent.app.config import ServerConfig
from agent.app.control_plane import listen_pages
from agent.app.supervisor import DEFAULT_KAMAILIO_CFG, Supervisor, SupervisorSettings
from agent.app.supervisor_plan import WORKER_MAX_CALLS, plan_workers
from agent.app.supervisor_web import supervisor_pages
from sip.doors import DoorSettings

log = Logger(namespace="openclaw.supervisor")


def settings_from_args(args: Any, config: ServerConfig) -> SupervisorSettings:
    """Supervisor settings from ``serve`` options and the loaded config; ValueError on conflicts."""
    sip = config.sip
    host = args.host or sip.host
    port = args.port if args.port is not None else sip.port
    capacity = args.capacity if args.capacity is not None else sip.capacity
    if capacity > WORKER_MAX_CALLS:
        raise ValueError(f"--capacity {capacity} is per worker, and one worker holds at most {WORKER_MAX_CALLS} calls")
    if args.workers > 1 and ("tls" in sip.transports or sip.tcp_port):
        raise ValueError(f"sip.tls.port and sip.tcp_port name one port, which {args.workers} workers cannot share: "
                         "leave tcp_port at 0 (each worker's TCP follows its SIP port) and terminate TLS in front "
                         "of the workers, or run one worker")
    metrics_port = args.metrics_port if args.metrics_port is not None else config.metrics.port
    rtp_port = args.rtp_port if getattr(args, "rtp_port", None) is not None else sip.rtp_port
    rtp_range = args.rtp_port_range if getattr(args, "rtp_port_range", None) is not None else sip.rtp_port_range
    records = args.call_records if args.call_records is not None else config.call_records
    worker_host = args.worker_host or host
    plans = plan_workers(args.workers, host=worker_host, sip_port=port, worker_port=args.worker_port,
                         metrics_port=metrics_port, rtp_port=rtp_port, rtp_port_range=rtp_range,
                         call_records=records)
    worker_argv = [sys.executable, "-m", "agent.app.cli", "serve"]
    if args.config:
        worker_argv += ["--config", os.path.abspath(args.config)]
    for d in args.dialplan or ():
        worker_argv += ["--dialplan", os.path.abspath(d)]
    if args.speech_uri:
        worker_argv += ["--speech-uri", args.speech_uri]
    embedded = not (args.speech_uri or config.speech.regions)
    run_dir = os.path.abspath(args.run_dir or os.path.join("var", "run", f"openclaw-{port}"))
    drain = args.drain_timeout if args.drain_timeout is not None else 300.0
    return SupervisorSettings(
        workers=plans, worker_argv=worker_argv, capacity=capacity, public_host=host, public_port=port,
        metrics_host=args.metrics_host or config.metrics.host, metrics_port=metrics_port, run_dir=run_dir,
        front=args.front, kamailio_cfg=os.path.abspath(args.kamailio_cfg or DEFAULT_KAMAILIO_CFG),
        retry_after_s=sip.retry_after_s, embedded_speech=embedded,
        general_alongside_hints=config.speech.embedded_general_alongside_hints,
        open_speech=config.speech.embedded_open_speech, drain_timeout_s=drain,
        log_format=args.log_format,
        notify_front=os.environ.get("OPENCLAW_FRONT_NOTIFY", "1") != "0",
        access=sip.access, kamailio_defines=doors_defines(sip.doors) + kamailio_defines(
            getattr(args, "kamailio_define", None)))


def doors_defines(doors: DoorSettings) -> tuple[tuple[str, str], ...]:
    """The Kamailio defines of ``sip.doors`` (multipart: sdp_only reduces in the front as well)."""
    if doors.multipart != "sdp_only":
        return ()
    return (("MULTIPART_SDP_ONLY", "1"), ("MULTIPART_MAX_BYTES", str(doors.multipart_max_bytes)))


def kamailio_defines(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``--kamailio-define NAME=VALUE`` options as pairs; ValueError on a malformed one."""
    out = []
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--kamailio-define expects NAME=VALUE, got {item!r}")
        out.append((name, value))
    return tuple(out)


def main_supervise(args: Any) -> int:
    from twisted.logger import (
        FilteringLogObserver, LogLevel, LogLevelFilterPredicate, globalLogBeginner, jsonFileLogObserver,
        textFileLogObserver,
    )

    from dataclasses import replace

    from agent.app.config import load_config
    from agent.dialplan.model import DialplanError, load_dialplans
    from agent.yamlmarks import ConfigError

    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"openclaw-voice: invalid config:\n{e}", file=sys.stderr)
        return 2
    if args.dialplan:
        config = replace(config, dialplans=tuple(args.dialplan))
    try:
        load_dialplans(list(config.dialplans))  # refuse here rather than in N crash-looping workers
    except (DialplanError, ConfigError) as e:
        print(f"openclaw-voice: invalid dialplan:\n{e}", file=sys.stderr)
        return 2
    try:
        settings = settings_from_args(args, config)
    except ValueError as e:
        print(f"openclaw-voice: {e}", file=sys.stderr)
        return 2
    if settings.front == "kamailio":
        import shutil

        for binary in (settings.kamailio_bin, settings.kamcmd_bin):
            if shutil.which(binary) is None:
                print(f"openclaw-voice: --front kamailio needs {binary} (Debian package kamailio; "
                      f"ops/bootstrap.sh install)", file=sys.stderr)
                return 2
        if not os.path.exists(settings.kamailio_cfg):
            print(f"openclaw-voice: no Kamailio config at {settings.kamailio_cfg}", file=sys.stderr)
            return 2

    observer = jsonFileLogObserver(sys.stdout) if args.log_format == "json" else textFileLogObserver(sys.stdout)
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    from agent.secrets import redact_log_event

    redacting = FilteringLogObserver(observer, [predicate])
    globalLogBeginner.beginLoggingTo([lambda event: redacting(redact_log_event(event))], redirectStandardIO=False)

    from twisted.internet import reactor

    sup = Supervisor(settings, reactor)
    status = {"code": 0}

    def done() -> None:
        if reactor.running:
            reactor.stop()

    sup.on_done = done
    pages = supervisor_pages(sup)
    web_config = replace(config, metrics=replace(config.metrics, host=settings.metrics_host,
                                                 port=settings.metrics_port))

    def failed(failure: Any) -> None:
        log.failure("supervisor failed to start", failure)
        status["code"] = 1
        sup.drain()
        sup.end_calls()

    def started() -> None:
        try:
            listen_pages(reactor, web_config, pages)
        except Exception as e:  # noqa: BLE001 -- CannotListenError
            log.error("cannot serve metrics on {host}:{port}: {err}", host=settings.metrics_host,
                      port=settings.metrics_port, err=e)
            status["code"] = 1
            reactor.stop()
            return
        sup.start().addErrback(failed)

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        log.info("signal {sig}", sig=name)
        reactor.callFromThread(sup.drain)

    def on_hup(_signum: int, _frame: Any) -> None:
        log.info("SIGHUP: workers reload their dialplans")
        reactor.callFromThread(sup.reload)

    def install_handlers() -> None:
        # After reactor.run() has installed its own (it must, to reap children).
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGHUP, on_hup)

    reactor.callWhenRunning(install_handlers)
    reactor.callWhenRunning(started)
    reactor.run()
    return status["code"]
