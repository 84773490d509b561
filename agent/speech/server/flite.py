"""In-process text-to-speech with CMU flite through ctypes.

Uses the Debian ``libflite1`` shared libraries (``libflite.so.1`` and one
``libflite_cmu_us_<voice>.so.1`` per voice). flite keeps global state and is not
thread-safe, so every call into it holds :data:`_FLITE_LOCK`; ctypes releases the GIL
while flite runs, so other Python threads keep going.

Voices: ``kal16`` (16 kHz, the default), ``kal`` (8 kHz), ``rms``, ``awb``, ``slt``
(16 kHz). Each voice library is loaded and registered once, on first use.

The clustergen voices (``rms``, ``awb``, ``slt``) excite their unvoiced sounds with the C
library's ``rand()``, so the same text comes out a little different each time; asked to be
*repeatable*, :func:`synthesize` and :func:`synthesize_phones` first seed it from what they are
given, and the same input is the same audio on every machine and run (what the benchmarks'
corpora need).
"""
from __future__ import annotations

import ctypes
import threading
import unicodedata
import zlib

from agent.speech.voices import flite_voice

VOICES: tuple[str, ...] = ("kal16", "kal", "rms", "awb", "slt")
DEFAULT_VOICE = "kal16"

_LIB_DIR_CANDIDATES = ("", "/usr/lib/x86_64-linux-gnu/", "/usr/lib/")


class _CstWave(ctypes.Structure):
    """``cst_wave`` from flite's ``cst_wave.h``."""

    _fields_ = [
        ("type", ctypes.c_char_p),
        ("sample_rate", ctypes.c_int),
        ("num_samples", ctypes.c_int),
        ("num_channels", ctypes.c_int),
        ("samples", ctypes.POINTER(ctypes.c_short)),
    ]


_FLITE_LOCK = threading.Lock()
_flite: ctypes.CDLL | None = None
_voices: dict[str, ctypes.c_void_p] = {}
_voice_libs: dict[str, ctypes.CDLL] = {}


def _seed(*given: object) -> None:
    """Seed the C library's ``rand()`` (flite's source of noise) from *given*; call with
    :data:`_FLITE_LOCK` held."""
    ctypes.CDLL(None).srand(ctypes.c_uint(zlib.crc32(repr(given).encode())))


def _load_library(name: str) -> ctypes.CDLL:
    errors: list[str] = []
    for prefix in _LIB_DIR_CANDIDATES:
        try:
            return ctypes.CDLL(prefix + name, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            errors.append(str(exc))
    raise RuntimeError(
        f"flite library {name} not found (install the Debian packages flite and libflite1): "
        + "; ".join(errors[:1])
    )


def _core() -> ctypes.CDLL:
    """Load libflite and run ``flite_init`` once; caller holds the lock."""
    global _flite
    if _flite is None:
        lib = _load_library("libflite.so.1")
        lib.flite_init.restype = ctypes.c_int
        lib.flite_init.argtypes = []
        lib.flite_text_to_wave.restype = ctypes.POINTER(_CstWave)
        lib.flite_text_to_wave.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.delete_wave.restype = None
        lib.delete_wave.argtypes = [ctypes.POINTER(_CstWave)]
        lib.flite_synth_phones.restype = ctypes.c_void_p
        lib.flite_synth_phones.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.utt_wave.restype = ctypes.POINTER(_CstWave)
        lib.utt_wave.argtypes = [ctypes.c_void_p]
        lib.delete_utterance.restype = None
        lib.delete_utterance.argtypes = [ctypes.c_void_p]
        lib.get_param_float.restype = ctypes.c_float
        lib.get_param_float.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float]
        lib.feat_set_float.restype = None
        lib.feat_set_float.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_float]
        lib.flite_init()
        _flite = lib
    return _flite


def _voice(name: str) -> ctypes.c_void_p:
    """Register the voice on first use and return its ``cst_voice*``; caller holds the lock.
    *name* is a flite voice or a Riva voice name the embedded engine speaks (agent.speech.voices)."""
    name = flite_voice(name) or name
    if name not in VOICES:
        raise ValueError(f"unknown flite voice {name!r}; known voices: {', '.join(VOICES)}")
    voice = _voices.get(name)
    if voice is None:
        _core()
        lib = _load_library(f"libflite_cmu_us_{name}.so.1")
        register = getattr(lib, f"register_cmu_us_{name}")
        register.restype = ctypes.c_void_p
        register.argtypes = [ctypes.c_char_p]
        ptr = register(None)
        if not ptr:
            raise RuntimeError(f"flite voice {name!r} failed to register")
        voice = ctypes.c_void_p(ptr)
        _voice_libs[name] = lib
        _voices[name] = voice
    return voice


