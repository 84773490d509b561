"""Server configuration: one YAML file, parsed once into frozen dataclasses.

Every key is optional; unknown keys and wrong types are errors that name
``file:line:column`` and what was expected. See ``docs/configuration.md``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, TypeVar

from agent.app.config_routing import SECTIONS, ProbeSettings, read_section
from agent.app.config_secrets import pem_path, secret, speech_connection
from agent.integrations.chat_stream import ChatSettings
from agent.integrations.tls import TlsSettings
from agent.regions.health import HealthPolicy
from agent.regions.selector import SelectionPolicy
from agent.speech.api import SpeechConnection
from agent.speech.failover_core import FailoverSettings
from agent.speech.voices import DEFAULT_VOICE
from agent.secrets import remember_secret
from agent.app.config_sip import TRANSPORT_KEYS, read_transport_keys
from agent.call.bargein import BargeInConfig
from agent.yamlmarks import ConfigError, Mark, Node, key_mark, load
from sip.doors import DoorSettings
from sip.guard import ALGORITHMS, AccessSettings, DigestUser, parse_source
from sip.registration import RegistrationConfig
from sip.dialog import AnswerSettings, SessionTimerSettings
from sip.transport import SrtpSettings
from sip.transport import TlsSettings as SipTlsSettings

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIALPLAN = os.path.join(PACKAGE_ROOT, "dialplans", "default.yaml")


@dataclass(frozen=True)
class SipSettings:
    host: str = "0.0.0.0"
    port: int = 5060
    public_address: str = ""
    capacity: int = 4
    retry_after_s: int = 5
    codecs: tuple[str, ...] = ("PCMU", "PCMA", "G722")
    rtp_port: int = 4000
    rtp_port_range: int = 200
    registration: RegistrationConfig | None = None
    #: how often the server's calls are checked against pjsua's call table (docs/configuration.md)
    reconcile_interval_ms: int = 5000
    #: who may call: trusted sources, digest users, bans (docs/security.md)
    access: AccessSettings = field(default_factory=AccessSettings)
    #: multipart bodies and unserved methods (SECURITY.md)
    doors: DoorSettings = field(default_factory=DoorSettings)
    #: SIP transports (udp, tcp, tls), the TCP port (0: ``port``), TLS and SRTP (docs/sip-trunk.md)
    transports: tuple[str, ...] = ("udp",)
    tcp_port: int = 0
    tls: SipTlsSettings = field(default_factory=SipTlsSettings)
    srtp: SrtpSettings = field(default_factory=SrtpSettings)
    #: ringing / early media before the answer, and RFC 4028 session timers
    answer: AnswerSettings = field(default_factory=AnswerSettings)
    session_timers: SessionTimerSettings = field(default_factory=SessionTimerSettings)


@dataclass(frozen=True)
class MediaSettings:
    frame_ms: int = 10
    jb_init_ms: int = -1
    jb_min_pre_ms: int = -1
    jb_max_pre_ms: int = -1
    #: the most audio the jitter buffer holds: a cap on the delay it adds. Loopback SIPp at four
    #: calls on two cores let pjmedia's adaptive buffer grow to 100-120 ms (turn latency p95
    #: 160 ms); capped at 60 ms it held 23-37 ms on average, at 40 ms 21-30 ms, dropping 4-34
    #: frames of 10 ms per 90 s call (1-2 %; every turn of the bench still recognised)
    jb_max_ms: int = 40
    #: voiced audio that counts as the caller starting to speak (and interrupting)
    speech_start_ms: int = 120
    #: silence that counts as a gap in the caller's speech (the endpointer decides what it means)
    speech_end_ms: int = 30
    #: the first prompt of a call starts this long after the media does
    first_prompt_delay_ms: int = 200
    #: SCHED_FIFO priority of pjmedia's clock thread (0: the normal scheduler). At four calls
    #: Whisper's bursts take both cores and the clock thread waited for one: the agent's RTP
    #: pacing p99 was 3.5-4.5 ms; at 10 it is 1.4-1.5 ms (docs/latency.md)
    clock_thread_priority: int = 10


@dataclass(frozen=True)
class RegionSettings:
    """One region's backends (docs/regions.md). ``uri`` is shorthand for one ASR+TTS endpoint."""

    name: str
    uri: str = ""
    use_ssl: bool = False
    asr: tuple[str, ...] = ()
    tts: tuple[str, ...] = ()
    dialogue: str = ""
    model_versions: tuple[str, ...] = ()
    capacity: int = 64
    home_prefixes: tuple[str, ...] = ()
    home_networks: tuple[str, ...] = ()
    #: TLS and request metadata of every endpoint of the region (use_ssl included)
    connection: SpeechConnection = field(default_factory=SpeechConnection)

    @property
    def asr_endpoints(self) -> tuple[str, ...]:
        return self.asr or ((self.uri,) if self.uri else ())

    @property
    def tts_endpoints(self) -> tuple[str, ...]:
        return self.tts or ((self.uri,) if self.uri else ())


