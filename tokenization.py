# coding=utf-8
"""Tokenization classes with the original BERT's API and exactly its ids.

`FullTokenizer(vocab_file, do_lower_case=True, spm_model_file=None)` tokenizes like Google's
original `tokenization.py`:

* Basic tokenization: NUL, U+FFFD and control characters (categories Cc and Cf except tab, newline
  and carriage return) are dropped; whitespace (space, tab, newline, carriage return, category Zs)
  becomes a space; CJK ideographs (the original's code point ranges, which exclude Hangul and Kana)
  become single-character words; with `do_lower_case` each whitespace-separated word is lower-cased,
  NFD-normalized and stripped of nonspacing marks (Mn); punctuation (ASCII non-alphanumerics and
  Unicode P* categories) is split off; words are split on whitespace (Python's `str.split`).
* WordPiece: greedy longest-match-first with the `##` continuation prefix; a word longer than 200
  characters or without a complete match becomes `[UNK]`.
* Bytes are decoded as UTF-8 with invalid bytes dropped.

`BasicTokenizer` and `WordpieceTokenizer` are the straightforward reference algorithm.
`FullTokenizer.tokenize` gives the same result several times faster: it splits whitespace and
drops/spaces characters with one `str.translate` over a lazily filled character table and caches
the word pieces of every distinct whitespace-separated word (only a few percent of the words of
running text are distinct).

With `spm_model_file` (as ALBERT's tokenizer) tokens are the SentencePiece model's pieces and ids
its ids; `do_lower_case` lower-cases the text (`str.lower`) before encoding.

This module does not import TensorFlow at import time (data-generation workers import it; only a
remote vocab, gs://..., is read through tf.io.gfile). The batch path over many texts at once,
through tensorflow-text, is `in_graph_tokenization.BatchTokenizer(tokenizer)`.
"""

import collections
import hashlib
import os
import re
import unicodedata
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging

import atomic_files
import errors
import file_patterns


TextLike = Union[str, bytes]


class VocabError(errors.InputError):
  """A vocab or SentencePiece file that cannot be used, or a casing flag that contradicts the
  checkpoint; the message names the file or flag."""


MAX_INPUT_CHARS_PER_WORD = 200
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
PAD_TOKEN = "[PAD]"
MASK_TOKEN = "[MASK]"

# The original's "CJK Unified Ideographs" ranges (inclusive). Hangul and Kana are not included.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# Google's released checkpoints whose vocab is lower-cased or cased.
_LOWER_CASED_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                       "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12")

# A bound on the per-word cache of FullTokenizer (the cache is cleared when it is full). An entry
# costs ~400 bytes, so 32768 words are ~13 MB per tokenizer. The distinct words of a corpus keep
# growing with its size, so a larger bound is reached only by larger corpora: create_pretraining_data
# then grew by ~0.8 MB per input MB in each worker, to ~400 MB per worker at the old bound (1M).
# The most frequent words, which give the cache its speed, are back in it soon after each clearing.
_MAX_CACHED_WORDS = 1 << 15


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: Optional[str]) -> None:
  """Raises VocabError if `do_lower_case` contradicts a known released checkpoint's casing.

  The released checkpoints have their model name as the directory of `bert_model.ckpt`, e.g.
  `.../uncased_L-12_H-768_A-12/bert_model.ckpt`. Other paths are not checked.
  """
  if not init_checkpoint:
    return
  match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)
  if model_name in _LOWER_CASED_MODELS and not do_lower_case:
    actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    actual_flag, case_name, opposite_flag = "True", "cased", "False"
  else:
    return
  raise VocabError(
      "You passed in `do_lower_case`=%s with `init_checkpoint`=%s. However, `%s` seems to be "
      "a %s model, so you should pass in `do_lower_case`=%s so that the fine-tuning matches how "
      "the model was pre-trained. If this error is wrong, rename the checkpoint directory." %
      (actual_flag, init_checkpoint, model_name, case_name, opposite_flag))


