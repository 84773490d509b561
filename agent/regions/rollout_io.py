"""The I/O of a rollout: nodes' ``/admin/regions`` over HTTP, the deployment hook as a shell command,
and ``openclaw-voice models rollout|status`` (the controller itself is :mod:`agent.regions.rollout`).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

from twisted.internet import defer
from twisted.internet.utils import getProcessOutputAndValue

from agent.integrations.http import HttpClient
from agent.regions.rollout import RolloutController, RolloutPlan
from agent.regions.rollout_admin import parse_versions
from agent.regions.selector import version_kind

#: placeholders of an --apply template
TEMPLATE_FIELDS = ("region", "versions", "version", "kind", "model")


class HttpNodeDriver:
    """``/admin/regions`` of the node whose admin listener is *base_url* (``http://host:port``)."""

    def __init__(self, reactor: Any, base_url: str, token: str, *, timeout_s: float = 10.0,
                 http: HttpClient | None = None) -> None:
        self.name = base_url
        self._url = base_url.rstrip("/") + "/admin/regions"
        self._headers = (("Authorization", f"Bearer {token}"),)
        self._timeout_s = timeout_s
        self._http = http or HttpClient(reactor)

    def _answer(self, response: Any) -> dict[str, Any]:
        try:
            body = json.loads(response.body or b"{}")
        except ValueError:
            body = {"error": response.body[:200].decode("utf-8", "replace")}
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {body.get('error', body)}")
        return body  # type: ignore[no-any-return]

    def status(self) -> defer.Deferred[dict[str, Any]]:
        d = self._http.get(self._url, timeout_s=self._timeout_s, headers=self._headers)
        return d.addCallback(self._answer)

    def command(self, region: str, action: str, versions: tuple[str, ...] = ()) -> defer.Deferred[dict[str, Any]]:
        d = self._http.request("POST", f"{self._url}/{region}/{action}", timeout_s=self._timeout_s,
                               json={"versions": list(versions)} if versions else {}, headers=self._headers)
        return d.addCallback(self._answer)


def render_template(template: str, region: str, versions: tuple[str, ...]) -> str:
    """The hook command for *region*: ``{region}``, ``{versions}`` (space-separated), ``{version}``
    (the first), ``{kind}`` and ``{model}`` (its parts) replaced, each shell-quoted."""
    first = versions[0]
    values = {"region": region, "versions": " ".join(versions), "version": first, "kind": version_kind(first),
              "model": first.partition(":")[2]}
    try:
        return template.format(**{k: shlex.quote(v) for k, v in values.items()})
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"--apply template {template!r}: {exc!s} is not a placeholder; use "
                         + ", ".join("{%s}" % f for f in TEMPLATE_FIELDS) + " (write {{ and }} for braces)") from None


class ShellDeployer:
    """Runs the ``--apply`` template with ``/bin/sh -c`` (bounded by *timeout_s*: ``timeout(1)``)."""

    def __init__(self, reactor: Any, template: str, *, timeout_s: float = 300.0, log: Any = print) -> None:
        render_template(template, "r", ("asr:x",))  # an unknown {placeholder} fails here, before any step
        self._reactor = reactor
        self._template = template
        self._timeout_s = timeout_s
        self._log = log

    @defer.inlineCallbacks
    def apply(self, region: str, versions: tuple[str, ...]) -> Any:
        command = render_template(self._template, region, versions)
        self._log(f"hook: {command}")
        out, err, code = yield getProcessOutputAndValue(
            "timeout", ("--kill-after=5", f"{self._timeout_s:g}", "/bin/sh", "-c", command), env=dict(os.environ),
            reactor=self._reactor)
        text = (out + err).decode("utf-8", "replace").strip()
        if text:
            for line in text.splitlines()[-10:]:
                self._log(f"hook| {line}")
        if code == 124:
            self._log(f"hook: timed out after {self._timeout_s:g} s")
        return code


