# coding=utf-8
"""In-graph BERT tokenization: raw strings -> input_ids/input_mask/segment_ids inside a SavedModel.

`BertInputEncoder` is a `tf.Module` whose ids equal `tokenization.FullTokenizer`'s. It does not use
tensorflow-text's own normalization (`FastBertTokenizer`/`BertTokenizer` with lower-casing fold
compatibility characters with NFKC case folding, e.g. `½` -> `1⁄2` and `…` -> `...`, and their
Unicode tables are ICU's rather than Python's). Instead the original's basic tokenization is
rebuilt from TF ops with character tables computed from Python's own `unicodedata` and `str.lower`,
so both paths share one definition of every character:

1. Decode UTF-8, dropping invalid bytes (as `bytes.decode("utf-8", "ignore")`).
2. A dense per-code-point class table: drop (NUL, U+FFFD, Cc/Cf), separator (the original's
   whitespace and everything `str.split` splits on), CJK ideograph, punctuation, cased,
   case-ignorable.
3. With `do_lower_case`, a sparse table maps every code point to `strip_accents(c.lower())`
   (several, one or no code points), and capital sigma becomes final sigma in the context where
   `str.lower` does that (a cased letter before it and none after it, skipping case-ignorables).
4. Words are runs of non-separators, cut around every punctuation character and every CJK
   ideograph (`split_words`: the original's `BasicTokenizer`); words longer than 200 characters
   become "[UNK]"; the rest go through
   tensorflow-text's `FastWordpieceTokenizer` (greedy longest-match-first, like the original).

Per-character NFD differs from NFD of a string only by the canonical reordering of combining
marks; once nonspacing marks are dropped that can only move the 25 spacing marks with a nonzero
combining class (`reorder_sensitive_chars()`, e.g. U+1D16D before U+1D165). Batches holding one
of them take a slower branch that decomposes, reorders and then drops the marks.

With `spm_model_file` the text is lower-cased with the same tables (no accent stripping) when
`do_lower_case` and encoded by tensorflow-text's `SentencepieceTokenizer`.
"""

import contextlib
import functools
import unicodedata
from typing import Callable, Dict, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf

import tokenization
from length_buckets import padded_length_buckets

_NUM_CODE_POINTS = 0x110000
# Bits of the per-code-point class table.
_DROP = 1
_SEPARATOR = 2
_CJK = 4
_PUNCTUATION = 8
_CASED = 16
_CASE_IGNORABLE = 32
_REORDER_SENSITIVE = 64

_CAPITAL_SIGMA = 0x3A3
_FINAL_SIGMA = 0x3C2
_SPACE = 0x20
# A noncharacter: no case mapping, no decomposition, not cased, not case-ignorable.
_PROBE_SEPARATOR = "\ufdd0"
# Accepts any UTF-8 word the original keeps (<= 200 characters of up to 4 bytes).
_MAX_BYTES_PER_WORD = 4 * tokenization.MAX_INPUT_CHARS_PER_WORD + 4


@functools.lru_cache(maxsize=None)
def _all_chars() -> tuple:
  """(code points int64 array, chars, their Unicode general categories) of every assigned
  character: the only ones with a table entry to compute.

  Unassigned code points (Cn) and private use characters (Co) have no case mapping,
  decomposition, combining class or property a table records, and surrogates (Cs) cannot occur
  in a decoded string; tests check this of Python's `unicodedata`. The probe separator is left
  out. Most of the 1.1 million code points are of those kinds, and every export builds the tables.
  """
  code_points = np.arange(_NUM_CODE_POINTS)
  code_points = code_points[code_points != ord(_PROBE_SEPARATOR)]
  categories = np.array([unicodedata.category(chr(cp)) for cp in code_points])
  assigned = ~np.isin(categories, ["Cn", "Co", "Cs"])
  code_points, categories = code_points[assigned], categories[assigned]
  return code_points, [chr(cp) for cp in code_points], categories


def _map_each(function, chars: Sequence[str]) -> Sequence[str]:
  """Applies a string function to every char in one call, as if called char by char.

  Joining with a noncharacter keeps case-mapping contexts and canonical reordering from
  crossing characters.
  """
  return function(_PROBE_SEPARATOR.join(chars)).split(_PROBE_SEPARATOR)


def _ends_with_final_sigma(strings: Sequence[str]) -> np.ndarray:
  return np.array([string[-1:] == "\u03c2" for string in strings])


@functools.lru_cache(maxsize=None)
def character_classes() -> np.ndarray:
  """uint8 [0x110000] table of the class bits of every code point, from Python's unicodedata.

  The definitions are those of `tokenization`'s predicates (tests compare them char by char),
  evaluated on whole arrays.
  """
  code_points, chars, categories = _all_chars()
  control = np.isin(categories, ["Cc", "Cf"]) & ~np.isin(code_points, [9, 10, 13])
  drop = control | (code_points == 0) | (code_points == 0xFFFD)
  separator = (np.isin(code_points, [9, 10, 13, 32]) | (categories == "Zs") |
               np.array([char.isspace() for char in chars]))
  ascii_punctuation = (((code_points >= 33) & (code_points <= 47)) |
                       ((code_points >= 58) & (code_points <= 64)) |
                       ((code_points >= 91) & (code_points <= 96)) |
                       ((code_points >= 123) & (code_points <= 126)))
  punctuation = ascii_punctuation | (np.char.str_len(categories) > 0) & (
      np.char.startswith(categories, "P"))
  # A capital sigma after x (and after "A" x) is final exactly when x is cased (resp. cased or
  # case-ignorable), so str.lower itself tells which characters are which.
  cased = _ends_with_final_sigma(_map_each(str.lower, [char + "\u03a3" for char in chars]))
  cased_or_ignorable = _ends_with_final_sigma(
      _map_each(str.lower, ["A" + char + "\u03a3" for char in chars]))
  sensitive = np.isin(code_points, [ord(char) for char in reorder_sensitive_chars()])
  bits = (drop * _DROP + separator * _SEPARATOR + punctuation * _PUNCTUATION +
          cased * _CASED + (cased_or_ignorable & ~cased) * _CASE_IGNORABLE +
          sensitive * _REORDER_SENSITIVE)
  classes = np.zeros([_NUM_CODE_POINTS], np.uint8)
  classes[code_points] = bits
  # The original's CJK ranges hold unassigned code points too.
  for low, high in tokenization.CJK_RANGES:
    classes[low:high + 1] |= _CJK
  return classes