def _to_flite_text(text: str) -> bytes:
    """Fold text to the ASCII flite's English front end understands."""
    folded = unicodedata.normalize("NFKD", text)
    folded = (
        folded.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    )
    return folded.encode("ascii", errors="ignore")


def load_voice(voice: str = DEFAULT_VOICE) -> None:
    """Load and register ``voice`` now, so the first :func:`synthesize` call is not slowed by it."""
    with _FLITE_LOCK:
        _voice(voice)


def synthesize(text: str, voice: str = DEFAULT_VOICE, repeatable: bool = False) -> tuple[bytes, int]:
    """Synthesize ``text`` with flite ``voice`` (*repeatable*: the same audio every time).

    Returns ``(pcm16le_mono, sample_rate)``; the rate is the voice's native rate (16000 for
    most voices, 8000 for ``kal``). Raises ``ValueError`` for an unknown voice and
    ``RuntimeError`` when the flite libraries are missing or synthesis fails.
    """
    data = _to_flite_text(text)
    with _FLITE_LOCK:
        lib = _core()
        vox = _voice(voice)
        if repeatable:
            _seed(data, voice)
        wave_ptr = lib.flite_text_to_wave(data, vox)
        if not wave_ptr:
            raise RuntimeError(f"flite_text_to_wave failed for voice {voice!r}")
        try:
            return _copy(wave_ptr.contents)
        finally:
            lib.delete_wave(wave_ptr)


#: the phones of flite's US English voices (CMU ARPAbet, lower case, and ``pau``)
PHONES = frozenset("""aa ae ah ao aw ax axr ay b ch d dh eh er ey f g hh ih iy jh k l m n ng ow oy p r s sh
t th uh uw v w y z zh pau""".split())


def synthesize_phones(phones: str, voice: str = DEFAULT_VOICE, stretch: float = 1.0,
                      repeatable: bool = False) -> tuple[bytes, int]:
    """Synthesize a string of phones ("pau m hh m pau"), for sounds flite's lexicon has no
    word for (it reads "mm-hmm" as the letters M-M-H-M-M); *stretch* scales the phones'
    durations (flite's ``duration_stretch``); *repeatable* as for :func:`synthesize`. Returns
    what :func:`synthesize` does. A phone outside :data:`PHONES` raises ``ValueError`` (flite itself would exit the process)."""
    seq = phones.split()
    unknown = sorted(set(seq) - PHONES)
    if not seq or unknown:
        raise ValueError(f"expected flite phones ({' '.join(sorted(PHONES))}), got {phones!r}")
    if not 0.2 <= stretch <= 5.0:
        raise ValueError(f"expected a duration stretch between 0.2 and 5, got {stretch}")
    with _FLITE_LOCK:
        lib = _core()
        vox = _voice(voice)
        # cst_voice is {const char *name; cst_features *features; ...}
        features = ctypes.c_void_p.from_address(vox.value + ctypes.sizeof(ctypes.c_void_p))
        before = lib.get_param_float(features, b"duration_stretch", ctypes.c_float(1.0))
        lib.feat_set_float(features, b"duration_stretch", ctypes.c_float(stretch))
        if repeatable:
            _seed(phones, voice, stretch)
        try:
            utt = lib.flite_synth_phones(phones.encode("ascii"), vox)
        finally:
            lib.feat_set_float(features, b"duration_stretch", ctypes.c_float(before))
        if not utt:
            raise RuntimeError(f"flite could not synthesize the phones {phones!r} with voice {voice!r}")
        try:
            wave_ptr = lib.utt_wave(utt)
            if not wave_ptr:
                raise RuntimeError(f"flite made no audio of the phones {phones!r}")
            return _copy(wave_ptr.contents)
        finally:
            lib.delete_utterance(utt)


def _copy(wave: _CstWave) -> tuple[bytes, int]:
    if wave.num_channels not in (0, 1):
        raise RuntimeError(f"flite returned {wave.num_channels} channels, expected mono")
    count = max(0, wave.num_samples)
    pcm = ctypes.string_at(wave.samples, count * 2) if count and wave.samples else b""
    return pcm, int(wave.sample_rate)
