# coding=utf-8
"""Learns a WordPiece vocab.txt from plain text with tensorflow-text's vocab learner.

Words are counted with exactly the basic tokenization of `tokenization.FullTokenizer` (so the
vocab matches how it will be used), then tensorflow-text's WordPiece learner
(`wordpiece_tokenizer_learner_lib`, the algorithm behind `bert_vocab_from_dataset`) builds the
vocab at a count threshold. The learner's own binary search over thresholds runs the whole
algorithm about 17 times; here the threshold is searched by interpolating the vocab size in
log-log space, which needs a few runs (one when the corpus is too small to fill the vocab).

The output starts with [PAD], [UNK], [CLS], [SEP], [MASK] (then --reserved_tokens), then every
character and its "##" form, then the learned pieces by count. Every training word whose
characters all made it into the alphabet (see --max_unique_chars, --max_token_length) tokenizes
without [UNK]; the summary reports how many word occurrences do.

  python create_vocab.py --input_file=corpus.txt --output_file=vocab.txt --vocab_size=8000
"""

import collections
import importlib.util
import math
import os
import time
from typing import Dict, Iterable, List, Sequence, Tuple

from absl import flags
from absl import logging

import atomic_files
import cli
import errors
import file_patterns
import progress_log
import tokenization

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the script's flags.

  Called only when run as a script, so that importing this module (tests, the demo) never
  collides with the same flag names defined by another script in one process.
  """
  flags.DEFINE_string("input_file", None,
                      "Input text file(s): comma-separated paths or glob patterns.")
  flags.DEFINE_string("output_file", None, "Where to write the vocab (one token per line).")
  flags.DEFINE_integer("vocab_size", 30522, "The maximum number of tokens in the vocab.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Whether to lower-case and strip accents (as the tokenizer will).")
  flags.DEFINE_list("reserved_tokens", [],
                    "Extra reserved tokens, written after [PAD],[UNK],[CLS],[SEP],[MASK].")
  flags.DEFINE_integer("max_unique_chars", 1000,
                       "The size of the alphabet: words with rarer characters are not learned.")
  flags.DEFINE_integer("max_token_length", 50, "Longer words are not learned from.")
  flags.DEFINE_integer("max_input_words", 5000000,
                       "Only the most frequent distinct words are learned from (-1: all).")
  flags.DEFINE_integer("num_iterations", 4, "Learner iterations per threshold.")
  flags.DEFINE_float("slack_ratio", 0.05,
                     "A vocab of at least (1 - slack_ratio) * vocab_size tokens is good enough.")


SPECIAL_TOKENS = (tokenization.PAD_TOKEN, tokenization.UNK_TOKEN, tokenization.CLS_TOKEN,
                  tokenization.SEP_TOKEN, tokenization.MASK_TOKEN)
_MIN_THRESHOLD = 1


def count_words(input_files: Sequence[str], do_lower_case: bool) -> collections.Counter:
  """Counts the words of the basic tokenization of every line of the files."""
  chunk_counts = collections.Counter()
  progress = progress_log.Progress("Counting words", sum(map(os.path.getsize, input_files)), "MB",
                                   interval_seconds=5.0, scale=1e6)
  done = 0
  for path in input_files:
    with open(path, "rb") as reader:
      for line in reader:
        chunk_counts.update(tokenization.clean_and_split(tokenization.convert_to_unicode(line)))
        done += len(line)
        progress.update(done)
  progress.finish("%d distinct chunks" % len(chunk_counts))
  word_counts = collections.Counter()
  for chunk, count in chunk_counts.items():
    for word in tokenization.split_chunk(chunk, do_lower_case):
      word_counts[word] += count
  return word_counts


def _import_learner():
  """tensorflow-text's WordPiece learner module.

  The module is pure Python; loading it from its file skips the package's __init__, which would
  import TensorFlow and every tensorflow-text op (seconds, for nothing used here).
  """
  spec = importlib.util.find_spec("tensorflow_text")
  if spec is not None and spec.submodule_search_locations:
    path = os.path.join(spec.submodule_search_locations[0], "tools", "wordpiece_vocab",
                        "wordpiece_tokenizer_learner_lib.py")
    if os.path.exists(path):
      module_spec = importlib.util.spec_from_file_location("_wordpiece_learner", path)
      module = importlib.util.module_from_spec(module_spec)
      module_spec.loader.exec_module(module)
      return module
  # pylint: disable=g-import-not-at-top
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib
  return wordpiece_tokenizer_learner_lib


def _learn_params(vocab_size: int, reserved_tokens: Sequence[str], max_token_length: int,
                  max_unique_chars: int, max_input_words: int, num_iterations: int,
                  slack_ratio: float):
  learner = _import_learner()
  return learner, learner.Params(
      upper_thresh=None, lower_thresh=_MIN_THRESHOLD, num_iterations=num_iterations,
      max_input_tokens=max_input_words, max_token_length=max_token_length,
      max_unique_chars=max_unique_chars, vocab_size=vocab_size, slack_ratio=slack_ratio,
      include_joiner_token=True, joiner="##", reserved_tokens=list(reserved_tokens))


def learn_vocab(word_counts: Dict[str, int], vocab_size: int,
                reserved_tokens: Sequence[str] = SPECIAL_TOKENS, max_token_length: int = 50,
                max_unique_chars: int = 1000, max_input_words: int = 5000000,
                num_iterations: int = 4, slack_ratio: float = 0.05) -> List[str]:
  """Learns a WordPiece vocab (reserved tokens first) from word counts.

  Filters the words as tensorflow-text's `learn` does, then searches the count threshold whose
  vocab is the largest not above `vocab_size` (within the slack).
  """
  if not word_counts:
    raise errors.InputError("No words to learn a vocab from (are the input files empty?).")
  learner, params = _learn_params(vocab_size, reserved_tokens, max_token_length,
                                  max_unique_chars, max_input_words, num_iterations, slack_ratio)
  words = learner.get_input_words(list(word_counts.items()), params.reserved_tokens,
                                  params.max_token_length)
  allowed_chars = learner.get_allowed_chars(words, params.max_unique_chars)
  words = learner.filter_input_words(words, allowed_chars, params.max_input_tokens)
  if not words:
    raise errors.InputError("Every word is longer than --max_token_length=%d." % max_token_length)

  def learn_at(threshold: int) -> List[str]:
    start = time.time()
    vocab = learner.learn_with_thresh(words, threshold, params)
    logging.info("Count threshold %d: %d tokens (%.1f s)", threshold, len(vocab),
                 time.time() - start)
    return vocab

  return _search_threshold(learn_at, _MIN_THRESHOLD, max(count for _, count in words) + 1,
                           vocab_size, slack_ratio)


def _search_threshold(learn_at, low: int, high: int, vocab_size: int,
                      slack_ratio: float) -> List[str]:
  """Finds a threshold whose vocab size is in [(1 - slack) * vocab_size, vocab_size].

  Vocab size falls with the threshold roughly as a power law, so the next threshold is
  interpolated in log-log space between the bracketing thresholds (`low` gives too many tokens,
  `high` few enough). Returns the largest vocab found that is not above `vocab_size` (or the
  smallest one if none is).
  """
  good_enough = vocab_size * (1.0 - slack_ratio)
  vocab_low = learn_at(low)
  if len(vocab_low) <= vocab_size:
    return vocab_low
  vocab_high = None
  size_low = len(vocab_low)
  size_high = 1.0
  while high - low > 1:
    fraction = math.log(size_low / vocab_size) / max(math.log(size_low / size_high), 1e-9)
    guess = math.exp(math.log(low) + fraction * (math.log(high) - math.log(low)))
    threshold = min(max(int(round(guess)), low + 1), high - 1)
    vocab = learn_at(threshold)
    if len(vocab) > vocab_size:
      low, size_low = threshold, len(vocab)
    else:
      high, size_high, vocab_high = threshold, max(len(vocab), 1), vocab
      if len(vocab) >= good_enough:
        break
  return vocab_high if vocab_high is not None else learn_at(high)


def write_vocab(tokens: Iterable[str], output_file: str) -> None:
  """Writes one token per line (UTF-8), under the final name only when complete."""
  directory = os.path.dirname(output_file)
  if directory:
    os.makedirs(directory, exist_ok=True)
  atomic_files.write_text(output_file, "".join(token + "\n" for token in tokens))


def unknown_word_stats(vocab_file: str, word_counts: Dict[str, int],
                       do_lower_case: bool) -> Tuple[int, int, List[str]]:
  """(occurrences of words that tokenize to [UNK], all occurrences, a few such words)."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  unknown = [(word, count) for word, count in word_counts.items()
             if tokenization.UNK_TOKEN in tokenizer.tokenize(word)]
  unknown.sort(key=lambda item: -item[1])
  return (sum(count for _, count in unknown), sum(word_counts.values()),
          [word for word, _ in unknown[:10]])