_MAPPINGS = ("lower", "lower_nfd", "lower_strip_accents")


@functools.lru_cache(maxsize=None)
def character_mapping(kind: str):
  """Sparse table of a per-character function for every character it changes.

  Args:
    kind: "lower" (`c.lower()`), "lower_nfd" (NFD of `c.lower()`) or "lower_strip_accents"
      (`tokenization.strip_accents(c.lower())`).

  Returns:
    (keys, row_splits, values): int32 arrays; code point keys[i] maps to
    values[row_splits[i]:row_splits[i + 1]] (possibly empty). Other code points map to themselves.
  """
  if kind not in _MAPPINGS:
    raise ValueError("Unknown character mapping %r (one of %s)." % (kind, _MAPPINGS))
  code_points, chars, categories = _all_chars()
  mapped = _map_each(str.lower, chars)
  if kind == "lower_nfd":
    mapped = _map_each(lambda text: unicodedata.normalize("NFD", text), mapped)
  elif kind == "lower_strip_accents":
    nonspacing_marks = dict.fromkeys(code_points[categories == "Mn"].tolist())
    mapped = _map_each(
        lambda text: unicodedata.normalize("NFD", text).translate(nonspacing_marks), mapped)
  changed = [index for index, (char, target) in enumerate(zip(chars, mapped)) if target != char]
  targets = [mapped[index] for index in changed]
  row_splits = np.concatenate([[0], np.cumsum([len(target) for target in targets])])
  values = [ord(char) for char in "".join(targets)]
  return (code_points[changed].astype(np.int32), row_splits.astype(np.int32),
          np.array(values, np.int32))


@functools.lru_cache(maxsize=None)
def combining_marks():
  """(keys, values) int32: every code point with a nonzero canonical combining class or category
  Mn, and its combining class + 256 if it is Mn (what canonical reordering and accent stripping
  need)."""
  code_points, chars, categories = _all_chars()
  nonspacing = categories == "Mn"
  classes = np.array([unicodedata.combining(char) for char in chars])
  selected = (classes > 0) | nonspacing
  return (code_points[selected].astype(np.int32),
          (classes[selected] + 256 * nonspacing[selected]).astype(np.int32))


@functools.lru_cache(maxsize=None)
def reorder_sensitive_chars() -> frozenset:
  """Spacing characters with a nonzero canonical combining class (see the module docstring)."""
  _, chars, categories = _all_chars()
  return frozenset(char for char, category in zip(chars, categories)
                   if category != "Mn" and unicodedata.combining(char))


def _unique_vocab(vocab: Dict[str, int]) -> list:
  """The vocab as a list indexed by id for tensorflow-text, with the same token -> id map.

  Blank lines (`load_vocab` refuses repeated tokens) get a placeholder that no word can match (it
  contains "[", which is always split off as punctuation).
  """
  size = max(vocab.values()) + 1
  tokens = ["[unreachable %d]" % index for index in range(size)]
  for token, index in vocab.items():
    if token:
      tokens[index] = token
  return tokens


class CharacterTables(object):
  """The character tables as TF constants, created once (eagerly) and captured by functions.

  Args:
    mapping: None (no case mapping), "lower" (`str.lower`) or "lower_strip_accents"
      (`str.lower` then `tokenization.strip_accents`).
  """

  def __init__(self, mapping: Optional[str]):
    if mapping not in (None, "lower", "lower_strip_accents"):
      raise ValueError("Unknown character mapping %r." % mapping)
    self.mapping = mapping
    self.classes = tf.constant(character_classes())
    if mapping is not None:
      self.table = tuple(tf.constant(table) for table in character_mapping(mapping))
    if mapping == "lower_strip_accents":
      # For the rare texts where NFD's canonical reordering matters (see the module docstring).
      self.nfd_table = tuple(tf.constant(table) for table in character_mapping("lower_nfd"))
      self.marks = tuple(tf.constant(table) for table in combining_marks())

  def classes_of(self, code_points: tf.Tensor) -> tf.Tensor:
    """Class bits (int32) of a flat int32 code point tensor."""
    return tf.cast(tf.gather(self.classes, code_points), tf.int32)


def _has(bits: tf.Tensor, flag: int) -> tf.Tensor:
  """Whether each class value has the flag bit."""
  return tf.not_equal(tf.bitwise.bitwise_and(bits, flag), 0)