def add_models_parser(sub: Any) -> None:
    """``openclaw-voice models rollout|status`` (called by agent/app/cli.py)."""
    m = sub.add_parser("models", help="model versions across speech regions (docs/regions.md, \"Rollouts\")")
    msub = m.add_subparsers(dest="models_command", required=True)
    for name, text in (("rollout", "move regions to new model versions one at a time"),
                       ("status", "each node's view of the regions' versions and rollout state")):
        p = msub.add_parser(name, help=text)
        p.add_argument("--node", action="append", metavar="URL",
                       help="a node's admin listener (repeatable; default http://127.0.0.1:9464)")
        p.add_argument("--token-env", default="OPENCLAW_ADMIN_TOKEN", metavar="NAME",
                       help="environment variable holding the admin bearer token (default OPENCLAW_ADMIN_TOKEN)")
        p.add_argument("--token-file", metavar="FILE", help="... or a file holding it")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        if name == "rollout":
            p.add_argument("versions", nargs="+", metavar="KIND:VERSION", help="e.g. asr:conformer-en-US-2.2")
            p.add_argument("--regions", required=True, help="comma-separated, moved in this order")
            p.add_argument("--apply", required=True, metavar="TEMPLATE",
                           help="command run per region to make its speech servers serve the versions, e.g. "
                                "'systemctl restart riva@{region}'; placeholders " +
                                ", ".join("{%s}" % f for f in TEMPLATE_FIELDS))
            p.add_argument("--drain-timeout", type=float, default=120.0, metavar="S",
                           help="wait at most S s for a region's calls to end before switching it (default 120)")
            p.add_argument("--health-timeout", type=float, default=60.0, metavar="S",
                           help="abort and roll back when a switched region is not healthy on the new "
                                "version within S s (default 60)")
            p.add_argument("--hook-timeout", type=float, default=300.0, metavar="S", help="bound of one hook run")
            p.add_argument("--poll-interval", type=float, default=0.5, metavar="S")
            p.add_argument("--pause", type=float, default=0.0, metavar="S", help="between regions")
            p.add_argument("--no-rollback", action="store_true", help="on a failure, stop without rolling back")


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as handle:
            return handle.read().strip()
    return os.environ.get(args.token_env, "").strip()


def main_models(args: argparse.Namespace) -> int:
    """Run ``models rollout`` / ``models status``; exit 0 on success, 1 on an aborted rollout, 2 on bad input."""
    from twisted.internet import task

    try:
        token = _token(args)
    except OSError as exc:
        print(f"models: --token-file: {exc}", file=sys.stderr)
        return 2
    if not token:
        print(f"models: no admin token (set {args.token_env} or give --token-file)", file=sys.stderr)
        return 2
    nodes_urls = args.node or ["http://127.0.0.1:9464"]
    plan = None
    if args.models_command == "rollout":
        try:
            versions = parse_versions(list(args.versions))
            regions = tuple(r.strip() for r in args.regions.split(",") if r.strip())
            plan = RolloutPlan(versions, regions, drain_timeout_s=args.drain_timeout,
                               health_timeout_s=args.health_timeout, poll_interval_s=args.poll_interval,
                               pause_s=args.pause, rollback=not args.no_rollback)
            render_template(args.apply, "r", versions)
        except (ValueError, KeyError, IndexError) as exc:
            print(f"models rollout: {exc}", file=sys.stderr)
            return 2
    result: dict[str, int] = {"code": 0}

    @defer.inlineCallbacks
    def run(reactor: Any) -> Any:
        http = HttpClient(reactor)
        nodes = [HttpNodeDriver(reactor, url, token, http=http) for url in nodes_urls]
        if plan is None:
            out = {}
            for node in nodes:
                try:
                    out[node.name] = yield node.status()
                except Exception as exc:
                    out[node.name] = {"error": str(exc)}
                    result["code"] = 1
            if args.json:
                print(json.dumps(out, indent=2))
            else:
                for name, status in out.items():
                    print(f"{name}:")
                    for r in status.get("regions", []):
                        print(f"  {r['name']:<16} {r['rollout']:<9} {r['health']:<8} calls {r['active_calls']:<4} "
                              f"{' '.join(r['versions']) or '-'}")
                    if "error" in status:
                        print(f"  error: {status['error']}")
            return
        say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else \
            (lambda line: print(line, flush=True))
        controller = RolloutController(reactor, nodes, ShellDeployer(reactor, args.apply,
                                                                     timeout_s=args.hook_timeout, log=say),
                                       plan, log=say)
        report = yield controller.run()
        if args.json:
            print(json.dumps(report.as_dict(), indent=2))
        else:
            for step in report.steps + report.rollback:
                print(f"  {step.region:<16} {step.result:<12} drain {step.drain_s:6.2f} s (left {step.calls_left})"
                      f"  hook {step.hook_s:6.2f} s  health {step.health_wait_s:6.2f} s  {step.detail}")
        result["code"] = 0 if report.ok else 1

    try:
        task.react(run, [])
    except SystemExit as exc:  # react ends the process's reactor run with sys.exit
        if exc.code not in (0, None):
            return int(exc.code) if isinstance(exc.code, int) else 1
    return result["code"]
