# coding=utf-8
"""Tests of create_vocab.py: reserved tokens first, size bound, round trip, CLI."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT
import create_vocab
import tokenization


def write_corpus(path, num_lines=1500, seed=0):
  """Generated text: Zipf-distributed syllable words, capitals, accents, punctuation, CJK, a rare
  character (ʘ) and one word longer than the tokenizer's 200-character limit."""
  rng = np.random.RandomState(seed)
  syllables = ["ka", "lo", "min", "tre", "su", "pa", "ré", "do", "ön", "vi", "an", "te"]
  lexicon = ["".join(rng.choice(syllables, rng.randint(1, 5))) for _ in range(400)]
  weights = 1.0 / np.arange(1, len(lexicon) + 1)
  weights /= weights.sum()
  lines = []
  for _ in range(num_lines):
    words = list(rng.choice(lexicon, rng.randint(3, 12), p=weights))
    words[0] = words[0].capitalize()
    lines.append(" ".join(words) + rng.choice([".", "!", ", 中文.", "?"]))
  lines += ["the ʘdd one", "x" * 250]
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return lines


def run(tmp_path, vocab_size, do_lower_case=True, reserved=(), **kwargs):
  corpus = tmp_path / "corpus.txt"
  lines = write_corpus(corpus)
  output = str(tmp_path / "out" / "vocab.txt")
  tokens = create_vocab.create_vocab(str(corpus), output, vocab_size, do_lower_case,
                                     reserved_tokens=reserved, **kwargs)
  return lines, output, tokens


def test_vocab_layout_and_round_trip(tmp_path):
  lines, output, tokens = run(tmp_path, vocab_size=300, reserved=["[unused0]", "[MASK]"],
                              max_unique_chars=20)
  with open(output, encoding="utf-8") as f:
    assert f.read().splitlines() == tokens
  assert tokens[:6] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"]
  assert len(tokens) == len(set(tokens)) and len(tokens) <= 300
  tokenizer = tokenization.FullTokenizer(output, do_lower_case=True)
  vocab = set(tokens)
  unknown_words = set()
  for line in lines:
    for word in tokenizer.basic_tokenizer.tokenize(line):
      pieces = tokenizer.tokenize(word)
      coverable = len(word) <= 200 and all(c in vocab and "##" + c in vocab for c in word)
      if coverable:
        assert "[UNK]" not in pieces, word
      else:
        unknown_words.add(word)
  # The rare characters are left out of a 20-character alphabet; "x" * 250 is over 200 chars.
  assert len([token for token in tokens if len(token) == 1]) == 20
  assert "x" * 250 in unknown_words and "ʘdd" in unknown_words and len(unknown_words) < 6
  assert "ʘ" not in vocab and "é" not in vocab  # lower-cased and accent-stripped
  assert tokenizer.tokenize("Kalo") != ["[UNK]"]


def test_bigger_vocab_learns_whole_words_and_keeps_case(tmp_path):
  _, output, tokens = run(tmp_path, vocab_size=2000, do_lower_case=False)
  assert len(tokens) <= 2000
  assert any(token[0].isupper() and len(token) > 3 for token in tokens)
  assert "é" in tokens and "中" in tokens
  tokenizer = tokenization.FullTokenizer(output, do_lower_case=False)
  frequent_word = tokenizer.basic_tokenizer.tokenize(
      (tmp_path / "corpus.txt").read_text(encoding="utf-8").split("\n")[0])[1]
  assert tokenizer.tokenize(frequent_word) == [frequent_word]