def _final_sigma(code_points: tf.Tensor, row_ids: tf.Tensor, classes: tf.Tensor) -> tf.Tensor:
  """Bool mask of the capital sigmas that `str.lower` turns into a final sigma.

  A sigma is final when the nearest non-case-ignorable character before it (in its row) is cased
  and the nearest one after it is absent or not cased.
  """
  is_sigma = tf.equal(code_points, _CAPITAL_SIGMA)

  def in_context():
    # A sigma is not case-ignorable, so `positions` is not empty here.
    relevant = tf.logical_not(_has(classes, _CASE_IGNORABLE))
    positions = tf.cast(tf.where(relevant)[:, 0], tf.int32)
    num_relevant = tf.size(positions)
    count_through = tf.cumsum(tf.cast(relevant, tf.int32))
    count_before = count_through - tf.cast(relevant, tf.int32)

    def cased_neighbour(rank, exists):
      index = tf.gather(positions, tf.clip_by_value(rank, 0, num_relevant - 1))
      exists = tf.logical_and(exists, tf.equal(tf.gather(row_ids, index), row_ids))
      return tf.logical_and(exists, _has(tf.gather(classes, index), _CASED))

    cased_before = cased_neighbour(count_before - 1, count_before > 0)
    cased_after = cased_neighbour(count_through, count_through < num_relevant)
    return tf.logical_and(is_sigma, tf.logical_and(cased_before, tf.logical_not(cased_after)))

  return tf.cond(tf.reduce_any(is_sigma), in_context, lambda: is_sigma)


def _sparse_lookup(keys: tf.Tensor, code_points: tf.Tensor):
  """(index into keys, whether found) of every code point, for sorted int32 keys."""
  index = tf.minimum(tf.searchsorted(keys, code_points), tf.size(keys) - 1)
  return index, tf.equal(tf.gather(keys, index), code_points)


def _map_each_code_point(code_points: tf.Tensor, final_sigma: tf.Tensor, table):
  """Replaces every code point by its (possibly empty or longer) sequence from a sparse table.

  Returns:
    (mapped code points, index of the source character of each mapped code point).
  """
  keys, splits, values = table
  index, hit = _sparse_lookup(keys, code_points)
  lengths = tf.where(hit, tf.gather(splits, index + 1) - tf.gather(splits, index), 1)
  source = tf.repeat(tf.range(tf.size(code_points)), lengths)
  starts = tf.cumsum(lengths, exclusive=True)
  offset = tf.range(tf.size(source)) - tf.gather(starts, source)
  source_hit = tf.gather(hit, source)
  table_position = tf.gather(splits, tf.gather(index, source)) + offset
  mapped = tf.where(source_hit,
                    tf.gather(values, tf.where(source_hit, table_position, 0)),
                    tf.gather(code_points, source))
  return tf.where(tf.gather(final_sigma, source), _FINAL_SIGMA, mapped), source


def _strip_accents_with_reordering(code_points, row_ids, final_sigma, tables):
  """Lower-case, NFD with canonical reordering, drop Mn: exactly `strip_accents(token.lower())`.

  Per-character NFD differs from NFD of a string only in the reordering of combining marks by
  their combining class (a stable sort within each run of marks); this applies it.
  """
  mapped, source = _map_each_code_point(code_points, final_sigma, tables.nfd_table)
  mark_keys, mark_values = tables.marks
  index, is_mark = _sparse_lookup(mark_keys, mapped)
  info = tf.where(is_mark, tf.gather(mark_values, index), 0)
  combining_class = tf.bitwise.bitwise_and(info, 255)
  rows = tf.gather(row_ids, source)
  new_row = tf.not_equal(rows, tf.concat([[-1], rows], axis=0)[:-1])
  run_ids = tf.cumsum(tf.cast(tf.logical_or(tf.equal(combining_class, 0), new_row), tf.int64))
  order = tf.argsort(run_ids * 256 + tf.cast(combining_class, tf.int64), stable=True)
  keep = tf.gather(tf.less(info, 256), order)
  return (tf.boolean_mask(tf.gather(mapped, order), keep),
          tf.boolean_mask(tf.gather(source, order), keep))


def _apply_mapping(code_points: tf.Tensor, row_ids: tf.Tensor, classes: tf.Tensor,
                   tables: CharacterTables):
  """Lower-cases (and strips accents from) a flat code point sequence, as `tables.mapping` says.

  Returns:
    (mapped code points, index of the source character of each mapped code point).
  """
  final_sigma = _final_sigma(code_points, row_ids, classes)
  if tables.mapping != "lower_strip_accents":
    return _map_each_code_point(code_points, final_sigma, tables.table)
  return tf.cond(
      tf.reduce_any(_has(classes, _REORDER_SENSITIVE)),
      lambda: _strip_accents_with_reordering(code_points, row_ids, final_sigma, tables),
      lambda: _map_each_code_point(code_points, final_sigma, tables.table))


@functools.lru_cache(maxsize=None)
def _python_whitespace_pattern() -> str:
  """An RE2 class of every character Python's `str.split()` splits on."""
  _, chars, _ = _all_chars()
  return "[%s]" % "".join("\\x{%x}" % ord(c) for c in chars if c.isspace())


def whitespace_split(texts: tf.Tensor) -> tf.RaggedTensor:
  """Strings [B] -> ragged words [B, (words)], as Python's `text.split()` (Unicode whitespace)."""
  return tf.strings.split(tf.strings.regex_replace(texts, _python_whitespace_pattern(), " "))


def _decode(texts: tf.Tensor) -> tf.RaggedTensor:
  """UTF-8 strings [B] -> ragged int32 code points [B, (chars)], invalid bytes dropped."""
  return tf.strings.unicode_decode(texts, "UTF-8", errors="ignore")