# A vocab with more word pieces holding an upper-case letter than this is a cased one.
_CASED_VOCAB_TOKENS = 100
# A vocab where fewer than one in this many pieces with letters holds an upper-case one is an
# uncased vocab (Google's holds two: `ℝ` and `##ℝ`).
_UNCASED_VOCAB_RATIO = 100


def casing_mismatch(vocab: Iterable[str], do_lower_case: bool) -> Optional[str]:
  """What is wrong when `do_lower_case` contradicts the vocab's casing, or None: without lower
  casing, an uncased vocab (almost no upper-case piece among many with letters) splits every
  capitalised word into letters or [UNK]; with it, a cased vocab's capitalised pieces are never
  used. Bracketed special tokens do not count."""
  pieces = [token for token in vocab if not (token.startswith("[") and token.endswith("]"))]
  upper = sum(1 for token in pieces if any(character.isupper() for character in token))
  lettered = sum(1 for token in pieces
                 if any(character.islower() or character.isupper() for character in token))
  if not do_lower_case and upper * _UNCASED_VOCAB_RATIO < lettered:
    return ("`do_lower_case`=False, but the vocab is uncased (%d of its %d pieces with letters "
            "hold an upper-case one): every capitalised word is split into letters or [UNK]; "
            "pass `do_lower_case`=True" % (upper, lettered))
  if do_lower_case and upper > _CASED_VOCAB_TOKENS:
    return ("`do_lower_case`=True, but the vocab is cased (%d pieces with upper-case letters): "
            "they are never used; pass `do_lower_case`=False for a cased model" % upper)
  return None


def warn_of_casing_mismatch(vocab: Iterable[str], do_lower_case: bool, vocab_file: str) -> None:
  """Logs a WARNING naming `vocab_file` where `casing_mismatch` finds one."""
  mismatch = casing_mismatch(vocab, do_lower_case)
  if mismatch:
    logging.warning("%s (`vocab_file`=%s)", mismatch, vocab_file)


def convert_to_unicode(text: TextLike) -> str:
  """Returns `text` as `str`, decoding bytes as UTF-8 and dropping invalid bytes."""
  if isinstance(text, str):
    return text
  if isinstance(text, (bytes, bytearray)):
    return bytes(text).decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s" % type(text))


def printable_text(text: TextLike) -> str:
  """Returns `text` in a form suitable for print or logging (`str` in Python 3)."""
  return convert_to_unicode(text)