@dataclass(frozen=True)
class RoutingSettings:
    probe_interval_ms: int = 250
    probe_timeout_ms: int = 500
    stall_timeout_ms: int = 400
    hysteresis_ms: int = 15
    #: ask each Riva endpoint which models it serves (GetRiva*Config) and route pinned calls by it
    discover_versions: bool = False
    #: the full policies (``routing.probe|health|selection|failover``; the keys above are shorthands)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    health: HealthPolicy = field(default_factory=HealthPolicy)
    selection: SelectionPolicy = field(default_factory=SelectionPolicy)
    failover: FailoverSettings = field(default_factory=FailoverSettings)


@dataclass(frozen=True)
class SpeechSettings:
    #: empty: start the embedded speech server on loopback
    regions: tuple[RegionSettings, ...] = ()
    routing: RoutingSettings = field(default_factory=RoutingSettings)
    voice: str = DEFAULT_VOICE
    #: trailing silence (ms) after which the recogniser finalises an utterance
    stop_history_ms: int = 300
    #: send each call's expected phrases to the recogniser (Riva ``speech_contexts``)
    phrase_hints: bool = True
    #: readings of each recognition result to ask for (Riva ``max_alternatives``, 1-5): words
    #: that select nothing may select an intent by another reading (docs/speech.md)
    alternatives: int = 4
    #: the embedded speech server decodes hinted streams beside the general model too
    #: (open speech heard better, about three times the decoding CPU: docs/speech.md)
    embedded_general_alongside_hints: bool = False
    #: how the embedded speech server hears words that are not the phrase hints: whisper,
    #: general (the same as embedded_general_alongside_hints) or hints (docs/speech.md)
    embedded_open_speech: str = "whisper"
    #: ask the recogniser to punctuate, for endpointing.sentence_end_silence_ms: "auto" (the
    #: embedded speech server only: its sentence mark is Whisper's reading of voice and words;
    #: a hosted Riva punctuation model writes one from the words alone), "on" or "off"
    punctuation: str = "auto"

    @property
    def asks_punctuation(self) -> bool:
        return self.punctuation == "on" or (self.punctuation == "auto" and not self.regions)


@dataclass(frozen=True)
class EndpointingSettings:
    #: silence that ends a turn whose words already complete a request of the dialogue
    complete_silence_ms: int = 30
    #: ... a request matched by meaning only, not by the examples' words
    meaning_silence_ms: int = 600
    #: silence that ends a turn of finished words that are no request of the dialogue
    #: ("my card was stolen yesterday")
    finished_silence_ms: int = 600
    #: silence that ends any other turn
    incomplete_silence_ms: int = 800
    #: silence that ends a turn ending like an unfinished phrase ("I would like to")
    continuation_silence_ms: int = 800
    #: silence that ends a complete request said in under 300 ms of speech (one syllable) ("no")
    short_turn_silence_ms: int = 250
    #: silence that ends a request that is a yes or a no alone ("yeah", "nope"), often the
    #: start of a longer turn ("yeah, actually, another question")
    answer_silence_ms: int = 500
    #: ... a yes or a no alone answering a yes/no question ("Do you want to end the call?")
    yes_no_answer_silence_ms: int = 250
    #: silence that ends a turn of finished words (or a request by meaning) once they are all the
    #: recogniser's final results, heard with confidence confident_min_confidence (0-1) or more
    confident_silence_ms: int = 400
    confident_min_confidence: float = 0.6
    #: silence that ends a turn of finished words (or a request by meaning) that the recogniser
    #: wrote as a whole sentence (its transcript ends with "." or "?"; it is asked to punctuate
    #: only when this is shorter than finished_silence_ms or meaning_silence_ms)
    sentence_end_silence_ms: int = 250


@dataclass(frozen=True)
class MetricsSettings:
    """The HTTP listener of ``/metrics`` (and of ``/healthz``, ``/regions``, ``/admin`` unless they have their own)."""

    host: str = "127.0.0.1"
    port: int = 9464


@dataclass(frozen=True)
class StatusSettings:
    """An own listener for ``/healthz`` and ``/regions`` (port None: on the metrics listener)."""

    host: str = "127.0.0.1"
    port: int | None = None


