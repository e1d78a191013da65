# coding=utf-8
"""The original's pretraining instances, on token ids: next-sentence pairs, masking, Examples.

`create_instances_from_document` is the original's algorithm (document chunks up to a random
target length, random split point, NotNext with probability 0.5 with unused segments put back,
longest-first truncation from the front or back, 15% masking with 80/10/10 replacement, optional
whole-word masking), on the ids of a document's sentences rather than their tokens; `ExampleEncoder`
serializes an instance as the original's `tf.train.Example` (FEATURE_NAMES), without TensorFlow,
so pretraining_data.py's worker processes can run it. `create_masked_lm_predictions` also serves
run_pretraining's `--dynamic_masking` (pretraining.py).
"""

import collections
import dataclasses
import itertools
import random
import struct
from typing import Any, Iterator, NamedTuple, Sequence

import errors
import tfrecord_encoding

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]")
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "masked_lm_weights", "next_sentence_labels")


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
  """The original's knobs of instance creation and masking (its flags of the same names)."""
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  dupe_factor: int = 10
  do_whole_word_mask: bool = False

  def validate(self) -> None:
    """Raises InputError naming the flag whose value the algorithm cannot work with."""
    if self.max_seq_length < 5:
      raise errors.InputError("`max_seq_length` must be at least 5 ([CLS] A [SEP] B [SEP] with A "
                              "and B non-empty), got %d" % self.max_seq_length)
    if self.max_predictions_per_seq < 0:
      raise errors.InputError("max_predictions_per_seq must be >= 0, got %d" %
                              self.max_predictions_per_seq)
    if not 0.0 <= self.masked_lm_prob <= 1.0:
      raise errors.InputError("masked_lm_prob must be in [0, 1], got %r" % self.masked_lm_prob)
    if not 0.0 <= self.short_seq_prob <= 1.0:
      raise errors.InputError("short_seq_prob must be in [0, 1], got %r" % self.short_seq_prob)
    if self.dupe_factor < 1:
      raise errors.InputError("dupe_factor must be >= 1, got %d" % self.dupe_factor)


@dataclasses.dataclass(frozen=True)
class VocabIds:
  """What the algorithm needs to know about the vocab, as ids.

  Attributes:
    cls_id, sep_id, mask_id: ids of `[CLS]`, `[SEP]`, `[MASK]`.
    random_ids: the ids a random replacement is drawn from: one per distinct vocab token, as the
      original draws a random token from `tokenizer.vocab`.
    continues_word: byte per id, 1 when that token continues the previous token's word (WordPiece
      `##` pieces; SentencePiece pieces without the `▁` word-start mark), for whole-word masking.
    id_to_token: for the readable log of the first instances.
    special_tokens_in_text: whether tokenized text can hold `[CLS]`/`[SEP]` (a SentencePiece model
      may have them as pieces; WordPiece tokenization splits the brackets off).
  """
  cls_id: int
  sep_id: int
  mask_id: int
  random_ids: tuple
  continues_word: bytes
  id_to_token: dict
  special_tokens_in_text: bool

  @classmethod
  def from_tokenizer(cls, tokenizer: Any, vocab_description: str,
                     is_sentencepiece: bool) -> "VocabIds":
    """Reads the ids off a FullTokenizer; a vocab without a needed special token is a ValueError."""
    vocab = tokenizer.vocab
    # WordPiece maps unknown words to [UNK]; a SentencePiece model has its own unknown piece.
    needed = SPECIAL_TOKENS + (() if is_sentencepiece else ("[UNK]",))
    missing = [token for token in needed if token not in vocab]
    if missing:
      raise errors.InputError("%s has no %s token(s); masked-LM pretraining data needs %s" %
                              (vocab_description, ", ".join(missing), ", ".join(needed)))
    continues_word = bytearray(max(vocab.values()) + 1)
    for token, token_id in vocab.items():
      continues_word[token_id] = _continues_word(token, is_sentencepiece)
    return cls(cls_id=vocab["[CLS]"], sep_id=vocab["[SEP]"], mask_id=vocab["[MASK]"],
               random_ids=tuple(vocab.values()), continues_word=bytes(continues_word),
               id_to_token={token_id: token for token, token_id in vocab.items()},
               special_tokens_in_text=is_sentencepiece)


