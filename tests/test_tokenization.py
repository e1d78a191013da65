# coding=utf-8
"""Tests of tokenization.py: the original's rules, the fast Python path, the batch path and SPM."""
import functools
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import types

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from conftest import REPO_ROOT, shared_path
import in_graph_tokenization
import tokenization

# Texts that exercise every rule: accents, CJK, Hangul, Kana, emoji, control and zero-width
# characters, combining marks, punctuation runs, long words, tabs, non-breaking spaces, [MASK],
# final sigma, dotted capital I, invalid UTF-8.
TRICKY_TEXTS = [
    "Hello, unaffable world!",
    "Héllo\u00a0WORLD\tcafé naïve Ångström",
    "中文字 and 日本語のかな カタカナ 한국어",
    "emoji 😀👍🏽 and \u200bzero\u200dwidth\ufeff",
    "ctrl\x00chars\x07here\x1b and \ufffd replacement",
    "e\u0301 combining a\u0300\u0301 marks \u0301alone",
    "punct...!!?? \"quoted\" (paren) --dash-- a.b.c $5 ^caret^ `tick`",
    "x" * 201 + " " + "y" * 200,
    "line\nbreak\r\nand\u2028separator\u2029here\u0085next",
    "text with [MASK] and [CLS] inside",
    "ΟΔΟΣ ΣΑΣ. Σ ΑΣ.Β",
    "İstanbul ǅ ß ﬁ ½ … \u2011",
    b"bytes \xe4\xb8\xad\xff\xfe broken \xed\xa0\x80 utf8",
    "",
    "   \t  ",
]