@dataclass(frozen=True)
class AdminSettings:
    """``/admin/*``: the bearer token it requires, and an own listener (port None: on the metrics one)."""

    #: "" : no token configured, every admin request is refused (set it with !env or !file)
    token: str = ""
    host: str = "127.0.0.1"
    port: int | None = None


@dataclass(frozen=True)
class RetentionSettings:
    """How long recordings (``recordings_dir``) are kept: by age and by total size (0: no limit)."""

    max_age_days: float = 0.0
    max_total_mb: float = 0.0
    check_interval_s: float = 3600.0


@dataclass(frozen=True)
class ServerConfig:
    sip: SipSettings = field(default_factory=SipSettings)
    media: MediaSettings = field(default_factory=MediaSettings)
    speech: SpeechSettings = field(default_factory=SpeechSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    endpointing: EndpointingSettings = field(default_factory=EndpointingSettings)
    #: what a caller's voice over an interruptible prompt must be to take the turn
    barge_in: BargeInConfig = field(default_factory=BargeInConfig)
    dialplans: tuple[str, ...] = (DEFAULT_DIALPLAN,)
    #: where "talk to a person" transfers go (blind transfer with REFER)
    transfer_uri: str = "sip:agents@127.0.0.1:5070"
    #: call records: a directory of per-day JSON-lines files, or one file ending in .jsonl
    #: ("" to only log them)
    call_records: str = "var/calls"
    #: where `record` steps write caller messages (WAV)
    recordings_dir: str = "var/recordings"
    #: free-form values a dialplan can read as {{ config.NAME }}
    variables: tuple[tuple[str, str], ...] = ()
    #: TLS of the agent's HTTP requests (webhooks, the dialogue model, its probes)
    http: TlsSettings = field(default_factory=TlsSettings)
    #: the dialogue model (model steps): URL, API key, model name, sampling
    dialogue: ChatSettings = field(default_factory=ChatSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    admin: AdminSettings = field(default_factory=AdminSettings)
    recordings_retention: RetentionSettings = field(default_factory=RetentionSettings)

    def with_overrides(self, **sip: Any) -> "ServerConfig":
        return replace(self, sip=replace(self.sip, **{k: v for k, v in sip.items() if v is not None}))


class _Reader:
    """Checks one mapping's keys and value types, collecting errors."""

    def __init__(self, node: Node, where: str, errors: list[tuple[Mark, str]]) -> None:
        self.node = node
        self.where = where
        self.errors = errors
        self.values: dict[str, Node] = node.value if isinstance(node.value, dict) else {}
        if not isinstance(node.value, dict):
            errors.append((node.mark, f"{where}: expected a mapping, got {_kind(node.value)}"))

    def check_keys(self, allowed: tuple[str, ...]) -> None:
        for key in self.values:
            if key not in allowed:
                self.errors.append((key_mark(self.node, key),
                                    f"unknown key {key!r} in {self.where}; expected one of: {', '.join(allowed)}"))

    def get(self, key: str, kind: type, default: Any, check: Callable[[Any], str | None] | None = None) -> Any:
        n = self.values.get(key)
        if n is None:
            return default
        value = n.value
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            value, ok = str(value), True
        if not ok:
            self.errors.append((n.mark, f"{self.where}.{key}: expected {kind.__name__}, got {_kind(value)}"))
            return default
        if check is not None:
            problem = check(value)
            if problem:
                self.errors.append((n.mark, f"{self.where}.{key}: {problem}"))
                return default
        return value

    def sub(self, key: str) -> "_Reader | None":
        n = self.values.get(key)
        if n is None or n.value is None:
            return None
        return _Reader(n, f"{self.where}.{key}", self.errors)

    def strings(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        n = self.values.get(key)
        if n is None:
            return default
        if not isinstance(n.value, list) or not all(isinstance(i.value, str) for i in n.value):
            self.errors.append((n.mark, f"{self.where}.{key}: expected a list of strings"))
            return default
        return tuple(i.value for i in n.value)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def _port(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "expected a port number 0-65535"


def _on_off_auto(r: "_Reader", key: str, default: str) -> str:
    """auto, on or off (YAML reads a bare on/off, yes/no or true/false as a boolean)."""
    n = r.values.get(key)
    if n is not None and isinstance(n.value, bool):
        return "on" if n.value else "off"
    return r.get(key, str, default, lambda v: None if v in ("auto", "on", "off") else "expected auto, on or off")


def _positive(v: int) -> str | None:
    return None if v > 0 else "expected a positive integer"


_REGION_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def _region(item: Node, where: str, errors: list[tuple[Mark, str]], base: str = ".") -> RegionSettings:
    r = _Reader(item, where, errors)
    r.check_keys(("name", "uri", "use_ssl", "asr", "tts", "dialogue", "model_versions", "capacity", "home",
                  "root_ca", "client_cert", "client_key", "metadata"))
    name = r.get("name", str, "")
    if not _REGION_NAME.match(name):
        errors.append((item.mark, f"{where}.name: expected a name of lower-case letters, digits, '_' or '-' "
                                  f"(it is a metric label), got {name!r}"))
    uri = r.get("uri", str, "")
    asr, tts = r.strings("asr", ()), r.strings("tts", ())
    if not uri and not (asr and tts):
        errors.append((item.mark, f"{where}: expected 'uri' (host:port of a Riva server) or both 'asr' and 'tts' lists"))
    prefixes: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()
    if (rh := r.sub("home")) is not None:
        rh.check_keys(("prefixes", "networks"))
        prefixes, networks = rh.strings("prefixes", ()), rh.strings("networks", ())
    use_ssl = r.get("use_ssl", bool, False)
    connection = speech_connection(r.values, where, base, errors, use_ssl)
    return RegionSettings(name=name, uri=uri, use_ssl=use_ssl, asr=asr, tts=tts,
                          dialogue=r.get("dialogue", str, ""), model_versions=r.strings("model_versions", ()),
                          capacity=r.get("capacity", int, 64, _positive), home_prefixes=prefixes,
                          home_networks=networks, connection=connection)


def _http_settings(r: "_Reader | None", base: str, errors: list[tuple[Mark, str]]) -> TlsSettings:
    if r is None:
        return TlsSettings()
    r.check_keys(("ca_bundle", "client_cert", "client_key"))
    ca = pem_path(r.values.get("ca_bundle"), f"{r.where}.ca_bundle", base, errors, b"CERTIFICATE")
    cert = pem_path(r.values.get("client_cert"), f"{r.where}.client_cert", base, errors, b"CERTIFICATE")
    key = pem_path(r.values.get("client_key"), f"{r.where}.client_key", base, errors, b"PRIVATE KEY")
    if "client_key" in r.values and "client_cert" not in r.values:
        errors.append((r.values["client_key"].mark, f"{r.where}.client_key: expected client_cert too"))
    return TlsSettings(ca_bundle=ca, client_cert=cert, client_key=key)


def _routing_sections(flat: RoutingSettings, r: _Reader, errors: list[tuple[Mark, str]]) -> RoutingSettings:
    """The policies of *flat*'s shorthand keys, then each ``probe|health|selection|failover`` section over them."""
    probe = ProbeSettings(interval_ms=flat.probe_interval_ms, timeout_ms=flat.probe_timeout_ms,
                          discover_versions=flat.discover_versions)
    selection = replace(flat.selection, hysteresis_ms=float(flat.hysteresis_ms))
    failover = replace(flat.failover, stall_timeout_ms=flat.stall_timeout_ms)
    sections: dict[str, Any] = {"probe": probe, "health": flat.health, "selection": selection, "failover": failover}
    for name in SECTIONS:
        node = r.values.get(name)
        if node is not None and node.value is not None:
            sections[name] = read_section(node, f"{r.where}.{name}", sections[name], errors)
    probe = sections["probe"]
    failover = replace(sections["failover"], probe_interval_ms=probe.interval_ms)
    return replace(flat, probe_interval_ms=probe.interval_ms, probe_timeout_ms=probe.timeout_ms,
                   discover_versions=probe.discover_versions, stall_timeout_ms=failover.stall_timeout_ms,
                   hysteresis_ms=int(sections["selection"].hysteresis_ms), probe=probe, health=sections["health"],
                   selection=sections["selection"], failover=failover)


def _dialogue_settings(r: "_Reader | None", base: str, errors: list[tuple[Mark, str]]) -> ChatSettings:
    if r is None:
        return ChatSettings()
    r.check_keys(("url", "api_key", "model", "temperature", "max_tokens", "history_turns"))
    url = r.get("url", str, "", lambda v: None if re.match(r"^https?://[^/\s]+", v)
                else "expected an http:// or https:// URL of a chat-completions endpoint")
    key_node = r.values.get("api_key")
    api_key = secret(key_node, f"{r.where}.api_key", base, errors) if key_node is not None else ""
    temperature = None
    if (t := r.values.get("temperature")) is not None:
        if isinstance(t.value, (int, float)) and not isinstance(t.value, bool) and 0 <= t.value <= 2:
            temperature = float(t.value)
        else:
            errors.append((t.mark, f"{r.where}.temperature: expected a number from 0 to 2"))
    return ChatSettings(url=url, api_key=api_key, model=r.get("model", str, ChatSettings.model),
                        temperature=temperature,
                        max_tokens=r.get("max_tokens", int, ChatSettings.max_tokens, _positive),
                        history_turns=r.get("history_turns", int, ChatSettings.history_turns,
                                            lambda v: None if 0 <= v <= 200 else "expected 0 to 200"))


def _number(r: _Reader, key: str, default: float, check: Callable[[Any], str | None]) -> float:
    """A number of seconds (an integer or a decimal)."""
    n = r.values.get(key)
    if n is None:
        return default
    if isinstance(n.value, bool) or not isinstance(n.value, (int, float)):
        r.errors.append((n.mark, f"{r.where}.{key}: expected a number, got {_kind(n.value)}"))
        return default
    if (problem := check(n.value)):
        r.errors.append((n.mark, f"{r.where}.{key}: {problem}"))
        return default
    return float(n.value)


def _doors(r: _Reader | None) -> DoorSettings:
    """``sip.doors``: what happens to multipart bodies."""
    d = DoorSettings()
    if r is None:
        return d
    r.check_keys(("multipart", "multipart_max_bytes"))
    return DoorSettings(
        multipart=r.get("multipart", str, d.multipart,
                        lambda v: None if v in ("reject", "sdp_only") else "expected reject (415) or sdp_only"),
        multipart_max_bytes=r.get("multipart_max_bytes", int, d.multipart_max_bytes, _positive))


def _access(r: _Reader | None, errors: list[tuple[Mark, str]]) -> AccessSettings:
    """``sip.access``: trusted sources, digest users and bans."""
    d = AccessSettings()
    if r is None:
        return d
    r.check_keys(("trusted_sources", "resolve_interval_s", "untrusted", "auth", "bans", "front_sources"))
    sources: dict[str, tuple[str, ...]] = {}
    for key in ("trusted_sources", "front_sources"):
        sources[key] = r.strings(key, ())
        for text in sources[key]:
            try:
                parse_source(text)
            except ValueError as e:
                errors.append((r.values[key].mark, f"{r.where}.{key}: {e}"))
    untrusted = r.get("untrusted", str, d.untrusted,
                      lambda v: None if v in ("reject", "drop") else "expected reject (403) or drop")
    realm, users, algorithms = d.realm, d.users, d.algorithms
    nonce_ttl_s, retry_interval_s = d.nonce_ttl_s, d.retry_interval_s
    if (ra := r.sub("auth")) is not None:
        ra.check_keys(("realm", "users", "algorithms", "nonce_ttl_s", "retry_interval_s"))
        realm = ra.get("realm", str, realm, lambda v: None if v and '"' not in v else "expected a name without quotes")
        algorithms = ra.strings("algorithms", algorithms)
        for alg in algorithms:
            if alg not in ALGORITHMS:
                errors.append((ra.values["algorithms"].mark,
                               f"{ra.where}.algorithms: unknown {alg!r}; expected MD5 or SHA-256"))
        nonce_ttl_s = _number(ra, "nonce_ttl_s", nonce_ttl_s, _positive)
        retry_interval_s = _number(ra, "retry_interval_s", retry_interval_s,
                                   lambda v: None if v >= 0 else "expected 0 or more")
        un = ra.values.get("users")
        if un is not None:
            if not isinstance(un.value, list):
                errors.append((un.mark, f"{ra.where}.users: expected a list of {{user, password}} or {{user, ha1}}"))
            else:
                found = []
                for i, item in enumerate(un.value):
                    ru = _Reader(item, f"{ra.where}.users[{i}]", errors)
                    ru.check_keys(("user", "password", "ha1"))
                    user = DigestUser(ru.get("user", str, ""), ru.get("password", str, ""), ru.get("ha1", str, ""))
                    if not user.user or bool(user.password) == bool(user.ha1):
                        errors.append((item.mark, f"{ru.where}: expected 'user' and one of 'password' or 'ha1'"))
                    elif user.ha1 and not re.fullmatch(r"[0-9a-fA-F]{32}|[0-9a-fA-F]{64}", user.ha1):
                        errors.append((ru.values["ha1"].mark, f"{ru.where}.ha1: expected 32 (MD5) or 64 (SHA-256) "
                                                              "hex digits of H(user:realm:password)"))
                    found.append(user)
                users = tuple(found)
    after, window_s, ban_s = d.ban_after_failures, d.ban_window_s, d.ban_s
    if (rb := r.sub("bans")) is not None:
        rb.check_keys(("after_failures", "window_s", "ban_s"))
        after = rb.get("after_failures", int, after, _positive)
        window_s = _number(rb, "window_s", window_s, _positive)
        ban_s = _number(rb, "ban_s", ban_s, _positive)
    return AccessSettings(
        trusted_sources=sources["trusted_sources"], front_sources=sources["front_sources"],
        resolve_interval_s=_number(r, "resolve_interval_s", d.resolve_interval_s, _positive),
        untrusted=untrusted, realm=realm, users=users, algorithms=algorithms, nonce_ttl_s=nonce_ttl_s,
        retry_interval_s=retry_interval_s, ban_after_failures=after, ban_window_s=window_s, ban_s=ban_s)


def _fraction(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "expected a number from 0 to 1"


def _not_negative(v: int) -> str | None:
    return None if v >= 0 else "expected an integer of 0 or more"


_S = TypeVar("_S")


def _settings_of(r: _Reader | None, cls: type[_S], check_int: Callable[[int], str | None]) -> _S:
    """Every field of the dataclass *cls* from *r*: a fraction (the confidences), or a whole
    number of ms or words checked by *check_int* (positive where the field's metadata says so)."""
    d = cls()
    if r is None:
        return d
    r.check_keys(tuple(f.name for f in fields(cls)))
    values: dict[str, Any] = {}
    for f in fields(cls):
        default = getattr(d, f.name)
        if isinstance(default, float):
            values[f.name] = _number(r, f.name, default, _fraction)
        else:
            values[f.name] = r.get(f.name, int, default, _positive if f.metadata.get("positive") else check_int)
    return cls(**values)


def _barge_in_settings(r: _Reader | None) -> BargeInConfig:
    """``barge_in``: every field of :class:`BargeInConfig` (docs/configuration.md), checked alone
    and against each other (milliseconds at least 0)."""
    d = BargeInConfig()
    if r is None:
        return d
    config = _settings_of(r, BargeInConfig, _not_negative)
    for shorter, longer, why in (
            ("acknowledgement_max_ms", "interruption_min_ms",
             "a voice that long takes the turn before a request in it could"),
            ("wait_final_after_ms", "sentence_min_ms",
             "final words are waited for only after a voice of wait_final_after_ms")):
        if getattr(config, shorter) > getattr(config, longer):
            key = longer if longer in r.values else shorter
            r.errors.append((r.values[key].mark if key in r.values else r.node.mark,
                             f"{r.where}.{shorter} ({getattr(config, shorter)}) must not exceed "
                             f"{r.where}.{longer} ({getattr(config, longer)}): {why}"))
            return d
    return config


def load_config(path: str | None) -> ServerConfig:
    """Load *path* (None: all defaults). Raises :class:`ConfigError`."""
    if path is None:
        return ServerConfig(admin=AdminSettings(token=_env_admin_token()))
    root = load(path)
    errors: list[tuple[Mark, str]] = []
    top = _Reader(root, "config", errors)
    top.check_keys(("sip", "media", "speech", "metrics", "endpointing", "barge_in", "dialplans", "transfer_uri", "call_records",
                    "recordings_dir", "variables", "http", "dialogue", "status", "admin",
                    "recordings_retention"))
    base = os.path.dirname(os.path.abspath(path))

    sip = SipSettings()
    if (r := top.sub("sip")) is not None:
        r.check_keys(("host", "port", "public_address", "capacity", "retry_after_s", "codecs",
                      "rtp_port", "rtp_port_range", "registration", "reconcile_interval_ms", "access", "doors")
                     + TRANSPORT_KEYS)
        codecs = r.strings("codecs", sip.codecs)
        for c in codecs:
            if c not in ("PCMU", "PCMA", "G722"):
                errors.append((r.values["codecs"].mark, f"config.sip.codecs: unknown codec {c!r}; expected PCMU, PCMA or G722"))
        reg = None
        if (rr := r.sub("registration")) is not None:
            rr.check_keys(("registrar", "aor", "username", "password", "realm", "expires_s"))
            registrar = rr.get("registrar", str, "")
            aor = rr.get("aor", str, "")
            if not registrar or not aor:
                errors.append((rr.node.mark, "config.sip.registration: expected both 'registrar' and 'aor' SIP URIs"))
            password = rr.get("password", str, "")
            remember_secret(password)
            reg = RegistrationConfig(registrar_uri=registrar, aor=aor, username=rr.get("username", str, ""),
                                     password=password, realm=rr.get("realm", str, "*"),
                                     expires_s=rr.get("expires_s", int, 300, _positive))
        sip = SipSettings(
            host=r.get("host", str, sip.host), port=r.get("port", int, sip.port, _port),
            public_address=r.get("public_address", str, ""),
            capacity=r.get("capacity", int, sip.capacity, _positive),
            retry_after_s=r.get("retry_after_s", int, sip.retry_after_s, _positive),
            codecs=codecs, rtp_port=r.get("rtp_port", int, sip.rtp_port, _port),
            rtp_port_range=r.get("rtp_port_range", int, sip.rtp_port_range, _positive),
            registration=reg,
            reconcile_interval_ms=r.get("reconcile_interval_ms", int, sip.reconcile_interval_ms,
                                        lambda v: None if 100 <= v <= 300000 else "expected 100 to 300000 ms"),
            access=_access(r.sub("access"), errors), doors=_doors(r.sub("doors")), **read_transport_keys(r, base))

    media = MediaSettings()
    if (r := top.sub("media")) is not None:
        r.check_keys(("frame_ms", "jitter_buffer", "speech_start_ms", "speech_end_ms", "first_prompt_delay_ms",
                      "clock_thread_priority"))
        jb: dict[str, int] = {}
        if (rj := r.sub("jitter_buffer")) is not None:
            rj.check_keys(("init_ms", "min_pre_ms", "max_pre_ms", "max_ms"))
            for k in ("init_ms", "min_pre_ms", "max_pre_ms", "max_ms"):
                jb["jb_" + k] = rj.get(k, int, getattr(media, "jb_" + k))
        media = MediaSettings(
            frame_ms=r.get("frame_ms", int, media.frame_ms,
                           lambda v: None if v in (10, 20) else "expected 10 or 20"),
            speech_start_ms=r.get("speech_start_ms", int, media.speech_start_ms, _positive),
            speech_end_ms=r.get("speech_end_ms", int, media.speech_end_ms, _positive),
            first_prompt_delay_ms=r.get("first_prompt_delay_ms", int, media.first_prompt_delay_ms,
                                        lambda v: None if v >= 0 else "expected 0 or more"),
            clock_thread_priority=r.get("clock_thread_priority", int, media.clock_thread_priority,
                                        lambda v: None if 0 <= v <= 99 else "expected 0 (off) to 99"), **jb)

    speech = SpeechSettings()
    if (r := top.sub("speech")) is not None:
        r.check_keys(("regions", "routing", "voice", "stop_history_ms", "phrase_hints", "alternatives",
                      "embedded_general_alongside_hints", "embedded_open_speech", "punctuation"))
        regions: list[RegionSettings] = []
        rn = r.values.get("regions")
        if rn is not None:
            if not isinstance(rn.value, list):
                errors.append((rn.mark, "config.speech.regions: expected a list of regions ({name, uri} or "
                                        "{name, asr, tts, ...})"))
            else:
                for i, item in enumerate(rn.value):
                    regions.append(_region(item, f"config.speech.regions[{i}]", errors, base))
                names = [reg.name for reg in regions]
                for i, name in enumerate(names):
                    if name and names.index(name) != i:
                        errors.append((rn.value[i].mark, f"config.speech.regions[{i}]: duplicate region name {name!r}"))
                seen: dict[str, RegionSettings] = {}
                for i, reg in enumerate(regions):
                    for address in (*reg.asr_endpoints, *reg.tts_endpoints):
                        other = seen.setdefault(address, reg)
                        if other.name != reg.name and other.connection != reg.connection:
                            errors.append((rn.value[i].mark, f"config.speech.regions[{i}]: endpoint {address} is "
                                                             f"also in region {other.name!r} with other TLS or "
                                                             f"metadata settings; expected the same"))
        routing = RoutingSettings()
        if (rr := r.sub("routing")) is not None:
            rr.check_keys(("probe_interval_ms", "probe_timeout_ms", "stall_timeout_ms", "hysteresis_ms",
                           "discover_versions", *SECTIONS))
            routing = RoutingSettings(
                probe_interval_ms=rr.get("probe_interval_ms", int, routing.probe_interval_ms, _positive),
                probe_timeout_ms=rr.get("probe_timeout_ms", int, routing.probe_timeout_ms, _positive),
                stall_timeout_ms=rr.get("stall_timeout_ms", int, routing.stall_timeout_ms, _positive),
                hysteresis_ms=rr.get("hysteresis_ms", int, routing.hysteresis_ms, _positive),
                discover_versions=rr.get("discover_versions", bool, False))
            routing = _routing_sections(routing, rr, errors)
        speech = SpeechSettings(regions=tuple(regions), routing=routing, voice=r.get("voice", str, speech.voice),
                                stop_history_ms=r.get("stop_history_ms", int, speech.stop_history_ms, _positive),
                                phrase_hints=r.get("phrase_hints", bool, speech.phrase_hints),
                                punctuation=_on_off_auto(r, "punctuation", speech.punctuation),
                                alternatives=r.get("alternatives", int, speech.alternatives,
                                                   lambda v: None if 1 <= v <= 5 else "expected 1 to 5"),
                                embedded_general_alongside_hints=r.get(
                                    "embedded_general_alongside_hints", bool,
                                    speech.embedded_general_alongside_hints))
        general = speech.embedded_general_alongside_hints
        speech = replace(speech, embedded_open_speech=r.get(
            "embedded_open_speech", str, "general" if general else speech.embedded_open_speech,
            lambda v: None if v in ("whisper", "general", "hints") and not (general and v != "general")
            else ("expected whisper, general or hints" if v not in ("whisper", "general", "hints")
                  else "expected general with embedded_general_alongside_hints: true")))

    metrics = MetricsSettings()
    if (r := top.sub("metrics")) is not None:
        r.check_keys(("host", "port"))
        metrics = MetricsSettings(host=r.get("host", str, metrics.host), port=r.get("port", int, metrics.port, _port))

    endpointing = _settings_of(top.sub("endpointing"), EndpointingSettings, _positive)

    barge_in = _barge_in_settings(top.sub("barge_in"))

    dialplans = tuple(os.path.join(base, p) for p in top.strings("dialplans", ())) or (DEFAULT_DIALPLAN,)
    variables: tuple[tuple[str, str], ...] = ()
    if (r := top.sub("variables")) is not None:
        variables = tuple((k, str(v.value)) for k, v in r.values.items())
    http = _http_settings(top.sub("http"), base, errors)
    dialogue = _dialogue_settings(top.sub("dialogue"), base, errors)
    call_records = top.get("call_records", str, ServerConfig.call_records)
    recordings_dir = top.get("recordings_dir", str, ServerConfig.recordings_dir)
    status, admin, retention = _control_plane(top)
    if errors:
        raise ConfigError(errors)
    return ServerConfig(sip=sip, media=media, speech=speech, metrics=metrics, endpointing=endpointing,
                        barge_in=barge_in, dialplans=dialplans,
                        transfer_uri=top.get("transfer_uri", str, ServerConfig.transfer_uri),
                        call_records=call_records, recordings_dir=recordings_dir, variables=variables,
                        http=http, dialogue=dialogue, status=status, admin=admin, recordings_retention=retention)


def _env_admin_token() -> str:
    token = os.environ.get("OPENCLAW_ADMIN_TOKEN", "")
    remember_secret(token)     # masked wherever it might appear (agent/secrets.py)
    return token


def _control_plane(top: _Reader) -> tuple[StatusSettings, AdminSettings, RetentionSettings]:
    """The ``status``, ``admin`` and ``recordings_retention`` sections."""
    status = StatusSettings()
    if (r := top.sub("status")) is not None:
        r.check_keys(("host", "port"))
        status = StatusSettings(host=r.get("host", str, status.host), port=r.get("port", int, None, _port))
    admin = AdminSettings(token=_env_admin_token())
    if (r := top.sub("admin")) is not None:
        r.check_keys(("token", "host", "port"))
        admin = AdminSettings(token=r.get("token", str, admin.token), host=r.get("host", str, admin.host),
                              port=r.get("port", int, None, _port))
        remember_secret(admin.token)
    retention = RetentionSettings()
    if (r := top.sub("recordings_retention")) is not None:
        r.check_keys(("max_age_days", "max_total_mb", "check_interval_s"))

        def number(key: str, default: float) -> float:
            n = r.values.get(key)
            if n is None:
                return default
            if isinstance(n.value, bool) or not isinstance(n.value, (int, float)) or n.value < 0:
                r.errors.append((n.mark, f"{r.where}.{key}: expected a number, 0 or more, got {n.value!r}"))
                return default
            return float(n.value)

        retention = RetentionSettings(max_age_days=number("max_age_days", 0.0),
                                      max_total_mb=number("max_total_mb", 0.0),
                                      check_interval_s=max(1.0, number("check_interval_s", 3600.0)))
    return status, admin, retention