def _continues_word(token: str, is_sentencepiece: bool) -> bool:
  """Whether a vocab token is a non-initial piece of a word (masked together with the previous)."""
  if not is_sentencepiece:
    return token.startswith("##")
  is_special = token.startswith("[") and token.endswith("]") and len(token) > 2
  is_punctuation = len(token) == 1 and not token.isalnum()
  return not (token.startswith("\u2581") or is_special or is_punctuation)


class TrainingInstance(NamedTuple):
  """One pretraining example before padding.

  `input_ids` is `[CLS] A [SEP] B [SEP]` with masking applied; the first `first_segment_length`
  ids (`[CLS] A [SEP]`) have segment id 0, the rest 1. `masked_lm_ids` are the original ids at the
  sorted `masked_lm_positions`.
  """
  input_ids: list
  first_segment_length: int
  masked_lm_positions: list
  masked_lm_ids: list
  is_random_next: bool


# --------------------------------------------------------------------------------------------------
# The original algorithm, on token ids.


def truncate_pair_at_random_ends(tokens_a: list, tokens_b: list, max_num_tokens: int,
                                 rng: random.Random) -> tuple:
  """Truncates a pair to `max_num_tokens` in total, as the original create_pretraining_data's
  `truncate_seq_pair` does (named apart from `tokenization.truncate_seq_pair`, the fine-tuning
  scripts' cut, which only ever removes from the back).

  The original removes one token at a time from the longer sequence (B on ties), from its front or
  its back with probability 1/2 each. Which sequence loses a token depends on the lengths only, so
  the removals per sequence are counted first; the number taken from the front is then a
  Binomial(n, 1/2) draw: the number of set bits among n random bits. Returns the truncated (a, b)
  as new lists.
  """
  length_a, length_b = len(tokens_a), len(tokens_b)
  while length_a + length_b > max_num_tokens:
    if length_a > length_b:
      length_a -= 1
    else:
      length_b -= 1
  front_a = bin(rng.getrandbits(len(tokens_a) - length_a)).count("1")
  front_b = bin(rng.getrandbits(len(tokens_b) - length_b)).count("1")
  return (tokens_a[front_a:front_a + length_a], tokens_b[front_b:front_b + length_b])


def _random_order(items: list, rng: random.Random) -> Iterator:
  """Yields `items` in a uniformly random order, drawing only as many numbers as items consumed.

  The lazy form of the original's `rng.shuffle(cand_indexes)` followed by a scan that usually stops
  after `num_to_predict` candidates (a Fisher-Yates shuffle of `items` in place, step by step, with
  `int(random() * n)` for a random index below n, as Python's shuffle did before 3.11).
  """
  random_float = rng.random
  size = len(items)
  for position in range(size):
    chosen = position + int(random_float() * (size - position))
    items[position], items[chosen] = items[chosen], items[position]
    yield items[position]


def _candidate_positions(input_ids: list, vocab: VocabIds) -> list:
  """Positions of all ids but `[CLS]` and `[SEP]`.

  Unless the tokenizer can produce those tokens from text, the only ones are the three the instance
  was built with, which are found without a Python loop over the ids.
  """
  cls_id, sep_id = vocab.cls_id, vocab.sep_id
  if not vocab.special_tokens_in_text:
    first_sep = input_ids.index(sep_id)
    return [*range(1, first_sep), *range(first_sep + 1, len(input_ids) - 1)]
  return [position for position, token_id in enumerate(input_ids)
          if token_id != cls_id and token_id != sep_id]


def _choose_masked_positions(input_ids: list, num_to_predict: int, options: InstanceOptions,
                             vocab: VocabIds, rng: random.Random) -> list:
  """The positions to predict, as the original chooses them (not yet sorted).

  Candidates are all positions except `[CLS]`/`[SEP]`; with `do_whole_word_mask` a word's pieces
  form one candidate. Candidates are scanned in random order and taken while they fit in
  `num_to_predict`.
  Without whole words every candidate is one position, so that scan is a uniform random sample of
  `num_to_predict` positions: the first ones in random order.
  """
  candidates = _candidate_positions(input_ids, vocab)
  if not options.do_whole_word_mask:
    return list(itertools.islice(_random_order(candidates, rng), num_to_predict))
  words = []
  for position in candidates:
    if words and vocab.continues_word[input_ids[position]]:
      words[-1].append(position)
    else:
      words.append([position])
  positions = []
  for word_positions in _random_order(words, rng):
    if len(positions) >= num_to_predict:
      break
    if len(positions) + len(word_positions) <= num_to_predict:
      positions.extend(word_positions)
  return positions


