# coding=utf-8
"""Tests of in_graph_tokenization.py: FullTokenizer's ids in TF ops, inside SavedModels."""
import os
import shutil
import unicodedata

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
import tensorflow as tf

from conftest import shared_path
import in_graph_tokenization
import tokenization
from test_tokenization import TRICKY_TEXTS, train_sentencepiece

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def uncased_vocab():
  return shared_path("fixtures", "uncased_vocab", "vocab.txt")


@pytest.fixture(scope="module")
def uncased(uncased_vocab):
  return (tokenization.FullTokenizer(uncased_vocab, True),
          in_graph_tokenization.BertInputEncoder(uncased_vocab, True, max_seq_length=48))


@pytest.fixture(scope="module")
def uncased_tokenize(uncased):
  return tf.function(uncased[1].tokenize, input_signature=[tf.TensorSpec([None], tf.string)])


def as_lists(ragged):
  return ragged.to_list()


def test_character_tables_match_tokenization_predicates():
  classes = in_graph_tokenization.character_classes()
  keys, row_splits, values = in_graph_tokenization.character_mapping("lower_strip_accents")
  mapping = {int(key): "".join(chr(v) for v in values[row_splits[i]:row_splits[i + 1]])
             for i, key in enumerate(keys)}
  code_points = list(range(0x800)) + list(range(0x800, 0x110000, 53))
  for cp in code_points:
    if 0xD800 <= cp <= 0xDFFF:
      continue
    char = chr(cp)
    bits = int(classes[cp])
    assert bool(bits & 1) == (cp in (0, 0xFFFD) or tokenization.is_control(char)), hex(cp)
    assert bool(bits & 2) == (tokenization.is_whitespace(char) or char.isspace()), hex(cp)
    assert bool(bits & 4) == tokenization.is_chinese_char(cp), hex(cp)
    assert bool(bits & 8) == tokenization.is_punctuation(char), hex(cp)
    assert mapping.get(cp, char) == tokenization.strip_accents(char.lower()), hex(cp)
  # Spot checks of the case properties that str.lower's final sigma rule uses.
  assert classes[ord("A")] & 16 and classes[ord("\u03c3")] & 16 and not classes[ord("1")] & 48
  assert classes[ord(".")] & 32 and classes[ord("'")] & 32 and classes[0x301] & 32


def test_unassigned_and_private_use_characters_have_nothing_the_tables_record():
  """The tables are built from assigned characters only: every other one must map to itself
  under lower-casing and NFD, with no combining class, not be whitespace, and neither be cased
  nor case-ignorable (str.lower's final sigma rule does not see it), in this Python's Unicode."""
  others = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and
                   unicodedata.category(chr(cp)) in ("Cn", "Co"))
  assert len(others) > 900000
  assert others.lower() == others and unicodedata.normalize("NFD", others) == others
  assert not any(char.isspace() or unicodedata.combining(char) for char in others)
  # A capital sigma after a cased letter (and case-ignorables) would lower to a final sigma.
  probes = "".join("A" + char + "\u03a3 " for char in others).lower().split()
  assert not any(probe.endswith("\u03c2") for probe in probes)


def test_truncated_lengths_match_truncate_seq_pair():
  grid = np.array([(a, b, m) for a in range(13) for b in range(13) for m in range(16)])
  new_a, new_b = in_graph_tokenization.truncated_lengths(grid[:, 0], grid[:, 1], grid[:, 2])
  for (length_a, length_b, budget), got_a, got_b in zip(grid, new_a.numpy(), new_b.numpy()):
    tokens_a, tokens_b = list(range(length_a)), list(range(length_b))
    tokenization.truncate_seq_pair(tokens_a, tokens_b, budget)
    assert (got_a, got_b) == (len(tokens_a), len(tokens_b)), (length_a, length_b, budget)