@functools.lru_cache(maxsize=None)
def google_tokenization():
  """Google's own tokenization.py (../shared/reference), loaded as a module of its own.

  It reads the vocab with TF 1's `tf.gfile.GFile`, which TensorFlow 2 lacks: the module's `tf`
  is replaced by a stand-in whose GFile opens the file as text in UTF-8, which is what GFile
  gave the original on Python 3. Nothing else in it touches TensorFlow.
  """
  path = shared_path("reference", "google-research-bert", "tokenization.py")
  spec = importlib.util.spec_from_file_location("google_bert_tokenization", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module.tf = types.SimpleNamespace(
      gfile=types.SimpleNamespace(GFile=functools.partial(open, encoding="utf-8")))
  return module


@functools.lru_cache(maxsize=None)
def google_tokenizer(vocab_file: str, do_lower_case: bool):
  """The original's FullTokenizer on a vocab file."""
  return google_tokenization().FullTokenizer(vocab_file, do_lower_case=do_lower_case)


def reference_tokenize(tokenizer, text):
  """Google's FullTokenizer.tokenize, on the vocab and casing of `tokenizer`."""
  return google_tokenizer(tokenizer.vocab_file, tokenizer.do_lower_case).tokenize(text)


@pytest.fixture(scope="module")
def uncased():
  return tokenization.FullTokenizer(
      shared_path("fixtures", "uncased_vocab", "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def cased():
  return tokenization.FullTokenizer(
      shared_path("fixtures", "uncased_vocab", "vocab.txt"), do_lower_case=False)


@pytest.fixture(scope="module")
def chinese():
  return tokenization.FullTokenizer(
      shared_path("fixtures", "google_bert_chinese", "vocab.txt"), do_lower_case=True)


def write_vocab(path, tokens):
  path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
  return str(path)


def test_known_ids_on_google_uncased_vocab(uncased):
  tokens = uncased.tokenize("Hello, unaffable world!")
  assert tokens == ["hello", ",", "una", "##ffa", "##ble", "world", "!"]
  assert uncased.convert_tokens_to_ids(tokens) == [7592, 1010, 14477, 20961, 3468, 2088, 999]
  assert uncased.convert_ids_to_tokens([0, 100, 101, 102, 103]) == [
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert uncased.special_token_id("[CLS]") == 101


def test_basic_tokenizer_lower_case_rules():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  hangul_jamo = "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165"  # NFD of 한국어
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "hello", "!", "how", "are", "you", "?"]
  assert tokenizer.tokenize("H\u00e9llo\u00a0W\u00d6RLD\t\u4e2d\u6587, \ud55c\uad6d\uc5b4!") == [
      "hello", "world", "\u4e2d", "\u6587", ",", hangul_jamo, "!"]
  # Kana are not in the CJK ranges: they stay in one word (and lose their dakuten when NFD'd).
  assert tokenizer.tokenize("\u304b\u306a\u30ac") == ["\u304b\u306a\u30ab"]
  assert tokenizer.tokenize("a\x00b\u200bc\ufffdd\x07e") == ["abcde"]
  assert tokenizer.tokenize("\u0301alone e\u0301") == ["alone", "e"]
  assert tokenizer.tokenize("[MASK] a...b") == ["[", "mask", "]", "a", ".", ".", ".", "b"]
  assert tokenizer.tokenize("$5^`~") == ["$", "5", "^", "`", "~"]
  assert tokenizer.tokenize("a\u2028b") == ["a", "b"]
  # str.lower's final sigma (the word context crosses punctuation, which is case-ignorable).
  assert tokenizer.tokenize("\u039f\u0394\u039f\u03a3 \u03a3.\u0391\u03a3.") == [
      "\u03bf\u03b4\u03bf\u03c2", "\u03c3", ".", "\u03b1\u03c2", "."]


def test_basic_tokenizer_cased():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=False)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]
  assert tokenizer.tokenize("Caf\u00e9 \ud55c") == ["Caf\u00e9", "\ud55c"]


def test_wordpiece_greedy_longest_match(tmp_path):
  vocab = tokenization.load_vocab(write_vocab(
      tmp_path / "vocab.txt",
      ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing"]))
  tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
  assert tokenizer.tokenize("") == []
  assert tokenizer.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
  assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
  assert tokenizer.tokenize("un" * 101) == ["[UNK]"]


def test_full_tokenizer_small_vocab(tmp_path):
  path = write_vocab(tmp_path / "vocab.txt",
                     ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn",
                      "##ing", ",", "low", "lowest"])
  tokenizer = tokenization.FullTokenizer(path)
  tokens = tokenizer.tokenize("UNwant\u00e9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]


def test_load_vocab_format_and_errors(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_bytes(b"[PAD]\r\n a \nb\n\n\nc\n")  # Blank lines keep their ids (the last one wins).
  vocab = tokenization.load_vocab(str(path))
  assert vocab == {"[PAD]": 0, "a": 1, "b": 2, "": 4, "c": 5}
  with pytest.raises(ValueError, match="does not exist"):
    tokenization.load_vocab(str(tmp_path / "missing.txt"))
  (tmp_path / "empty.txt").write_bytes(b"")
  with pytest.raises(ValueError, match="empty"):
    tokenization.load_vocab(str(tmp_path / "empty.txt"))
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path / "v2.txt", ["[UNK]", "a"]))
  with pytest.raises(ValueError, match=r"v2.txt has no \[CLS\]"):
    tokenizer.encode("a")
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path / "v3.txt", ["a"]))
  with pytest.raises(ValueError, match=r"v3.txt has no \[UNK\]"):
    tokenizer.tokenize_to_ids("a b")


def test_convert_to_unicode_and_printable_text():
  assert tokenization.convert_to_unicode(b"a\xffb\xc3\xa9") == "ab\u00e9"
  assert tokenization.printable_text("x") == "x"
  with pytest.raises(ValueError):
    tokenization.convert_to_unicode(5)


def test_validate_case_matches_checkpoint():
  tokenization.validate_case_matches_checkpoint(True, "")
  tokenization.validate_case_matches_checkpoint(True, "/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, "/x/cased_L-12_H-768_A-12/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, "/x/my_model/bert_model.ckpt")
  with pytest.raises(ValueError, match="`do_lower_case`=False"):
    tokenization.validate_case_matches_checkpoint(True, "/x/cased_L-12_H-768_A-12/bert_model.ckpt")
  with pytest.raises(ValueError, match="`do_lower_case`=True"):
    tokenization.validate_case_matches_checkpoint(
        False, "gs://b/chinese_L-12_H-768_A-12/bert_model.ckpt")