def create_vocab(input_file: str, output_file: str, vocab_size: int, do_lower_case: bool,
                 reserved_tokens: Sequence[str] = (), max_unique_chars: int = 1000,
                 max_token_length: int = 50, max_input_words: int = 5000000,
                 num_iterations: int = 4, slack_ratio: float = 0.05) -> List[str]:
  """Counts, learns, writes and checks a vocab; returns its tokens."""
  start = time.time()
  files = file_patterns.expand_text(input_file, "--input_file")
  reserved = list(SPECIAL_TOKENS) + [t for t in reserved_tokens if t not in SPECIAL_TOKENS]
  for token in reserved:
    if not token or any(char.isspace() for char in token):
      raise errors.FlagError("--reserved_tokens: %r is empty or holds whitespace, which the "
                             "tokenizer splits on: no text would ever become that token" % token)
  repeated = sorted({token for token in reserved if reserved.count(token) > 1})
  if repeated:
    raise errors.FlagError("--reserved_tokens: %s given more than once (a vocab holds each token "
                           "once)" % ", ".join(repeated))
  if vocab_size < len(reserved):
    raise errors.InputError("--vocab_size=%d is smaller than the %d reserved tokens." %
                            (vocab_size, len(reserved)))
  word_counts = count_words(files, do_lower_case)
  logging.info("Counted %d words (%d distinct) in %d file(s) in %.1f s",
               sum(word_counts.values()), len(word_counts), len(files), time.time() - start)
  tokens = learn_vocab(word_counts, vocab_size, reserved, max_token_length, max_unique_chars,
                       max_input_words, num_iterations, slack_ratio)
  if list(tokens[:len(reserved)]) != reserved:
    raise AssertionError("The learner did not put the reserved tokens first.")
  if len(tokens) > vocab_size:
    raise errors.FlagError(
        "--vocab_size=%d is below the %d tokens this corpus needs at the least (the reserved "
        "tokens, every character it keeps and their ## forms; --max_unique_chars=%d bounds the "
        "characters): nothing was written; raise --vocab_size to %d or more" %
        (vocab_size, len(tokens), max_unique_chars, len(tokens)))
  write_vocab(tokens, output_file)
  unknown, total, examples = unknown_word_stats(output_file, word_counts, do_lower_case)
  logging.info(
      "Wrote %s: %d tokens (%d reserved). %d of %d word occurrences (%.3f%%) tokenize to [UNK]%s. "
      "Total %.1f s.", output_file, len(tokens), len(reserved), unknown, total,
      100.0 * unknown / max(total, 1),
      (" (most frequent: %s)" % ", ".join(examples)) if examples else "", time.time() - start)
  if len(tokens) < vocab_size * (1.0 - slack_ratio):
    logging.warning("%s has %d tokens, fewer than --vocab_size=%d (the corpus has no more pieces "
                    "worth a token): a bert_config.json for it needs \"vocab_size\": %d",
                    output_file, len(tokens), vocab_size, len(tokens))
  return tokens


def main(_):
  create_vocab(FLAGS.input_file, FLAGS.output_file, FLAGS.vocab_size, FLAGS.do_lower_case,
               FLAGS.reserved_tokens, FLAGS.max_unique_chars, FLAGS.max_token_length,
               FLAGS.max_input_words, FLAGS.num_iterations, FLAGS.slack_ratio)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_file")
  cli.run_script(main)