def test_encoder_equals_python_encode_on_wikitext(uncased):
  tokenizer, encoder = uncased
  with open(shared_path("corpora", "wikitext2_valid.bert.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  texts_a, texts_b = lines[0:4000:2], lines[1:4000:2]
  pairs = encoder(tf.constant(texts_a), tf.constant(texts_b))
  singles = encoder(tf.constant(texts_a))
  for features in (pairs, singles):
    assert sorted(features) == ["input_ids", "input_mask", "segment_ids"]
    for value in features.values():
      assert value.dtype == tf.int32 and value.shape == (len(texts_a), 48)
  names = ("input_ids", "input_mask", "segment_ids")
  pairs = [pairs[name].numpy().tolist() for name in names]
  singles = [singles[name].numpy().tolist() for name in names]
  for row, (a, b) in enumerate(zip(texts_a, texts_b)):
    assert [f[row] for f in pairs] == list(tokenizer.encode(a, b, max_seq_length=48)), (a, b)
    assert [f[row] for f in singles] == list(tokenizer.encode(a, max_seq_length=48)), a


@pytest.mark.parametrize("vocab_parts,do_lower_case", [
    (("uncased_vocab", "vocab.txt"), True), (("uncased_vocab", "vocab.txt"), False),
    (("google_bert_chinese", "vocab.txt"), True)])
def test_tricky_texts(vocab_parts, do_lower_case):
  vocab_file = shared_path("fixtures", *vocab_parts)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  encoder = in_graph_tokenization.BertInputEncoder(vocab_file, do_lower_case)
  data = [text.encode("utf-8") if isinstance(text, str) else text for text in TRICKY_TEXTS]
  got = as_lists(encoder.tokenize(tf.constant(data)))
  for text, ids in zip(TRICKY_TEXTS, got):
    assert ids == tokenizer.tokenize_to_ids(text), repr(text)


# Also spacing marks with combining classes 216 and 226 and nonspacing ones of 230 and 220, whose
# canonical reordering matters.
_TEXT = st.text(st.one_of(st.characters(exclude_categories=["Cs"]),
                          st.sampled_from(list("aZ \t.,'\u00a0\u00e9\u0301\u03a3\u4e2d\ud55cI"
                                               "\U0001d165\U0001d16d\u0316\u1b44"))),
                max_size=30)


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(texts=st.lists(st.one_of(_TEXT, st.binary(max_size=20)), min_size=1, max_size=6))
def test_property_in_graph_equals_python(uncased, uncased_tokenize, texts):
  tokenizer, _ = uncased
  data = [text.encode("utf-8") if isinstance(text, str) else text for text in texts]
  for text, ids in zip(texts, as_lists(uncased_tokenize(tf.constant(data)))):
    assert ids == tokenizer.tokenize_to_ids(text)
    assert all(0 <= i < len(tokenizer.vocab) for i in ids)


def test_canonical_reordering_of_spacing_marks(uncased):
  tokenizer, encoder = uncased
  texts = ["a\U0001d16d\U0001d165b", "x\U0001d16d\u0301\U0001d166 \U0001d16d\u0345\U0001d165",
           "plain text", "\u1b44\u302f\u0f71\u1b44 ΟΔΟΣ"]
  got = encoder.tokenize(tf.constant([text.encode("utf-8") for text in texts])).to_list()
  assert got == [tokenizer.tokenize_to_ids(text) for text in texts]
  # NFD moves U+1D165 (class 216) before U+1D16D (226), so the pieces differ from the input order.
  assert tokenizer.basic_tokenizer.tokenize(texts[0]) == ["a\U0001d165\U0001d16db"]


def test_tokenize_words_per_word(uncased):
  tokenizer, encoder = uncased
  words = [["Unaffable", "don't", "", "中文"], [], ["x" * 250, "naïve,"]]
  got = encoder.tokenize_words(tf.ragged.constant(words, dtype=tf.string))
  assert got.shape.rank == 3 and got.dtype == tf.int32
  assert got.to_list() == [[tokenizer.tokenize_to_ids(word) for word in row] for row in words]


def test_tokenize_leading_words_reads_only_what_the_first_pieces_need(uncased):
  """With 4 pieces wanted, rows keep their first 4 words (each gives a piece or more). Words
  without pieces (zero-width spaces, lone accents) can leave a row short: then every word of the
  batch is tokenized, as tokenize_words does."""
  tokenizer, encoder = uncased
  words = [["one", "two", "three", "four", "five", "six"], ["Unaffable", "words", "here"], [],
           ["\u200b", "\u0301", "\u200b\u200b", "a", "b", "c", "d", "e"]]
  full = [[tokenizer.tokenize_to_ids(word) for word in row] for row in words]
  tokenize = tf.function(lambda ragged: encoder.tokenize_leading_words(ragged, 4),
                         autograph=False)
  assert full[3][:3] == [[], [], []]
  assert tokenize(tf.ragged.constant(words[:3])).to_list() == [full[0][:4], full[1], []]
  assert tokenize(tf.ragged.constant(words)).to_list() == full


def test_special_ids_and_pack(uncased):
  _, encoder = uncased
  assert (encoder.cls_id, encoder.sep_id, encoder.unk_id, encoder.pad_id, encoder.mask_id) == (
      101, 102, 100, 0, 103)
  features = encoder.pack(tf.ragged.constant([[7, 8, 9], []]), tf.ragged.constant([[5], [6, 6]]))
  assert features["input_ids"][:, :8].numpy().tolist() == [
      [101, 7, 8, 9, 102, 5, 102, 0], [101, 102, 6, 6, 102, 0, 0, 0]]
  assert features["segment_ids"][:, :8].numpy().tolist() == [
      [0, 0, 0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 1, 0, 0, 0]]


def test_keep_mask_token_reads_mask_whole_and_between_masks_as_full_tokenizer(uncased_vocab,
                                                                              uncased):
  """Hugging Face's reading of "[MASK]" (one token, exactly so written), FullTokenizer's ids of the
  text between masks; the same in `tokenize` and in `__call__`'s leading ids."""
  tokenizer, _ = uncased
  encoder = in_graph_tokenization.BertInputEncoder(uncased_vocab, True, max_seq_length=8,
                                                   keep_mask_token=True)
  texts = ["[MASK]", "", "Héllo[MASK]wörld [MASK][MASK]!", "[mask] [MASK  [MASK]",
           "one two three four five six [MASK]"]

  def ids(text):
    parts = [tokenizer.tokenize_to_ids(part) for part in text.split("[MASK]")]
    return [i for part in parts[:-1] for i in part + [encoder.mask_id]] + parts[-1]

  assert ids(texts[2]).count(103) == 3
  assert encoder.tokenize(texts).to_list() == [ids(text) for text in texts]
  assert encoder(tf.constant(texts))["input_ids"].numpy().tolist() == [
      ([101] + ids(text)[:6] + [102] + [0] * 8)[:8] for text in texts]


def test_padded_length_buckets():
  assert in_graph_tokenization.padded_length_buckets(128) == [4, 8, 12, 16, 20, 24, 28, 32, 40,
                                                              48, 56, 64, 96, 128]
  assert in_graph_tokenization.padded_length_buckets(48) == [4, 8, 12, 16, 20, 24, 28, 32, 40, 48]


def test_dynamic_padding_pads_to_the_bucket_of_the_longest_row(uncased_vocab, uncased):
  """The same ids as FullTokenizer.encode at max_seq_length, cut to the bucket of the batch."""
  tokenizer, _ = uncased
  encoder = in_graph_tokenization.BertInputEncoder(uncased_vocab, True, max_seq_length=48,
                                                   dynamic_padding=True)
  # [CLS] hi there . [SEP]: 5 tokens; 15 words + 2: 17; 15 + 24 + 3: 42.
  for texts_a, texts_b, length in [(["Hi there."], None, 8), ([""], None, 4),
                                   (["one two three " * 5, "x"], None, 20),
                                   (["one two three " * 5], ["four five six " * 8], 48),
                                   (["word " * 100], None, 48)]:
    features = encoder(tf.constant(texts_a), None if texts_b is None else tf.constant(texts_b))
    for name, value in features.items():
      assert value.shape == (len(texts_a), length), (texts_a, name)
    for row, text_a in enumerate(texts_a):
      expected = tokenizer.encode(text_a, None if texts_b is None else texts_b[row], 48)
      for name, values in zip(("input_ids", "input_mask", "segment_ids"), expected):
        assert features[name][row].numpy().tolist() == values[:length]
        assert not any(values[length:])


def test_learned_vocab_special_ids(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[SEP]", "[CLS]", "[UNK]", "", "##b", "a"]) + "\n")
  encoder = in_graph_tokenization.BertInputEncoder(str(vocab), max_seq_length=6)
  features = encoder(tf.constant(["ab a", "c"]))
  # Line 4 is blank: no word maps to id 3.
  assert features["input_ids"].numpy().tolist() == [[1, 5, 4, 5, 0, 0], [1, 2, 0, 0, 0, 0]]
  vocab.write_text("[CLS]\n[UNK]\na\n")
  with pytest.raises(ValueError, match=r"no \[SEP\]"):
    in_graph_tokenization.BertInputEncoder(str(vocab))


class _Serving(tf.Module):
  """What an export helper does: keep the encoder as an attribute, serve a signature."""

  def __init__(self, encoder):
    super().__init__()
    self.encoder = encoder

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
  def serve(self, text_a, text_b):
    return self.encoder(text_a, text_b)


def test_saved_model_with_vocab_asset(uncased, uncased_vocab, tmp_path):
  tokenizer, _ = uncased
  vocab_copy = tmp_path / "source" / "vocab.txt"
  vocab_copy.parent.mkdir()
  shutil.copy(uncased_vocab, vocab_copy)
  module = _Serving(in_graph_tokenization.BertInputEncoder(str(vocab_copy), max_seq_length=16))
  export_dir = str(tmp_path / "saved")
  tf.saved_model.save(module, export_dir, signatures={"serving_default": module.serve})
  shutil.rmtree(vocab_copy.parent)
  assert os.path.exists(os.path.join(export_dir, "assets", "vocab.txt"))
  loaded = tf.saved_model.load(export_dir)
  assert loaded.encoder.do_lower_case.numpy()
  assert loaded.encoder.vocab_file.asset_path.numpy().decode().endswith("vocab.txt")
  texts_a, texts_b = ["Hello, unaffable world!", "ΟΔΟΣ"], ["naïve café", ""]
  outputs = loaded.signatures["serving_default"](text_a=tf.constant(texts_a),
                                                 text_b=tf.constant(texts_b))
  for row, (a, b) in enumerate(zip(texts_a, texts_b)):
    expected = tokenizer.encode(a, b, max_seq_length=16)
    assert [outputs[k][row].numpy().tolist() for k in ("input_ids", "input_mask", "segment_ids")
           ] == list(expected)


def test_sentencepiece_in_graph(tmp_path):
  model_file = train_sentencepiece(str(tmp_path))
  texts = ["KAto 한국어 men", "RI\u00e9 데이터 ΟΔΟΣ", "  sun\tmen  ", ""]
  for do_lower_case in (True, False):
    tokenizer = tokenization.FullTokenizer(None, do_lower_case, spm_model_file=model_file)
    encoder = in_graph_tokenization.BertInputEncoder(
        None, do_lower_case, spm_model_file=model_file, max_seq_length=12)
    got = encoder.tokenize(tf.constant(texts)).to_list()
    assert got == [tokenizer.tokenize_to_ids(text) for text in texts]
    features = encoder(tf.constant(texts), tf.constant(texts[::-1]))
    for row, (a, b) in enumerate(zip(texts, texts[::-1])):
      assert features["input_ids"][row].numpy().tolist() == tokenizer.encode(a, b, 12)[0]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_split_words_equals_basic_tokenizer(do_lower_case):
  tables = in_graph_tokenization.CharacterTables(
      "lower_strip_accents" if do_lower_case else None)
  basic = tokenization.BasicTokenizer(do_lower_case)
  data = [text.encode("utf-8") if isinstance(text, str) else text for text in TRICKY_TEXTS]
  words = in_graph_tokenization.split_words(tf.constant(data), tables).to_list()
  assert [[word.decode("utf-8") for word in row] for row in words] == [
      basic.tokenize(text) for text in TRICKY_TEXTS]