def test_truncate_seq_pair_and_build_inputs():
  a, b = list("abcdef"), list("xy")
  tokenization.truncate_seq_pair(a, b, 5)
  assert (a, b) == (list("abc"), list("xy"))
  a, b = list("abcd"), list("wxyz")
  tokenization.truncate_seq_pair(a, b, 5)  # ties pop from b first
  assert (a, b) == (list("abc"), list("wx"))
  assert tokenization.build_inputs([5, 6, 7], None, 6, 101, 102) == (
      [101, 5, 6, 7, 102, 0], [1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0])
  assert tokenization.build_inputs([5, 6, 7, 8], [9, 10], 7, 101, 102) == (
      [101, 5, 6, 102, 9, 10, 102], [1] * 7, [0, 0, 0, 0, 1, 1, 1])
  assert tokenization.build_inputs([5, 6, 7], None, 4, 1, 2)[0] == [1, 5, 6, 2]


def test_encode_uses_vocab_special_ids(tmp_path):
  path = write_vocab(tmp_path / "vocab.txt", ["[SEP]", "[UNK]", "hi", "[CLS]", "there"])
  tokenizer = tokenization.FullTokenizer(path)
  assert tokenizer.encode("Hi", "there you", max_seq_length=8) == (
      [3, 2, 0, 4, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0, 0])


@pytest.mark.parametrize("fixture_name", ["uncased", "cased", "chinese"])
def test_fast_path_equals_reference_on_tricky_texts(fixture_name, request):
  tokenizer = request.getfixturevalue(fixture_name)
  for text in TRICKY_TEXTS:
    assert tokenizer.tokenize(text) == reference_tokenize(tokenizer, text), repr(text)
    assert tokenizer.tokenize(text) == tokenizer.tokenize(text)  # served from the cache


def test_chinese_vocab_splits_ideographs(chinese):
  tokens = chinese.tokenize("我爱北京天安门, BERT!")
  assert tokens[:6] == ["我", "爱", "北", "京", "天", "安"]
  assert chinese.convert_tokens_to_ids(["[CLS]", "[SEP]"]) == [101, 102]


def real_texts():
  """Real text of several kinds: WikiText lines, SST-2 and CoLA sentences, SQuAD contexts and
  questions, CoNLL-2003 sentences."""
  texts = []
  with open(shared_path("corpora", "wikitext2_valid.bert.txt"), encoding="utf-8") as f:
    texts += f.read().splitlines()[::5]
  for task, column in (("SST-2", 0), ("CoLA", 3)):
    with open(shared_path("glue", task, "train.tsv"), encoding="utf-8") as f:
      texts += [line.rstrip("\n").split("\t")[column] for line in f][1:2000]
  with open(shared_path("squad", "squad_v1.1_dev_part_a.json"), encoding="utf-8") as f:
    for article in json.load(f)["data"][:10]:
      for paragraph in article["paragraphs"]:
        texts += [paragraph["context"]] + [qa["question"] for qa in paragraph["qas"]]
  with open(shared_path("conll2003", "train.txt"), encoding="utf-8") as f:
    sentences = f.read().split("\n\n")[:2000]
  texts += [" ".join(line.split(" ")[0] for line in sentence.splitlines()) for sentence in sentences]
  return texts


@pytest.mark.parametrize("fixture_name", ["uncased", "cased"])
def test_tokens_and_ids_equal_googles_tokenizer_on_real_text(fixture_name, request):
  """The original's tokenization.py (not ours) is the reference: tokens and ids, on real text."""
  tokenizer = request.getfixturevalue(fixture_name)
  original = google_tokenizer(tokenizer.vocab_file, tokenizer.do_lower_case)
  texts = real_texts()
  assert len(texts) > 5000
  for text in texts:
    tokens = tokenizer.tokenize(text)
    assert tokens == original.tokenize(text), text
    assert tokenizer.convert_tokens_to_ids(tokens) == original.convert_tokens_to_ids(tokens)