def _open_text(path: str):
  """Opens a local file, or a remote one (gs://...) through TensorFlow's gfile."""
  if file_patterns.is_remote(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.GFile(path, "rb")
  return open(path, "rb")


def vocab_fingerprint(vocab_file: str) -> str:
  """`sha256:` and the first 16 hex digits of the SHA-256 of the file's bytes: what a training
  run records of its vocab (another vocab of the same size reads every id as another token)."""
  with _open_text(vocab_file) as reader:
    return "sha256:" + hashlib.sha256(reader.read()).hexdigest()[:16]


def tokens_fingerprint(vocab_file: Optional[str], spm_model_file: Optional[str] = None) -> str:
  """`tokens-sha256:` and the first 16 hex digits of the SHA-256 of the tokenizer's tokens in id
  order (`vocab_tokens`): the same for copies that differ only in line ends or a last newline,
  and for a vocab file listing a SentencePiece model's pieces; another for any other token at any
  id. What convert_checkpoint records of the vocab it wrote."""
  tokens = "\n".join(vocab_tokens(vocab_file, spm_model_file)).encode("utf-8")
  return "tokens-sha256:" + hashlib.sha256(tokens).hexdigest()[:16]


def vocab_tokens(vocab_file: Optional[str], spm_model_file: Optional[str] = None) -> List[str]:
  """The tokens the tokenizer maps to ids, in id order: a SentencePiece model's pieces where one
  is given (it tokenizes instead of the vocab file, as in FullTokenizer), else the vocab file's
  (`load_vocab`)."""
  if spm_model_file:
    processor = _load_sentencepiece(spm_model_file)
    return [processor.id_to_piece(index) for index in range(processor.get_piece_size())]
  return list(load_vocab(vocab_file))


def load_vocab(vocab_file: str) -> "collections.OrderedDict[str, int]":
  """Loads a vocab file (one token per line, id = line number) into an ordered dict.

  As in the original, each line is stripped of surrounding whitespace. A token on two lines is an
  error (blank lines are not tokens) (the original mapped it to its last line, so the largest id exceeded the number of distinct
  tokens and failed later, deep in the model's embedding lookup).

  Raises:
    VocabError: if the path is not a readable file, or the file holds no token or repeats a
      token (naming the token and both lines).
  """
  if not vocab_file:
    raise VocabError("No vocab file given (pass `vocab_file`).")
  errors.check_regular_file(vocab_file, "`vocab_file`")
  with _open_text(vocab_file) as reader:
    return vocab_of_lines(reader, vocab_file)


def vocab_of_lines(lines: Iterable[TextLike], source: str) -> "collections.OrderedDict[str, int]":
  """The vocab of a vocab file's lines (`load_vocab`); `source` names the file in errors."""
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    token = convert_to_unicode(line).strip()
    if token and token in vocab:  # Blank lines only keep the ids in step: never produced.
      raise VocabError("Vocab file %s: token %r on line %d repeats line %d" %
                       (source, token, index + 1, vocab[token] + 1))
    vocab[token] = index
  if not vocab:
    raise VocabError("Vocab file %s is empty." % source)
  return vocab


# The special tokens every script that builds model inputs needs (fill-mask and dynamic masking
# also need MASK_TOKEN); a SentencePiece model has its own unknown piece instead of UNK_TOKEN.
INPUT_SPECIAL_TOKENS = (CLS_TOKEN, SEP_TOKEN, UNK_TOKEN)
# How many unused embedding rows a config may add to its vocab's size, to round vocab_size up to a
# multiple of 8 as NVIDIA's and Megatron's configs do (30522 tokens, vocab_size 30528).
MAX_VOCAB_PADDING = 128


def check_vocab_fits_model(vocab_file: Optional[str], vocab_size: int,
                           spm_model_file: Optional[str] = None,
                           special_tokens: Sequence[str] = INPUT_SPECIAL_TOKENS) -> None:
  """Raises VocabError unless the vocab is the model's: as many tokens (lines, or SentencePiece
  pieces) as the config's `vocab_size`, and every one of `special_tokens` present.

  A vocab of another model tokenizes without complaint and makes every id wrong: a smaller one
  leaves most embeddings unreachable (a fill-mask export answers "" for their ids), a larger one
  gives ids beyond the embeddings. Google's vocabs have exactly `vocab_size` lines; a config may
  pad `vocab_size` to a multiple of 8 (fewer than MAX_VOCAB_PADDING unused rows).
  """
  if spm_model_file:
    check_tokens_fit_model(FullTokenizer(None, spm_model_file=spm_model_file).vocab, vocab_size,
                           spm_model_file, [t for t in special_tokens if t != UNK_TOKEN])
  else:
    check_tokens_fit_model(load_vocab(vocab_file), vocab_size, vocab_file, special_tokens)


def check_tokens_fit_model(tokens: Mapping[str, int], vocab_size: int, what: str,
                           special_tokens: Sequence[str] = INPUT_SPECIAL_TOKENS) -> None:
  """`check_vocab_fits_model` on a vocab already read (token -> id); `what` names it."""
  size = 1 + max(index for token, index in tokens.items() if token)  # Trailing blanks: no ids.
  padded = size < vocab_size < size + MAX_VOCAB_PADDING and vocab_size % 8 == 0
  if size != vocab_size and not padded:
    raise VocabError("The vocab %s has %d tokens but the model's vocab_size is %d: pass the vocab "
                     "the model was trained with" % (what, size, vocab_size))
  missing = [token for token in special_tokens if token not in tokens]
  if missing:
    raise VocabError("The vocab %s has no %s token, which the model's inputs need: pass the vocab "
                     "the model was trained with" % (what, " or ".join(missing)))


# The vocab a released or converted model ships beside its checkpoint.
VOCAB_FILE_NAME = "vocab.txt"
# Google's vocabs' placeholders ([unused0] ...), which users replace with words of their domain.
PLACEHOLDER_PREFIX = "[unused"


def check_vocab_of_model_directory(vocab_file: Optional[str], directory: str, what: str,
                                   spm_model_file: Optional[str] = None) -> None:
  """Raises VocabError when `directory` (a model's: `what` names its flag) holds a vocab.txt whose
  tokens differ from the tokenizer's (`vocab_file`, or `spm_model_file`'s pieces, which tokenize
  instead: `vocab_tokens`) at an id where its own is not a placeholder ([unusedN]).

  The checkpoint's embedding of each id was learned for the token beside it: a permuted or other
  vocab of the same size, or a SentencePiece model with as many pieces, tokenizes without
  complaint and reads every differing id as another word. Replacing placeholders with new words,
  the usual way to add a domain's words, is not a difference. A vocab there that cannot be read,
  or of another size (`check_vocab_fits_model` compares sizes with the config), is not compared.
  """
  beside = os.path.join(directory, VOCAB_FILE_NAME)
  if not _is_file(beside) or (
      not spm_model_file and atomic_files.same_place(beside, vocab_file)):
    return
  try:
    model_tokens = list(load_vocab(beside))
  except VocabError:
    return
  tokens = vocab_tokens(vocab_file, spm_model_file)
  if len(tokens) != len(model_tokens):
    return
  differing = [index for index, (token, model_token) in enumerate(zip(tokens, model_tokens))
               if token != model_token and not model_token.startswith(PLACEHOLDER_PREFIX)]
  if differing:
    first = differing[0]
    raise VocabError(
        "%s=%s has %r at id %d where the model in %s=%s has %r (%s, %d ids differ, not "
        "counting [unusedN] placeholders): pass %s" % (
            "`spm_model_file`" if spm_model_file else "`vocab_file`",
            spm_model_file or vocab_file, tokens[first], first, what, directory,
            model_tokens[first], beside, len(differing),
            "the model's own SentencePiece model" if spm_model_file else "that vocab"))


def _is_file(path: str) -> bool:
  if file_patterns.is_remote(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
  return os.path.isfile(path)


def convert_by_vocab(vocab, items: Iterable) -> list:
  """Maps every item through `vocab` (a dict); a missing item raises KeyError."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens: Iterable[str]) -> List[int]:
  """Maps tokens to ids with a token -> id dict."""
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids: Iterable[int]) -> List[str]:
  """Maps ids to tokens with an id -> token dict."""
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text: str) -> List[str]:
  """Splits `text` on whitespace (Python's definition, as `str.split`)."""
  return text.split()


def is_whitespace(char: str) -> bool:
  """Whether the original treats `char` as whitespace (space, \\t, \\n, \\r or category Zs)."""
  return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
  """Whether the original drops `char` as a control character (Cc, Cf but not \\t \\n \\r)."""
  if char in "\t\n\r":
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
  """Whether the original splits off `char`: ASCII non-alphanumerics or a Unicode P* category."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def is_chinese_char(cp: int) -> bool:
  """Whether code point `cp` is in the original's CJK ideograph ranges."""
  return any(low <= cp <= high for low, high in CJK_RANGES)


def strip_accents(text: str) -> str:
  """NFD-normalizes `text` and drops nonspacing marks (category Mn)."""
  return "".join(char for char in unicodedata.normalize("NFD", text)
                 if unicodedata.category(char) != "Mn")


def split_on_punctuation(text: str) -> List[str]:
  """Splits `text` into runs of non-punctuation and single punctuation characters."""
  output = []
  start_new_word = True
  for char in text:
    if is_punctuation(char):
      output.append([char])
      start_new_word = True
    else:
      if start_new_word:
        output.append([])
      start_new_word = False
      output[-1].append(char)
  return ["".join(chars) for chars in output]


class BasicTokenizer(object):
  """The original's basic tokenization (cleaning, CJK, lower-casing, punctuation splitting)."""

  def __init__(self, do_lower_case: bool = True):
    self.do_lower_case = do_lower_case

  def tokenize(self, text: TextLike) -> List[str]:
    """Splits `text` into words and punctuation."""
    text = self._tokenize_chinese_chars(self._clean_text(convert_to_unicode(text)))
    split_tokens = []
    for token in whitespace_tokenize(text):
      if self.do_lower_case:
        token = strip_accents(token.lower())
      split_tokens.extend(split_on_punctuation(token))
    return whitespace_tokenize(" ".join(split_tokens))

  def _tokenize_chinese_chars(self, text: str) -> str:
    """Puts spaces around every CJK ideograph."""
    return "".join(" %s " % char if is_chinese_char(ord(char)) else char for char in text)

  def _clean_text(self, text: str) -> str:
    """Drops NUL, U+FFFD and control characters and turns whitespace into spaces."""
    output = []
    for char in text:
      if char in ("\x00", "\ufffd") or is_control(char):
        continue
      output.append(" " if is_whitespace(char) else char)
    return "".join(output)


class WordpieceTokenizer(object):
  """The original's greedy longest-match-first WordPiece tokenization."""

  def __init__(self, vocab, unk_token: str = UNK_TOKEN,
               max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize(self, text: TextLike) -> List[str]:
    """Splits every whitespace-separated word of `text` into word pieces."""
    output_tokens = []
    for token in whitespace_tokenize(convert_to_unicode(text)):
      output_tokens.extend(self._tokenize_word(token))
    return output_tokens

  def _tokenize_word(self, word: str) -> List[str]:
    """Word pieces of one word, or [unk_token]."""
    if len(word) > self.max_input_chars_per_word:
      return [self.unk_token]
    pieces = []
    start = 0
    while start < len(word):
      end = len(word)
      piece = None
      while start < end:
        candidate = word[start:end] if start == 0 else "##" + word[start:end]
        if candidate in self.vocab:
          piece = candidate
          break
        end -= 1
      if piece is None:
        return [self.unk_token]
      pieces.append(piece)
      start = end
    return pieces


class _CleaningTable(dict):
  """A `str.translate` table doing the original's cleaning and CJK spacing, filled lazily.

  Maps a code point to "" (dropped), " " (whitespace), " c " (CJK ideograph) or the character
  itself. Filling it on demand keeps import and construction cheap.
  """

  def __missing__(self, cp: int) -> str:
    char = chr(cp)
    if cp == 0 or cp == 0xFFFD or is_control(char):
      value = ""
    elif is_whitespace(char):
      value = " "
    elif is_chinese_char(cp):
      value = " %s " % char
    else:
      value = char
    self[cp] = value
    return value


class _PunctuationTable(dict):
  """Lazily filled character -> is_punctuation table."""

  def __missing__(self, char: str) -> bool:
    value = is_punctuation(char)
    self[char] = value
    return value


_CLEANING_TABLE = _CleaningTable()
_PUNCTUATION_TABLE = _PunctuationTable()


def clean_and_split(text: str) -> List[str]:
  """The original's cleaning, CJK spacing and whitespace split, at C speed.

  Each chunk then gives the same words through `split_chunk` as through the original's
  per-token lower-casing, accent stripping and punctuation splitting.
  """
  return text.translate(_CLEANING_TABLE).split()


def split_chunk(chunk: str, do_lower_case: bool) -> List[str]:
  """Words of one chunk of `clean_and_split`: lower-cased and accent-stripped, punctuation split."""
  if do_lower_case:
    chunk = chunk.lower()
    if not chunk.isascii():
      chunk = strip_accents(chunk)
  words = []
  start = 0
  for index, char in enumerate(chunk):
    if _PUNCTUATION_TABLE[char]:
      if start < index:
        words.append(chunk[start:index])
      words.append(char)
      start = index + 1
  if start < len(chunk):
    words.append(chunk[start:])
  return words


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int) -> None:
  """Truncates a pair in place to at most `max_num_tokens` in total, as the original.

  Removes one token at a time from the end of the longer list (from `tokens_b` on a tie), so the
  shorter text keeps as much as possible.
  """
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def build_inputs(ids_a: Sequence[int], ids_b: Optional[Sequence[int]], max_seq_length: int,
                 cls_id: int, sep_id: int) -> Tuple[List[int], List[int], List[int]]:
  """Returns (input_ids, input_mask, segment_ids) for `[CLS] A [SEP] (B [SEP])`.

  Truncates like the original's feature conversion: a single text to `max_seq_length - 2` ids, a
  pair with `truncate_seq_pair` to `max_seq_length - 3`; then pads with zeros.
  """
  ids_a = list(ids_a)
  if ids_b is None:
    del ids_a[max(max_seq_length - 2, 0):]
    ids_b = []
    input_ids = [cls_id] + ids_a + [sep_id]
  else:
    ids_b = list(ids_b)
    truncate_seq_pair(ids_a, ids_b, max(max_seq_length - 3, 0))
    input_ids = [cls_id] + ids_a + [sep_id] + ids_b + [sep_id]
  if len(input_ids) > max_seq_length:
    raise ValueError("max_seq_length=%d leaves no room for the special tokens." % max_seq_length)
  segment_ids = [0] * (len(ids_a) + 2) + [1] * (len(input_ids) - len(ids_a) - 2)
  padding = [0] * (max_seq_length - len(input_ids))
  return input_ids + padding, [1] * len(input_ids) + padding, segment_ids + padding


class FullTokenizer(object):
  """Basic tokenization followed by WordPiece (or a SentencePiece model), with the original's API.

  Attributes:
    vocab: token -> id (an OrderedDict in file order).
    inv_vocab: id -> token.
    do_lower_case: whether text is lower-cased (and, for WordPiece, stripped of accents).
    sp_model: the SentencePiece processor, or None for WordPiece.
  """

  def __init__(self, vocab_file: Optional[str], do_lower_case: bool = True,
               spm_model_file: Optional[str] = None, max_cached_words: int = _MAX_CACHED_WORDS):
    """`max_cached_words` bounds the per-word cache (cleared when full; see _MAX_CACHED_WORDS)."""
    self.do_lower_case = do_lower_case
    self.vocab_file = vocab_file
    self.spm_model_file = spm_model_file
    self.sp_model = None
    if spm_model_file:
      self.sp_model = _load_sentencepiece(spm_model_file)
      self.vocab = collections.OrderedDict(
          (self.sp_model.id_to_piece(i), i) for i in range(self.sp_model.get_piece_size()))
    else:
      self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {index: token for token, index in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    self._word_cache = {}
    self._max_cached_words = max_cached_words
    self._max_token_chars = max(len(token) for token in self.vocab)

  def tokenize(self, text: TextLike) -> List[str]:
    """Returns the word pieces (or SentencePiece pieces) of `text`."""
    text = convert_to_unicode(text)
    if self.sp_model is not None:
      return self.sp_model.encode(self.sentencepiece_text(text), out_type=str)
    output = []
    for pieces, _ in self._cached_chunks(text):
      output.extend(pieces)
    return output

  def tokenize_to_ids(self, text: TextLike) -> List[int]:
    """Returns the ids of `tokenize(text)` (VocabError if the vocab lacks "[UNK]" and needs it)."""
    text = convert_to_unicode(text)
    if self.sp_model is not None:
      return self.sp_model.encode(self.sentencepiece_text(text), out_type=int)
    output = []
    for pieces, ids in self._cached_chunks(text):
      if ids is None:
        raise VocabError("The vocab %s has no %s token, which is needed here." %
                         (self.vocab_file, UNK_TOKEN))
      output.extend(ids)
    return output

  def _cached_chunks(self, text: str) -> Iterable[Tuple[List[str], Optional[List[int]]]]:
    """(word pieces, their ids or None if one is not in the vocab) of every chunk of `text`."""
    cache = self._word_cache
    for chunk in clean_and_split(text):
      entry = cache.get(chunk)
      if entry is None:
        pieces = self._tokenize_word(chunk)
        ids = [self.vocab.get(piece) for piece in pieces]
        entry = (pieces, None if None in ids else ids)
        if len(cache) >= self._max_cached_words:
          cache.clear()
        cache[chunk] = entry
      yield entry

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
    """Maps tokens to ids (KeyError for a token outside a WordPiece vocab)."""
    if self.sp_model is not None:
      return [self.sp_model.piece_to_id(printable_text(token)) for token in tokens]
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
    """Maps ids to tokens."""
    return convert_by_vocab(self.inv_vocab, ids)

  def special_token_id(self, token: str) -> int:
    """Returns the id of a special token such as "[CLS]", with a clear error if it is missing."""
    if token not in self.vocab:
      raise VocabError("The vocab %s has no %s token, which is needed here." %
                       (self.spm_model_file or self.vocab_file, token))
    return self.vocab[token]

  def encode(self, text_a: TextLike, text_b: Optional[TextLike] = None,
             max_seq_length: int = 128) -> Tuple[List[int], List[int], List[int]]:
    """Returns (input_ids, input_mask, segment_ids) of one text or a pair, as `build_inputs`."""
    ids_b = None if text_b is None else self.tokenize_to_ids(text_b)
    return build_inputs(self.tokenize_to_ids(text_a), ids_b, max_seq_length,
                        self.special_token_id(CLS_TOKEN), self.special_token_id(SEP_TOKEN))

  def sentencepiece_text(self, text: str) -> str:
    """The text handed to the SentencePiece model (lower-cased with `do_lower_case`)."""
    return text.lower() if self.do_lower_case else text

  def _tokenize_word(self, chunk: str) -> List[str]:
    """Word pieces of one chunk of `clean_and_split` (the cache's miss path)."""
    return [piece for word in split_chunk(chunk, self.do_lower_case)
            for piece in self._wordpiece(word)]

  def _wordpiece(self, word: str) -> List[str]:
    """Greedy longest-match-first word pieces of a word without whitespace or punctuation."""
    if len(word) > MAX_INPUT_CHARS_PER_WORD:
      return [UNK_TOKEN]
    vocab = self.vocab
    longest = self._max_token_chars
    pieces = []
    start = 0
    length = len(word)
    while start < length:
      prefix = "" if start == 0 else "##"
      end = min(length, start + longest)
      while end > start:
        candidate = prefix + word[start:end]
        if candidate in vocab:
          pieces.append(candidate)
          break
        end -= 1
      else:
        return [UNK_TOKEN]
      start = end
    return pieces


def _load_sentencepiece(spm_model_file: str):
  """Loads a SentencePiece model, with a clear error for a missing file."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  errors.check_regular_file(spm_model_file, "`spm_model_file`")
  with _open_text(spm_model_file) as reader:
    model_proto = reader.read()
  processor = spm.SentencePieceProcessor()
  try:
    processor.load_from_serialized_proto(model_proto)
  except RuntimeError as error:  # SentencePiece's message ("Internal: ... ParseFromArray").
    raise VocabError("%s is not a SentencePiece model (a WordPiece vocab.txt goes to "
                     "`vocab_file`): %s" % (spm_model_file, errors.first_line(error))) from error
  return processor
