"""Prometheus metrics of the agent (names carry units; labels are bounded)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: outcomes of the calls_total counter
CALL_OUTCOMES = ("answered", "rejected_capacity", "rejected_draining", "rejected_no_route", "rejected_bad_request",
                 "failed")

#: who decided that the agent hangs up a call (reason label of openclaw_agent_hangups_total)
AGENT_HANGUP_REASONS = ("dialplan", "timeout", "shutdown", "transfer", "answer_failed", "reconciler", "other")

_LATENCY_BUCKETS = (0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
_FRAME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)


class AgentMetrics:
    """All metrics of one server process, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.active_calls = Gauge("openclaw_active_calls", "Calls in progress", registry=r)
        self.capacity = Gauge("openclaw_call_capacity", "Calls this process accepts at once", registry=r)
        self.calls = Counter("openclaw_calls_total", "Inbound calls by outcome", ["outcome"], registry=r)
        for outcome in CALL_OUTCOMES:
            self.calls.labels(outcome)
        self.call_duration = Histogram("openclaw_call_duration_seconds", "Duration of answered calls",
                                       buckets=(5, 10, 30, 60, 120, 300, 600, 1800), registry=r)
        self.turn_latency = Histogram(
            "openclaw_turn_latency_seconds",
            "Server-side estimate: caller's last voiced frame to the agent's first reply frame",
            ["trigger"], buckets=_LATENCY_BUCKETS, registry=r)
        self.endpoint_silence = Histogram(
            "openclaw_endpoint_silence_seconds", "Silence after the caller's speech before the turn was taken",
            ["reason"], buckets=(0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0), registry=r)
        self.asr_final_lag = Histogram(
            "openclaw_asr_final_lag_seconds", "End of the caller's speech to the recogniser's final result",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.dialogue_step = Histogram("openclaw_dialogue_step_seconds", "Time to run one dialogue step",
                                       buckets=_FRAME_BUCKETS, registry=r)
        self.tts_first_audio = Histogram("openclaw_tts_first_audio_seconds",
                                         "Streamed synthesis: request to first audio", buckets=_LATENCY_BUCKETS,
                                         registry=r)
        self.reply_start = Histogram("openclaw_reply_start_seconds",
                                     "Turn taken to the reply's first frame handed to the media bridge",
                                     buckets=_FRAME_BUCKETS + (0.1, 0.2, 0.5), registry=r)
        self.speculations = Counter("openclaw_speculative_replies_total",
                                    "Replies prepared before the end of the turn was certain", ["result"],
                                    registry=r)
        for result in ("used", "discarded"):
            self.speculations.labels(result)
        self.cut_ins = Counter("openclaw_cut_ins_total",
                               "Turns the caller went on talking after the agent had taken them", registry=r)
        self.barge_in_decision = Histogram(
            "openclaw_barge_in_decision_seconds", "Start of the caller's voice to the prompt pausing",
            buckets=(0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5), registry=r)
        self.barge_in_outcomes = Counter(
            "openclaw_barge_in_pauses_total",
            "Prompts paused for the caller's voice: interrupted, or resumed (an acknowledgement)",
            ["outcome"], registry=r)
        for outcome in ("interrupted", "resumed"):
            self.barge_in_outcomes.labels(outcome)
        self.prompt_pause = Histogram(
            "openclaw_prompt_pause_seconds",
            "The hole a caller's voice made in a prompt: how long it stayed paused with some of its "
            "words still to come (0 when only its closing silence was left)",
            buckets=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0), registry=r)
        self.barge_ins = Counter("openclaw_barge_ins_total", "Agent prompts interrupted by the caller", registry=r)
        self.media_frame_work = Histogram("openclaw_media_frame_work_seconds",
                                          "Work per received frame on the media clock thread",
                                          buckets=_FRAME_BUCKETS, registry=r)
        self.media_deadline_misses = Counter("openclaw_media_deadline_misses_total",
                                             "Frames whose media-thread work exceeded the frame time", registry=r)
        self.playout_underruns = Counter("openclaw_playout_underruns_total",
                                         "Frames played short because streamed speech arrived late", registry=r)
        self.asr_errors = Counter("openclaw_asr_stream_errors_total", "Recognition streams that failed", registry=r)
        self.tts_errors = Counter("openclaw_tts_errors_total", "Synthesis requests that failed", registry=r)
        self.prompt_cache = Counter("openclaw_prompt_cache_total", "Prompt cache lookups", ["result"], registry=r)
        self.prompt_cache_size = Gauge("openclaw_prompt_cache_prompts", "Prompts held in the audio cache", registry=r)
        self.transfers = Counter("openclaw_transfers_total", "Blind transfers by result", ["result"], registry=r)
        self.registration_up = Gauge("openclaw_sip_registration_up",
                                     "1 when the trunk registration is current, 0 otherwise", registry=r)
        self.registration_status = Gauge("openclaw_sip_registration_status_code",
                                         "Last SIP status code of the trunk REGISTER", registry=r)
        self.dialplan_reloads = Counter("openclaw_dialplan_reloads_total", "Dialplan reloads by result",
                                        ["result"], registry=r)
        for result in ("ok", "invalid"):
            self.dialplan_reloads.labels(result)
        self.dialplan_generation = Gauge("openclaw_dialplan_generation",
                                         "Version number of the dialplans new calls get", registry=r)
        self.draining = Gauge("openclaw_draining",
                              "1 while the process drains: new calls and keepalives get 503, calls in progress go on",
                              registry=r)
        self.calls_ended_by_server = Counter(
            "openclaw_calls_ended_by_server_total",
            "Calls the server ended itself while stopping (goodbye prompt, then BYE)", ["how"], registry=r)
        for how in ("goodbye", "forced"):
            self.calls_ended_by_server.labels(how)
        self.speech_up = Gauge("openclaw_speech_backend_up", "1 when the speech backend answers its health check",
                               registry=r)
        self.call_slot_repairs = Counter(
            "openclaw_call_slot_repairs_total",
            "Differences between the server's calls and pjsua's call table that the reconciler repaired",
            ["kind"], registry=r)
        for kind in ("lost_call", "unknown_pjsua_call", "stale_session", "active_gauge"):
            self.call_slot_repairs.labels(kind)
        self.agent_hangups = Counter(
            "openclaw_agent_hangups_total", "Calls the agent hung up itself, by who decided it", ["reason"],
            registry=r)
        for reason in AGENT_HANGUP_REASONS:
            self.agent_hangups.labels(reason)