def test_search_threshold_picks_largest_vocab_within_size():
  sizes = {threshold: 10000 // threshold for threshold in range(1, 1001)}
  calls = []

  def learn_at(threshold):
    calls.append(threshold)
    return ["t"] * sizes[threshold]

  vocab = create_vocab._search_threshold(learn_at, 1, 1000, vocab_size=300, slack_ratio=0.05)
  assert 285 <= len(vocab) <= 300
  assert len(calls) < 10
  # A corpus too small to fill the vocab: one run at the lowest threshold.
  calls.clear()
  assert len(create_vocab._search_threshold(learn_at, 1, 1000, 20000, 0.05)) == 10000
  assert calls == [1]


def test_errors(tmp_path):
  with pytest.raises(ValueError, match=r"--input_file: '.*nothing\.txt' matches no files"):
    create_vocab.create_vocab(str(tmp_path / "nothing.txt"), str(tmp_path / "v.txt"), 100, True)
  (tmp_path / "c.txt").write_text("a b c\n")
  with pytest.raises(ValueError, match="smaller than the 5 reserved"):
    create_vocab.create_vocab(str(tmp_path / "c.txt"), str(tmp_path / "v.txt"), 3, True)
  (tmp_path / "empty.txt").write_text("\n\n")
  with pytest.raises(ValueError, match="No words"):
    create_vocab.create_vocab(str(tmp_path / "empty.txt"), str(tmp_path / "v.txt"), 100, True)


def test_cli(tmp_path):
  write_corpus(tmp_path / "a.txt", num_lines=200, seed=1)
  write_corpus(tmp_path / "b.txt", num_lines=200, seed=2)
  output = tmp_path / "model" / "vocab.txt"  # Not among the *.txt it reads.
  result = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "create_vocab.py"),
       "--input_file=%s,%s" % (tmp_path / "a.txt", tmp_path / "*.txt"),
       "--output_file=%s" % output, "--vocab_size=150", "--nodo_lower_case",
       "--reserved_tokens=[unused0],[unused1]"],
      capture_output=True, text=True, check=True)
  assert "tokenize to [UNK]" in result.stderr
  tokens = output.read_text(encoding="utf-8").splitlines()
  assert tokens[:7] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
  assert len(tokens) <= 150


def test_import_defines_no_flags():
  # Scripts that share flag names (run_classifier, create_pretraining_data) can be imported with it.
  from absl import flags  # pylint: disable=g-import-not-at-top
  assert "max_unique_chars" not in flags.FLAGS and "slack_ratio" not in flags.FLAGS


def test_a_vocab_short_of_vocab_size_is_warned_about_with_the_size_to_use(tmp_path, caplog):
  """A corpus with fewer pieces than --vocab_size asks for gives a smaller vocab; its config must
  say so, as the warning does."""
  corpus = tmp_path / "tiny.txt"
  corpus.write_text("the cat sat on the mat\n", encoding="utf-8")
  caplog.set_level("WARNING", logger="absl")
  tokens = create_vocab.create_vocab(str(corpus), str(tmp_path / "vocab.txt"), 500, True)
  assert len(tokens) < 475
  assert ('has %d tokens, fewer than --vocab_size=500' % len(tokens)) in caplog.text
  assert '"vocab_size": %d' % len(tokens) in caplog.text


def test_a_vocab_size_below_the_corpus_characters_is_refused_writing_nothing(tmp_path):
  """"the cat sat on the mat" needs at least its 9 letters, their ## forms and the 5 reserved
  tokens; a smaller --vocab_size gets an error naming the least size that works, and no vocab."""
  corpus = tmp_path / "tiny.txt"
  corpus.write_text("the cat sat on the mat\n", encoding="utf-8")
  output = tmp_path / "vocab.txt"
  with pytest.raises(ValueError, match=r"--vocab_size=12 is below the \d+ tokens") as refused:
    create_vocab.create_vocab(str(corpus), str(output), 12, True)
  assert not output.exists()
  least = int(re.search(r"raise --vocab_size to (\d+) or more", str(refused.value)).group(1))
  assert least >= 5 + 2 * 9
  assert len(create_vocab.create_vocab(str(corpus), str(output), least, True)) <= least


def test_a_reserved_token_with_whitespace_is_refused(tmp_path):
  (tmp_path / "c.txt").write_text("a b c\n")
  with pytest.raises(ValueError, match="--reserved_tokens: 'a b' is empty or holds whitespace"):
    create_vocab.create_vocab(str(tmp_path / "c.txt"), str(tmp_path / "v.txt"), 100, True,
                              reserved_tokens=["[X]", "a b"])


def test_a_reserved_token_given_twice_is_refused_before_counting(tmp_path):
  (tmp_path / "c.txt").write_text("a b c\n")
  with pytest.raises(ValueError, match=r"--reserved_tokens: \[X\] given more than once"):
    create_vocab.create_vocab(str(tmp_path / "c.txt"), str(tmp_path / "v.txt"), 100, True,
                              reserved_tokens=["[X]", "[Y]", "[X]"])