_TEXT = st.text(st.one_of(st.characters(exclude_categories=["Cs"]),
                          st.sampled_from(list("aZ \t.,'\u00a0\u00e9\u0301\u03a3\u4e2d\ud55cI"))),
                max_size=30)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=st.one_of(_TEXT, st.binary(max_size=30)))
def test_property_fast_path_equals_reference(uncased, cased, text):
  for tokenizer in (uncased, cased):
    tokens = tokenizer.tokenize(text)
    assert tokens == reference_tokenize(tokenizer, text)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    assert all(0 <= i < len(tokenizer.vocab) for i in ids)


def test_pickles_for_worker_processes(uncased, spm_model):
  for tokenizer in (uncased, tokenization.FullTokenizer(None, spm_model_file=spm_model)):
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert copy.tokenize("Hello, unaffable world!") == tokenizer.tokenize("Hello, unaffable world!")


def test_no_tensorflow_import():
  code = ("import sys, tokenization; tokenization.FullTokenizer(sys.argv[1]).tokenize('a b'); "
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
  vocab_file = shared_path("fixtures", "uncased_vocab", "vocab.txt")
  subprocess.run([sys.executable, "-c", code, vocab_file], cwd=REPO_ROOT, check=True)


def assert_batch_equals_python(tokenizer, texts, batch_tokenizer=None):
  """The batch path's ids (a new BatchTokenizer unless one of tokenizer's is given) equal
  tokenize_to_ids per text, and its padding is zeros."""
  batch_tokenizer = batch_tokenizer or in_graph_tokenization.BatchTokenizer(tokenizer)
  ids, lengths = batch_tokenizer.tokenize(texts)
  assert ids.dtype == np.int32 and ids.shape[0] == len(texts)
  for row, text in enumerate(texts):
    assert ids[row, :lengths[row]].tolist() == tokenizer.tokenize_to_ids(text), repr(text)
    assert not ids[row, lengths[row]:].any()


def test_batch_path_equals_python_on_wikitext(uncased, cased):
  with open(shared_path("corpora", "wikitext2_valid.bert.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert_batch_equals_python(uncased, lines)
  assert_batch_equals_python(cased, lines[::4])


def test_batch_path_tricky_texts_and_routing(uncased, chinese):
  # U+1D16D (combining class 226) before U+1D165 (216): NFD reorders them. A lone surrogate
  # cannot be encoded as UTF-8: that text goes through Python.
  texts = TRICKY_TEXTS + ["lone \ud800 surrogate", "x\U0001d16d\U0001d165y \u1b44"]
  assert_batch_equals_python(uncased, texts)
  assert_batch_equals_python(chinese, texts)


@pytest.fixture(scope="module")
def uncased_batch(uncased):
  """One BatchTokenizer for every generated example (building one loads the vocab and traces)."""
  return in_graph_tokenization.BatchTokenizer(uncased)


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(texts=st.lists(_TEXT, min_size=1, max_size=8))
def test_property_batch_equals_python(uncased, uncased_batch, texts):
  assert_batch_equals_python(uncased, texts, uncased_batch)


def test_batch_paths_on_empty_inputs(uncased):
  batch = in_graph_tokenization.BatchTokenizer(uncased)
  ids, lengths = batch.tokenize([])
  assert ids.shape == (0, 0) and lengths.shape == (0,)
  assert [f.shape for f in batch.encode([], max_seq_length=8)] == [(0, 8)] * 3
  ids, lengths = batch.tokenize(["", " \t"])
  assert ids.shape == (2, 0) and lengths.tolist() == [0, 0]


def test_batch_encode_equals_encode(uncased):
  texts_a = TRICKY_TEXTS
  texts_b = TRICKY_TEXTS[::-1]
  batch = in_graph_tokenization.BatchTokenizer(uncased)
  for max_seq_length in (5, 24):
    single = batch.encode(texts_a, max_seq_length=max_seq_length)
    pairs = batch.encode(texts_a, texts_b, max_seq_length=max_seq_length)
    for row, (a, b) in enumerate(zip(texts_a, texts_b)):
      assert [f[row].tolist() for f in single] == list(uncased.encode(a, None, max_seq_length))
      assert [f[row].tolist() for f in pairs] == list(uncased.encode(a, b, max_seq_length))


def train_sentencepiece(directory, vocab_size=100):
  """Trains a tiny SentencePiece model on generated multilingual text; returns its path."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(0)
  syllables = ["ka", "to", "ri", "men", "sun", "한", "국", "어", "데", "이", "터", "é",
               "ль"]
  lines = [" ".join("".join(rng.choice(syllables, rng.randint(1, 4))) for _ in range(8))
           for _ in range(400)]
  corpus = os.path.join(directory, "corpus.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    f.write("\n".join(lines))
  prefix = os.path.join(directory, "spm")
  spm.SentencePieceTrainer.train(
      input=corpus, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
      character_coverage=1.0, hard_vocab_limit=False, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
  return prefix + ".model"


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
  return train_sentencepiece(str(tmp_path_factory.mktemp("spm")))


def test_sentencepiece_pieces_ids_and_lower_case(spm_model):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  processor = spm.SentencePieceProcessor(model_file=spm_model)
  lower = tokenization.FullTokenizer(None, do_lower_case=True, spm_model_file=spm_model)
  cased = tokenization.FullTokenizer(None, do_lower_case=False, spm_model_file=spm_model)
  text = "KAto 한국어 men"
  assert lower.tokenize(text) == processor.encode("kato 한국어 men", out_type=str)
  assert cased.tokenize(text) == processor.encode(text, out_type=str)
  tokens = lower.tokenize(text)
  ids = lower.convert_tokens_to_ids(tokens)
  assert ids == processor.encode("kato 한국어 men")
  assert lower.convert_ids_to_tokens(ids) == tokens
  assert len(lower.vocab) == processor.get_piece_size()
  input_ids, _, segment_ids = lower.encode("kato", "sun", max_seq_length=10)
  assert input_ids[0] == processor.piece_to_id("[CLS]") == lower.special_token_id("[CLS]")
  assert input_ids.count(processor.piece_to_id("[SEP]")) == 2 and segment_ids[-1] == 0
  texts = [text, "RI\u00e9 데이터", b"men \xff sun", ""]
  ids, lengths = in_graph_tokenization.BatchTokenizer(lower).tokenize(texts)
  for row, text in enumerate(texts):
    assert ids[row, :lengths[row]].tolist() == lower.tokenize_to_ids(text)
  with pytest.raises(ValueError, match="does not exist"):
    tokenization.FullTokenizer(None, spm_model_file=spm_model + ".missing")


def test_a_casing_that_contradicts_the_vocab_is_named(uncased_vocab_file):
  uncased = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s", "paris", "1"]
  cased = uncased + ["Word%d" % i for i in range(101)]
  assert tokenization.casing_mismatch(uncased, do_lower_case=True) is None
  assert "is uncased (0 of its 3 pieces" in tokenization.casing_mismatch(uncased, False)
  # Google's uncased vocab holds `ℝ` and `##ℝ` (before, those two made it "cased": no warning).
  google_uncased = list(tokenization.load_vocab(uncased_vocab_file))
  assert "is uncased (2 of its " in tokenization.casing_mismatch(google_uncased, False)
  assert tokenization.casing_mismatch(google_uncased, do_lower_case=True) is None
  assert tokenization.casing_mismatch(cased, do_lower_case=False) is None
  assert "the vocab is cased (101 pieces" in tokenization.casing_mismatch(cased, True)
  # Without letters (digits, CJK characters) there is no casing to contradict.
  assert tokenization.casing_mismatch(["[CLS]", "1", "中", "##国"], do_lower_case=False) is None
  assert tokenization.casing_mismatch(cased[:20], do_lower_case=True) is None  # A few names.