def create_masked_lm_predictions(input_ids: list, options: InstanceOptions, vocab: VocabIds,
                                 rng: random.Random) -> tuple:
  """Masks a `[CLS] A [SEP] B [SEP]` id sequence as the original does.

  Chooses `min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))` positions (whole words
  with `do_whole_word_mask`); each becomes `[MASK]` (80%), stays (10%) or becomes a random vocab
  token (10%).

  Returns:
    (masked ids, sorted masked positions, the original ids at those positions).
  """
  num_to_predict = min(options.max_predictions_per_seq,
                       max(1, int(round(len(input_ids) * options.masked_lm_prob))))
  positions = _choose_masked_positions(input_ids, num_to_predict, options, vocab, rng)
  output_ids = list(input_ids)
  random_ids = vocab.random_ids
  for position in positions:
    if rng.random() < 0.8:
      output_ids[position] = vocab.mask_id
    elif rng.random() >= 0.5:
      output_ids[position] = random_ids[int(rng.random() * len(random_ids))]
  positions.sort()
  return output_ids, positions, [input_ids[position] for position in positions]


def create_instances_from_document(documents: Sequence[list], document_index: int,
                                   options: InstanceOptions, vocab: VocabIds, rng: random.Random,
                                   counts: collections.Counter) -> list:
  """The original's instances of one document (a list of sentences, each a list of ids).

  `documents` is the pool NotNext segments come from (here: the document's chunk). Adds the pair
  counts to `counts`.
  """
  document = documents[document_index]
  max_num_tokens = options.max_seq_length - 3
  target_seq_length = max_num_tokens
  if rng.random() < options.short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)
  instances = []
  current_chunk = []
  current_length = 0
  i = 0
  while i < len(document):
    current_chunk.append(document[i])
    current_length += len(document[i])
    if i == len(document) - 1 or current_length >= target_seq_length:
      a_end = rng.randint(1, len(current_chunk) - 1) if len(current_chunk) >= 2 else 1
      tokens_a = list(itertools.chain.from_iterable(current_chunk[:a_end]))
      if len(current_chunk) == 1 or rng.random() < 0.5:
        is_random_next = True
        tokens_b = _random_continuation(documents, document_index,
                                        target_seq_length - len(tokens_a), rng, counts)
        i -= len(current_chunk) - a_end  # The unused segments go back for the next instance.
      else:
        is_random_next = False
        tokens_b = list(itertools.chain.from_iterable(current_chunk[a_end:]))
      tokens_a, tokens_b = truncate_pair_at_random_ends(tokens_a, tokens_b, max_num_tokens, rng)
      input_ids = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [vocab.sep_id]
      masked_ids, positions, labels = create_masked_lm_predictions(input_ids, options, vocab, rng)
      instances.append(TrainingInstance(masked_ids, len(tokens_a) + 2, positions, labels,
                                        is_random_next))
      counts["not_next" if is_random_next else "is_next"] += 1
      counts["masked_tokens"] += len(positions)
      current_chunk = []
      current_length = 0
    i += 1
  return instances


def _random_continuation(documents: Sequence[list], document_index: int, target_length: int,
                         rng: random.Random, counts: collections.Counter) -> list:
  """Segment B of a NotNext pair: sentences from a random start in a random other document.

  As the original: up to 10 draws to find another document (with a single document in the pool, B
  comes from the same one: counted), then sentences until B reaches `target_length`.
  """
  for _ in range(10):
    random_index = rng.randint(0, len(documents) - 1)
    if random_index != document_index:
      break
  else:
    counts["not_next_from_same_document"] += 1
  random_document = documents[random_index]
  tokens_b = []
  for sentence in random_document[rng.randint(0, len(random_document) - 1):]:
    tokens_b.extend(sentence)
    if len(tokens_b) >= target_length:
      break
  return tokens_b


# --------------------------------------------------------------------------------------------------
# tf.train.Example encoding without TensorFlow (the wire format: tfrecord_encoding.py).

# Which value list (tfrecord_encoding.INT64_LIST or FLOAT_LIST) holds each feature's values.
_FEATURE_VALUE_LISTS = {name: tfrecord_encoding.FLOAT_LIST if name == "masked_lm_weights"
                        else tfrecord_encoding.INT64_LIST for name in FEATURE_NAMES}
# The tag of Example.features (field 1), which holds every feature entry.
_FEATURES_TAG = tfrecord_encoding.field_tag(1)