def split_words(texts: tf.Tensor, tables: CharacterTables) -> tf.RaggedTensor:
  """The original's basic tokenization in TF ops: strings [B] -> ragged words [B, (words)].

  Lower-cases and strips accents when `tables.mapping` is "lower_strip_accents".
  """
  chars = _decode(texts)
  code_points = chars.flat_values
  row_ids = chars.value_rowids()
  classes = tables.classes_of(code_points)
  keep = tf.logical_not(_has(classes, _DROP))
  code_points = tf.boolean_mask(code_points, keep)
  row_ids = tf.boolean_mask(row_ids, keep)
  classes = tf.boolean_mask(classes, keep)
  is_separator = _has(classes, _SEPARATOR)
  code_points = tf.where(is_separator, _SPACE, code_points)
  classes = tf.where(is_separator, _SEPARATOR, classes)
  if tables.mapping is not None:
    code_points, source = _apply_mapping(code_points, row_ids, classes, tables)
    source_is_cjk = tf.gather(_has(classes, _CJK), source)
    row_ids = tf.gather(row_ids, source)
    classes = tables.classes_of(code_points)
  else:
    source = tf.range(tf.size(code_points))
    source_is_cjk = _has(classes, _CJK)
  is_separator = _has(classes, _SEPARATOR)
  is_punctuation = _has(classes, _PUNCTUATION)

  def previous(values, first):
    return tf.concat([[first], values], axis=0)[:-1]

  # A word starts at a non-separator after a separator or a row start, at and after every
  # punctuation character, and at the edges of the characters that came from one CJK ideograph.
  new_source = tf.not_equal(source, previous(source, -1))
  starts_word = tf.reduce_any(tf.stack([
      tf.not_equal(row_ids, previous(row_ids, -1)),
      previous(is_separator, True),
      is_punctuation,
      previous(is_punctuation, False),
      tf.logical_and(new_source, tf.logical_or(source_is_cjk, previous(source_is_cjk, False))),
  ]), axis=0)
  in_word = tf.logical_not(is_separator)
  starts_word = tf.logical_and(starts_word, in_word)
  word_ids = tf.cumsum(tf.cast(starts_word, tf.int64)) - 1
  word_chars = tf.RaggedTensor.from_value_rowids(
      tf.boolean_mask(code_points, in_word), tf.boolean_mask(word_ids, in_word),
      nrows=tf.reduce_sum(tf.cast(starts_word, tf.int64)), validate=False)
  words = tf.strings.unicode_encode(word_chars, "UTF-8")
  return tf.RaggedTensor.from_value_rowids(
      words, tf.boolean_mask(row_ids, starts_word), nrows=tf.shape(texts, out_type=tf.int64)[0],
      validate=False)


def lower_case(texts: tf.Tensor, tables: CharacterTables) -> tf.Tensor:
  """`str.lower` of every UTF-8 string [B] (after dropping invalid bytes), in TF ops.

  `tables.mapping` must be "lower".
  """
  chars = _decode(texts)
  code_points = chars.flat_values
  row_ids = chars.value_rowids()
  mapped, source = _apply_mapping(code_points, row_ids, tables.classes_of(code_points), tables)
  lowered = tf.RaggedTensor.from_value_rowids(
      mapped, tf.gather(row_ids, source), nrows=tf.shape(texts, out_type=tf.int64)[0],
      validate=False)
  return tf.strings.unicode_encode(lowered, "UTF-8")


def truncated_lengths(length_a: tf.Tensor, length_b: tf.Tensor, max_num_tokens) -> tf.Tensor:
  """Lengths after `tokenization.truncate_seq_pair`, in closed form.

  The original pops from the longer list (from b on a tie) until the pair fits. So the shorter
  side keeps all its tokens if it has at most half of the budget (a wins the odd token, as b is
  popped first on ties) and the longer side takes the rest.
  """
  length_a = tf.convert_to_tensor(length_a)
  budget = tf.cast(max_num_tokens, length_a.dtype)
  half_up = (budget + 1) // 2
  half_down = budget // 2
  new_a = tf.where(length_a <= length_b, tf.minimum(length_a, half_up),
                   budget - tf.minimum(length_b, half_down))
  fits = length_a + length_b <= budget
  return tf.where(fits, length_a, new_a), tf.where(fits, length_b, budget - new_a)