def _feature_entry_prefix(name: str, packed_values_length: int) -> bytes:
  """`tfrecord_encoding.feature_entry_prefix` of one of the FEATURE_NAMES."""
  return tfrecord_encoding.feature_entry_prefix(name, _FEATURE_VALUE_LISTS[name],
                                                packed_values_length)


class ExampleEncoder:
  """Serializes TrainingInstances to the original's `tf.train.Example` bytes, with zero padding.

  Hand-written protobuf encoding (the wire format of example.proto, features in the original's
  order), so worker processes need no TensorFlow; the tests check that `tf.train.Example` parses it
  to the expected values.
  """

  def __init__(self, max_seq_length: int, max_predictions_per_seq: int, max_id: int):
    self.max_seq_length = max_seq_length
    self.max_predictions_per_seq = max_predictions_per_seq
    self._varints = [tfrecord_encoding.varint(value)
                     for value in range(max(max_id, max_seq_length) + 1)]
    # Entries that take few values are built once; 0/1 values are one byte each, so the input_mask
    # and segment_ids values always have max_seq_length bytes.
    self._input_mask_entries = [self._entry("input_mask", b"\x01" * count
                                            + bytes(max_seq_length - count))
                                for count in range(max_seq_length + 1)]
    self._segment_ids_prefix = _feature_entry_prefix("segment_ids", max_seq_length)
    self._weights_entries = [
        self._entry("masked_lm_weights", struct.pack(
            "<%df" % max_predictions_per_seq,
            *([1.0] * count + [0.0] * (max_predictions_per_seq - count))))
        for count in range(max_predictions_per_seq + 1)]
    self._label_entries = [self._entry("next_sentence_labels", bytes([label])) for label in (0, 1)]
    self._prefixes = {name: {} for name in ("input_ids", "masked_lm_positions", "masked_lm_ids")}

  @staticmethod
  def _entry(name: str, packed_values: bytes) -> bytes:
    return _feature_entry_prefix(name, len(packed_values)) + packed_values

  def _int64_entry(self, name: str, values: list, length: int) -> tuple:
    """(prefix, packed values zero-padded to `length`) of an int64 feature; prefixes are cached."""
    packed = b"".join(map(self._varints.__getitem__, values)) + bytes(length - len(values))
    prefixes = self._prefixes[name]
    prefix = prefixes.get(len(packed))
    if prefix is None:
      prefix = prefixes[len(packed)] = _feature_entry_prefix(name, len(packed))
    return prefix, packed

  def encode(self, instance: TrainingInstance) -> bytes:
    """The serialized `tf.train.Example` of one instance."""
    num_ids = len(instance.input_ids)
    first_length = instance.first_segment_length
    features = b"".join((
        *self._int64_entry("input_ids", instance.input_ids, self.max_seq_length),
        self._input_mask_entries[num_ids],
        self._segment_ids_prefix,
        bytes(first_length), b"\x01" * (num_ids - first_length),
        bytes(self.max_seq_length - num_ids),
        *self._int64_entry("masked_lm_positions", instance.masked_lm_positions,
                           self.max_predictions_per_seq),
        *self._int64_entry("masked_lm_ids", instance.masked_lm_ids, self.max_predictions_per_seq),
        self._weights_entries[len(instance.masked_lm_positions)],
        self._label_entries[instance.is_random_next],
    ))
    size = len(features)
    return _FEATURES_TAG + (self._varints[size] if size < len(self._varints)
                            else tfrecord_encoding.varint(size)) + features

  def feature_values(self, instance: TrainingInstance) -> dict:
    """The padded feature values of one instance, as lists (for the readable log and for tests)."""
    num_ids = len(instance.input_ids)
    pad_ids = [0] * (self.max_seq_length - num_ids)
    pad_masked = [0] * (self.max_predictions_per_seq - len(instance.masked_lm_positions))
    return {
        "input_ids": instance.input_ids + pad_ids,
        "input_mask": [1] * num_ids + pad_ids,
        "segment_ids": ([0] * instance.first_segment_length
                        + [1] * (num_ids - instance.first_segment_length) + pad_ids),
        "masked_lm_positions": instance.masked_lm_positions + pad_masked,
        "masked_lm_ids": instance.masked_lm_ids + pad_masked,
        "masked_lm_weights": ([1.0] * len(instance.masked_lm_positions)
                              + [0.0] * len(pad_masked)),
        "next_sentence_labels": [1 if instance.is_random_next else 0],
    }