def _ragged_prefix(ragged: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
  """The first `lengths[i]` values (none if negative) of every row i of a ragged [B, (n)].

  Computed on the flat values: comparing ragged positions with dense lengths would broadcast
  through ragged shapes, a graph 3.5 times larger and 6 times slower to build (every export
  builds it several times).
  """
  row_lengths = ragged.row_lengths()
  kept = tf.maximum(tf.minimum(row_lengths, tf.cast(lengths, row_lengths.dtype)), 0)
  rows = ragged.value_rowids()
  positions = tf.range(tf.size(rows, out_type=rows.dtype)) - tf.gather(ragged.row_starts(), rows)
  return tf.RaggedTensor.from_row_lengths(
      tf.boolean_mask(ragged.values, positions < tf.gather(kept, rows)), kept, validate=False)


def padded_length(row_lengths: tf.Tensor, max_seq_length: int) -> tf.Tensor:
  """The smallest bucket of `padded_length_buckets` that holds the longest row (int64 scalar)."""
  buckets = tf.constant(padded_length_buckets(max_seq_length), tf.int64)
  longest = tf.reduce_max(tf.concat([tf.cast(row_lengths, tf.int64), [1]], axis=0))
  return tf.reduce_min(tf.boolean_mask(buckets, buckets >= longest))


class BertInputEncoder(tf.Module):
  """Raw strings -> BERT inputs, with the ids of `tokenization.FullTokenizer`.

  Attributes:
    vocab_file / sp_model_file: the vocab or SentencePiece model, as a SavedModel asset.
    do_lower_case: a bool variable (as in TF Hub's BERT models).
    max_seq_length: the most tokens per row (longer inputs are truncated); with
      `dynamic_padding=False` also the fixed length of the outputs of `__call__` and `pack`.
    dynamic_padding: pad every batch only to its longest row, rounded up to the next of
      `padded_length_buckets(max_seq_length)` (4, 8, ..., 32, 40, ..., 64, 96, 128, ... up to max_seq_length), so a short
      request costs what its tokens cost while the number of distinct shapes (and of cached
      kernels) stays small. The values at real positions do not depend on the padding.
    keep_mask_token: every "[MASK]" written in a text is the mask id, as Hugging Face's tokenizers
      keep special tokens whole (FullTokenizer would give "[", "mask", "]"); the text between is
      tokenized as FullTokenizer does. Exactly "[MASK]": "[mask]" and other special tokens stay
      text. For fill-mask exports.
    cls_id, sep_id, unk_id, pad_id, mask_id: special token ids (None when absent; with a
      SentencePiece model without "[UNK]", unk_id is the model's unknown piece, the id
      `FullTokenizer.convert_tokens_to_ids(["[UNK]"])` gives).
    special_token_ids: dict token -> id of those present.
  """

  @classmethod
  def for_tokenizer(cls, tokenizer: "tokenization.FullTokenizer", max_seq_length: int,
                    dynamic_padding: bool = True,
                    keep_mask_token: bool = False) -> "BertInputEncoder":
    """The encoder of a FullTokenizer's files (its SentencePiece model, else its vocab)."""
    return cls(vocab_file=None if tokenizer.spm_model_file else tokenizer.vocab_file,
               do_lower_case=tokenizer.do_lower_case, spm_model_file=tokenizer.spm_model_file,
               max_seq_length=max_seq_length, dynamic_padding=dynamic_padding,
               keep_mask_token=keep_mask_token)

  def __init__(self, vocab_file: Optional[str] = None, do_lower_case: bool = True,
               spm_model_file: Optional[str] = None, max_seq_length: int = 128,
               dynamic_padding: bool = False, keep_mask_token: bool = False,
               name: Optional[str] = None):
    super().__init__(name=name)
    if max_seq_length < 2:
      raise ValueError("max_seq_length must be at least 2, got %d." % max_seq_length)
    python_tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case, spm_model_file)
    self._do_lower_case = bool(do_lower_case)
    self.do_lower_case = tf.Variable(self._do_lower_case, trainable=False, name="do_lower_case")
    self.max_seq_length = int(max_seq_length)
    self.dynamic_padding = bool(dynamic_padding)
    self._token_limit = None  # (most positions, what the request's inputs are called); see pack.
    self.special_token_ids = {
        token: python_tokenizer.vocab[token]
        for token in (tokenization.CLS_TOKEN, tokenization.SEP_TOKEN, tokenization.UNK_TOKEN,
                      tokenization.PAD_TOKEN, tokenization.MASK_TOKEN)
        if token in python_tokenizer.vocab}
    self.keep_mask_token = bool(keep_mask_token)
    for token in (tokenization.CLS_TOKEN, tokenization.SEP_TOKEN) + (
        (tokenization.MASK_TOKEN,) if self.keep_mask_token else ()):
      python_tokenizer.special_token_id(token)
    self.cls_id = self.special_token_ids[tokenization.CLS_TOKEN]
    self.sep_id = self.special_token_ids[tokenization.SEP_TOKEN]
    self.unk_id = self.special_token_ids.get(tokenization.UNK_TOKEN)
    if spm_model_file and self.unk_id is None:
      # What "[UNK]" maps to with a SentencePiece model: the model's own unknown piece.
      self.unk_id = python_tokenizer.sp_model.unk_id()
    self.pad_id = self.special_token_ids.get(tokenization.PAD_TOKEN)
    self.mask_id = self.special_token_ids.get(tokenization.MASK_TOKEN)
    # tensorflow-text (0.4 s to import) loads only where a tokenizer is built: a script that
    # exports nothing, or refuses its flags, starts without it.
    import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
    if spm_model_file:
      self._tables = CharacterTables("lower" if self._do_lower_case else None)
      self.sp_model_file = tf.saved_model.Asset(spm_model_file)
      self._sentencepiece = tf_text.SentencepieceTokenizer(
          model=python_tokenizer.sp_model.serialized_model_proto(), out_type=tf.int32)
      self._wordpiece = None
    else:
      python_tokenizer.special_token_id(tokenization.UNK_TOKEN)
      self._tables = CharacterTables("lower_strip_accents" if self._do_lower_case else None)
      self.vocab_file = tf.saved_model.Asset(vocab_file)
      self._sentencepiece = None
      self._wordpiece = tf_text.FastWordpieceTokenizer(
          vocab=_unique_vocab(python_tokenizer.vocab), suffix_indicator="##",
          max_bytes_per_word=_MAX_BYTES_PER_WORD, token_out_type=tf.int32,
          unknown_token=tokenization.UNK_TOKEN, no_pretokenization=True,
          support_detokenization=False)
    # One function, traced once per encoder however often a signature tokenizes (both texts of a
    # pair, a question and its context, the fallback of `tokenize_leading_words`): each use is a
    # call of it, which TensorFlow inlines when it optimizes the graph it runs. Building the
    # tokenizer's graph again for each use took most of an export's time on a small model. It
    # reads only what is fixed above, so one trace serves every call. A plain function holds it:
    # tf.saved_model.save would also save a tf.function attribute of the encoder, putting the
    # tokenizer into exports that have no text input (the TF Hub encoder).
    traced_tokenize = tf.function(self._tokenize_texts, autograph=False,
                                  input_signature=[tf.TensorSpec([None], tf.string)])

    def tokenize_once_traced(texts: tf.Tensor) -> tf.RaggedTensor:
      return traced_tokenize(texts)

    self._tokenize = tokenize_once_traced

  def tokenize(self, texts) -> tf.RaggedTensor:
    """UTF-8 strings [B] -> ragged int32 ids [B, (pieces)], as `FullTokenizer.tokenize_to_ids`
    (with `keep_mask_token`, of the text around each "[MASK]")."""
    return self._around_masks(texts, self._tokenize)

  def _around_masks(self, texts, ids_of: Callable[[tf.Tensor], tf.RaggedTensor]
                    ) -> tf.RaggedTensor:
    """`ids_of(texts)`; with `keep_mask_token`, `ids_of` each part between the "[MASK]"s of a
    text, joined with the mask id in place of each "[MASK]"."""
    texts = tf.convert_to_tensor(texts, tf.string)
    if not self.keep_mask_token:
      return ids_of(texts)
    parts = tf.strings.split(texts, sep=tokenization.MASK_TOKEN)  # [B, (masks + 1)]
    ids = ids_of(parts.flat_values)
    mask = tf.fill([tf.shape(parts.flat_values)[0], 1], tf.cast(self.mask_id, ids.dtype))
    with_mask = tf.concat([ids, tf.RaggedTensor.from_tensor(mask)], axis=1)
    # Every part but the last of its text is followed by a mask.
    is_last = tf.equal(tf.ragged.range(parts.row_lengths()),
                       tf.expand_dims(parts.row_lengths() - 1, 1)).flat_values
    with_mask = _ragged_prefix(with_mask, with_mask.row_lengths() - tf.cast(is_last, tf.int64))
    return parts.with_flat_values(with_mask).merge_dims(1, 2)

  def _tokenize_texts(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """`tokenize` without `keep_mask_token` (`_tokenize` runs it)."""
    if self._sentencepiece is not None:
      texts = lower_case(texts, self._tables) if self._do_lower_case else _reencode(texts)
      return self._sentencepiece.tokenize(texts)
    chunks, chunk_ids, chunk_index = self._chunk_word_pieces(texts)
    return chunks.with_flat_values(tf.gather(chunk_ids.merge_dims(1, 2), chunk_index)).merge_dims(
        1, 2)

  def word_pieces(self, texts) -> tf.RaggedTensor:
    """UTF-8 strings [B] -> ragged int32 ids [B, (words), (pieces)]: the pieces of every word of
    the original's basic tokenization (`FullTokenizer.basic_tokenizer`), as TF Hub's BERT
    preprocessors give them. A SentencePiece model has no words: its ids [B, (pieces)], as
    `tokenize` (and as TF Hub's ALBERT preprocessors)."""
    texts = tf.convert_to_tensor(texts, tf.string)
    if self._sentencepiece is not None:
      return self.tokenize(texts)
    chunks, chunk_ids, chunk_index = self._chunk_word_pieces(texts)
    return chunks.with_flat_values(tf.gather(chunk_ids, chunk_index)).merge_dims(1, 2)

  def _chunk_word_pieces(self, texts: tf.Tensor):
    """WordPiece ids of texts [B] by space-separated chunk: (chunks [B, (chunks)], ids
    [U, (words), (pieces)] of the U distinct chunks, index [total chunks] of each chunk's)."""
    # Splitting at ASCII spaces changes nothing (a space ends every word and case context, and
    # never belongs to a multi-byte sequence), and running text has few distinct chunks: only
    # those go through the character pipeline.
    chunks = tf.strings.split(texts, sep=" ")
    unique_chunks, chunk_index = tf.unique(chunks.flat_values)
    words = split_words(unique_chunks, self._tables)
    # The original makes a word of more than 200 characters one [UNK] (which is in the vocab).
    too_long = (tf.strings.length(words.flat_values, unit="UTF8_CHAR") >
                tokenization.MAX_INPUT_CHARS_PER_WORD)
    flat_words = tf.where(too_long, tokenization.UNK_TOKEN, words.flat_values)
    return chunks, words.with_flat_values(self._wordpiece.tokenize(flat_words)), chunk_index

  def tokenize_words(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """Ragged strings [B, (words)] -> ragged int32 ids [B, (words), (pieces)].

    Every word is tokenized on its own, as `FullTokenizer.tokenize(word)`.
    """
    return words.with_flat_values(self.tokenize(words.flat_values))

  def tokenize_leading_words(self, words: tf.RaggedTensor, num_pieces: int) -> tf.RaggedTensor:
    """`tokenize_words` of the first words of every row, enough for its first num_pieces pieces.

    Returns ids [B, (words), (pieces)] of a prefix of every row's words holding at least
    num_pieces pieces, or of all its words. A word gives at least one piece unless every
    character of it is dropped (controls, lone combining marks), so the first num_pieces words
    almost always suffice and a long text costs what its first num_pieces words cost; only
    when they do not, for some row, is every word tokenized.
    """
    row_lengths = words.row_lengths()
    leading = _ragged_prefix(words, tf.minimum(row_lengths, num_pieces))
    ids = self.tokenize_words(leading)
    short = tf.logical_and(ids.merge_dims(1, 2).row_lengths() < num_pieces,
                           leading.row_lengths() < row_lengths)
    return tf.cond(tf.reduce_any(short), lambda: self.tokenize_words(words), lambda: ids)

  @contextlib.contextmanager
  def token_limit(self, max_positions: int, inputs: str) -> Iterator[None]:
    """While functions are traced inside it, `pack` (and `position_checks`) fail a request whose
    features would hold more than max_positions token positions (rows x padded length), with
    InvalidArgument naming `inputs` (e.g. "text_a + text_b"). How exports bound a request's
    memory (export.RequestLimits)."""
    previous, self._token_limit = self._token_limit, (int(max_positions), inputs)
    try:
      yield
    finally:
      self._token_limit = previous

  def position_checks(self, rows: tf.Tensor, width: tf.Tensor,
                      unit: str = "rows") -> list[tf.Operation]:
    """Under `token_limit`: asserts rows x width (the features' shape) is within the limit."""
    if self._token_limit is None:
      return []
    max_positions, inputs = self._token_limit
    rows, width = tf.cast(rows, tf.int64), tf.cast(width, tf.int64)
    message = tf.strings.format(
        "%s: {} %s of {} token positions, {} in all: at most %d per request "
        "(`max_request_tokens`)" % (inputs, unit, max_positions), (rows, width, rows * width))
    return [tf.debugging.Assert(rows * width <= max_positions, [message])]

  def pack(self, ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor] = None,
           seq_length: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
    """Ragged ids -> `[CLS] A [SEP] (B [SEP])` features, truncated as `build_inputs` does.

    `seq_length` (an int32 scalar tensor, e.g. TF Hub's `bert_pack_inputs(..., seq_length=N)`)
    replaces max_seq_length for this call: the features are truncated and padded to it; a
    seq_length below 3 (no room for [CLS], a token and [SEP]) fails with InvalidArgument naming
    it. Under `token_limit` the features' size is checked before they are made.
    """
    length_a = ids_a.row_lengths()
    if seq_length is None:
      length = self.max_seq_length
    else:
      length = tf.cast(seq_length, length_a.dtype)
      with tf.control_dependencies([tf.debugging.Assert(length >= 3, [tf.strings.format(
          "seq_length is {}: it must be at least 3 (room for [CLS], a token and [SEP])",
          length)])]):
        length = tf.identity(length)
    batch_size = tf.shape(length_a)[0]

    def column(token_id):
      return tf.RaggedTensor.from_tensor(tf.fill([batch_size, 1], tf.cast(token_id, ids_a.dtype)))

    if ids_b is None:
      ids_a = _ragged_prefix(ids_a, tf.minimum(length_a, length - 2))
      parts = [column(self.cls_id), ids_a, column(self.sep_id)]
      segments = [tf.zeros_like(part) for part in parts]
    else:
      if seq_length is None and self.max_seq_length < 3:
        raise ValueError("A text pair needs max_seq_length >= 3, got %d." % self.max_seq_length)
      new_a, new_b = truncated_lengths(length_a, ids_b.row_lengths(), length - 3)
      ids_a = _ragged_prefix(ids_a, new_a)
      ids_b = _ragged_prefix(ids_b, new_b)
      parts = [column(self.cls_id), ids_a, column(self.sep_id), ids_b, column(self.sep_id)]
      segments = [tf.zeros_like(part) for part in parts[:3]] + [
          tf.ones_like(part) for part in parts[3:]]
    input_ids = tf.concat(parts, axis=1)
    shape = [None, self.max_seq_length]
    if seq_length is not None:
      shape = tf.stack([input_ids.nrows(), length])
    elif self.dynamic_padding:
      shape = tf.stack([input_ids.nrows(), padded_length(input_ids.row_lengths(),
                                                         self.max_seq_length)])
    width = self.max_seq_length if isinstance(shape, list) else shape[1]
    with tf.control_dependencies(self.position_checks(input_ids.nrows(), width)):
      return {
          "input_ids": tf.cast(input_ids.to_tensor(0, shape=shape), tf.int32),
          "input_mask": tf.cast(tf.ones_like(input_ids).to_tensor(0, shape=shape), tf.int32),
          "segment_ids": tf.cast(tf.concat(segments, axis=1).to_tensor(0, shape=shape),
                                 tf.int32),
      }

  def __call__(self, text_a, text_b=None) -> Dict[str, tf.Tensor]:
    """Strings [B] (and [B] for pairs) -> dict of int32 [B, length] BERT inputs.

    length is max_seq_length, or with `dynamic_padding` the batch's bucketed longest row. The
    cost of a long text is that of its first max_seq_length words (`leading_ids`).
    """
    if text_b is None:
      return self.pack(self.leading_ids(text_a))
    # One pass over both texts: a smaller graph, and chunks shared by a and b are tokenized once.
    text_a = tf.convert_to_tensor(text_a, tf.string)
    ids = self.leading_ids(tf.concat([text_a, tf.convert_to_tensor(text_b, tf.string)], axis=0))
    batch_size = tf.shape(text_a)[0]
    return self.pack(ids[:batch_size], ids[batch_size:])

  def leading_ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """Ids [B, (ids)] of every text: all, or at least its first max_seq_length (what `pack` reads).

    With WordPiece only the first space-separated chunks that give them are tokenized
    (`tokenize_leading_words`; `tokenize` splits at ASCII spaces first anyway), so a long text
    costs what a window costs. A pair is still truncated as the original does: a text cut here
    keeps more ids than the budget, and `truncated_lengths` gives a text longer than the budget
    the same share whatever its exact length. With `keep_mask_token`, each "[MASK]" is the mask id.
    """
    return self._around_masks(texts, self._leading_ids)

  def _leading_ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """`leading_ids` without `keep_mask_token`."""
    if self._sentencepiece is not None:
      return self._tokenize(texts)
    chunks = tf.strings.split(texts, sep=" ")
    chunks = tf.ragged.boolean_mask(chunks, tf.strings.length(chunks) > 0)
    return self.tokenize_leading_words(chunks, self.max_seq_length).merge_dims(1, 2)


def _reencode(texts: tf.Tensor) -> tf.Tensor:
  """Drops invalid UTF-8 bytes, as `tokenization.convert_to_unicode`."""
  return tf.strings.unicode_encode(_decode(texts), "UTF-8")


class BatchTokenizer:
  """Many texts at once with the ids of a `tokenization.FullTokenizer`, as numpy arrays.

  WordPiece goes through `BertInputEncoder.tokenize` in a tf.function, built once. Its rules are
  the original's with Python's own character tables (final sigma and NFD's canonical reordering
  included), so its ids equal the Python path's on every text it can represent. The texts it cannot
  represent, `str` with lone surrogates (not encodable as UTF-8), are tokenized in Python. Invalid
  UTF-8 bytes are dropped in Python before TensorFlow sees the text. A SentencePiece tokenizer goes
  through the model's own batch encoder.

  tensorflow-text's `FastBertTokenizer`/`BertTokenizer` are not used for normalization: with
  lower-casing they apply NFKC case folding (`½` -> `1⁄2`, `…` -> `...`, non-breaking hyphen,
  superscripts, ligatures), which differs from the original on about 0.35% of WikiText lines, and
  their Unicode tables (ICU's) can differ from Python's.
  """

  def __init__(self, tokenizer: tokenization.FullTokenizer):
    self.tokenizer = tokenizer
    self._tokenize_function = None

  def tokenize(self, texts: Sequence[tokenization.TextLike],
               batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Returns (ids int32 [B, L] zero padded, lengths int32 [B]); row i = `tokenize_to_ids`."""
    values, lengths = self._ids(texts, batch_size)
    padded = np.zeros([len(lengths), lengths.max(initial=0)], np.int32)
    padded[np.arange(padded.shape[1]) < lengths[:, None]] = values
    return padded, lengths

  def encode(self, texts_a: Sequence[tokenization.TextLike],
             texts_b: Optional[Sequence[tokenization.TextLike]] = None, max_seq_length: int = 128,
             batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`FullTokenizer.encode` of every text (or pair): (input_ids, input_mask, segment_ids)."""
    cls_id = self.tokenizer.special_token_id(tokenization.CLS_TOKEN)
    sep_id = self.tokenizer.special_token_id(tokenization.SEP_TOKEN)
    ids_a = self._id_lists(texts_a, batch_size)
    if texts_b is None:
      ids_b = [None] * len(ids_a)
    else:
      if len(texts_b) != len(texts_a):
        raise ValueError("batch encode got %d first texts but %d second texts." %
                         (len(texts_a), len(texts_b)))
      ids_b = self._id_lists(texts_b, batch_size)
    features = [tokenization.build_inputs(a.tolist(), None if b is None else b.tolist(),
                                          max_seq_length, cls_id, sep_id)
                for a, b in zip(ids_a, ids_b)]
    shape = [len(features), max_seq_length]
    return tuple(np.array([row[i] for row in features], np.int32).reshape(shape)
                 for i in range(3))

  def _id_lists(self, texts: Sequence[tokenization.TextLike],
                batch_size: int) -> list[np.ndarray]:
    """The ids of every text as a list of int32 arrays."""
    values, lengths = self._ids(texts, batch_size)
    return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []

  def _ids(self, texts: Sequence[tokenization.TextLike],
           batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids of all texts concatenated (int32) and the number of ids of each text (int32)."""
    texts = [tokenization.convert_to_unicode(text) for text in texts]
    if self.tokenizer.sp_model is not None:
      encoded = self.tokenizer.sp_model.encode(
          [self.tokenizer.sentencepiece_text(text) for text in texts], out_type=int)
      return _concatenate([np.array(ids, np.int32) for ids in encoded])
    parts = [self._wordpiece_ids(texts[start:start + batch_size])
             for start in range(0, len(texts), batch_size)]
    return (np.concatenate([values for values, _ in parts] + [np.zeros([0], np.int32)]),
            np.concatenate([lengths for _, lengths in parts] + [np.zeros([0], np.int32)]))

  def _wordpiece_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(concatenated int32 ids, int32 number of ids per text) of a list of str."""
    if self._tokenize_function is None:
      encoder = BertInputEncoder(self.tokenizer.vocab_file, self.tokenizer.do_lower_case,
                                 max_seq_length=2)
      self._tokenize_function = tf.function(encoder.tokenize, autograph=False,
                                            input_signature=[tf.TensorSpec([None], tf.string)])
    encoded = []
    in_python = []
    for row, text in enumerate(texts):
      try:
        encoded.append(text.encode("utf-8"))
      except UnicodeEncodeError:
        in_python.append(row)
        encoded.append(b"")
    ragged = self._tokenize_function(encoded)
    values = ragged.flat_values.numpy()
    lengths = np.diff(ragged.row_splits.numpy()).astype(np.int32)
    if not in_python:
      return values, lengths
    rows = np.split(values, np.cumsum(lengths)[:-1])
    for row in in_python:
      rows[row] = np.array(self.tokenizer.tokenize_to_ids(texts[row]), np.int32)
    return _concatenate(rows)


def _concatenate(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  """(concatenated int32 values, int32 lengths) of a list of 1-D arrays."""
  lengths = np.array([len(row) for row in rows], np.int32)
  return np.concatenate(list(rows) + [np.zeros([0], np.int32)]).astype(np.int32), lengths
