# coding=utf-8
"""Masked-LM / next-sentence pretraining data: the original algorithm, streamed, parallel, bounded.

`create_pretraining_data.py` is the command line; this module is the pipeline, and
pretraining_instances.py the original's instance algorithm it runs. The output is the original's
`tf.train.Example` TFRecords. What changes is how the corpus flows through memory:

* The main process streams the input files and cuts them into *chunks* of whole documents (about
  `chunk_bytes` of text each; a file end always ends a document).
* Each chunk is an independent task: a worker process tokenizes it, creates `dupe_factor` passes of
  instances from its documents (the random "other document" of a NotNext pair is drawn from the same
  chunk), shuffles them, serializes each `tf.train.Example` and frames it as a TFRecord
  (tfrecord_encoding.py: CRC-32C computed with NumPy), all without TensorFlow.
* The main process receives the chunks in order, passes the records through a bounded shuffle
  buffer and writes them round-robin to the output files.

Every random choice of a chunk comes from a generator seeded by `(random_seed, chunk index)`, and
the shuffle buffer's from `(random_seed, shard index)`, so the output bytes depend on the inputs and
flags only: not on `num_workers`, not on timing. `pretraining_data_beam.py` runs the same chunks
through the same `ChunkProcessor` as an Apache Beam pipeline.
"""

import collections
import ctypes
import dataclasses
import io
import json
import multiprocessing
import os
import random
import sys
from typing import Any, BinaryIO, Iterable, Iterator, NamedTuple, Optional, Sequence

from absl import logging

import atomic_files
import errors
import file_patterns
import pretraining_instances
import progress_log
import tfrecord_encoding
import tokenization

NUM_LOGGED_INSTANCES = 20
# A worker's tokenizer word cache: reached within the first ~1 MB of text, so a worker's memory is
# the same for a 4 MB and a 4 TB corpus (~3 MB at ~400 bytes per word; a larger bound is only
# reached by larger corpora: 32768 words added ~13 MB per worker between 4 and 16 MB of input).
# The frequent words that make the cache fast are back in it soon after each clearing.
TOKENIZER_CACHED_WORDS = 8192
PROGRESS_INTERVAL_SECONDS = 5.0


# --------------------------------------------------------------------------------------------------
# Streaming the input into chunks (main process).


class Chunk(NamedTuple):
  """A task: whole documents of text, one sentence per line, blank lines between documents."""
  index: int
  text: bytes
  end_offset: int  # Input bytes read (over all files) when the chunk was complete: for progress.
  counts: collections.Counter  # What was cut or found empty while reading it.


class _GFileReader(io.RawIOBase):
  """A tf.io.gfile.GFile as a raw binary stream, so io.BufferedReader gives it readline(limit)."""

  def __init__(self, gfile: Any):
    super().__init__()
    self._gfile = gfile

  def readable(self) -> bool:
    return True

  def readinto(self, buffer: Any) -> int:
    data = self._gfile.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)

  def close(self) -> None:
    self._gfile.close()
    super().close()


def open_file(path: str, mode: str) -> BinaryIO:
  """Opens a local file, or a `gs://`-style path through tf.io.gfile (importing TensorFlow then).

  `mode` is "rb" or "wb".
  """
  if file_patterns.is_remote(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    gfile = tf.io.gfile.GFile(path, mode)
    return io.BufferedReader(_GFileReader(gfile), 1 << 20) if mode == "rb" else gfile
  return open(path, mode)


def file_size(path: str) -> int:
  if file_patterns.is_remote(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.stat(path).length
  return os.path.getsize(path)


# A line longer than this many bytes per token of max_seq_length cannot be one sentence of an
# instance: `iter_chunks` warns, naming it (the original also takes each line as a sentence).
LONG_LINE_BYTES_PER_TOKEN = 20


def _warn_long_line(path: str, line_number: int, max_seq_length: int) -> None:
  logging.warning("%s:%d: a line longer than %d bytes, far more than max_seq_length=%d tokens "
                  "hold: each line is one sentence, and what does not fit in an instance is "
                  "dropped (put one sentence per line; only the first such line is named)",
                  path, line_number, LONG_LINE_BYTES_PER_TOKEN * max_seq_length, max_seq_length)


def _is_utf8(line: bytes) -> bool:
  try:
    line.decode("utf-8")
  except UnicodeDecodeError:
    return False
  return True


def _warn_not_text(path: str, line_number: int) -> None:
  logging.warning("%s:%d: not UTF-8 text (a binary file in `input_file`?): its bytes that are not "
                  "UTF-8 are dropped, as the original drops them (only the first such line of a "
                  "file is named; the summary counts them all)", path, line_number)


def iter_chunks(input_files: Sequence[str], chunk_bytes: int,
                max_seq_length: Optional[int] = None) -> Iterator[Chunk]:
  """Streams the files as chunks of whole documents of about `chunk_bytes` each.

  A chunk ends at the first document boundary (blank line or end of file) after `chunk_bytes`; a
  document still going at twice that is cut at a line boundary (counted: `documents_split`). A line
  longer than `chunk_bytes` is cut into lines of that length (counted: `lines_split`). Each chunk
  carries the counts of what happened while it was read (with `empty_files`), so that every shard
  reports its own. With `max_seq_length`, the first line of a file longer than
  `LONG_LINE_BYTES_PER_TOKEN` bytes per token of it is named in a warning, and so is the first
  line of a file that is not UTF-8 (a binary file a pattern matched). Memory: one chunk.
  """
  lines, size, offset, index, counts = [], 0, 0, 0, collections.Counter()

  def take_chunk() -> Chunk:
    nonlocal lines, size, index, counts
    chunk = Chunk(index, b"".join(lines), offset, counts)
    lines, size, index, counts = [], 0, index + 1, collections.Counter()
    return chunk

  for path in input_files:
    has_text = False
    line_number, line_bytes, warned = 0, 0, max_seq_length is None
    warned_not_text = False
    with open_file(path, "rb") as reader:
      line_was_cut = False
      while True:
        line = reader.readline(chunk_bytes)
        if not line:
          break
        offset += len(line)
        line_number += not line_bytes
        line_bytes += len(line)
        if not warned and line_bytes > LONG_LINE_BYTES_PER_TOKEN * max_seq_length:
          _warn_long_line(path, line_number, max_seq_length)
          warned = True
        if not warned_not_text and not _is_utf8(line):
          _warn_not_text(path, line_number)
          warned_not_text = True
        if line.endswith(b"\n"):
          line_bytes = 0
        if line_was_cut and not line.strip():
          line_was_cut = False
          continue  # The end of a line that was cut: not a document boundary.
        line_was_cut = not line.endswith(b"\n") and len(line) == chunk_bytes
        counts["lines_split"] += line_was_cut
        if not line.endswith(b"\n"):
          line += b"\n"
        if not line.strip():
          if size >= chunk_bytes:
            yield take_chunk()
          elif lines:
            lines.append(line)
          continue
        has_text = True
        lines.append(line)
        size += len(line)
        if size >= 2 * chunk_bytes:
          counts["documents_split"] += 1
          yield take_chunk()
    if not has_text:
      counts["empty_files"] += 1
      logging.warning("%s: no text (empty file)", path)
    if lines:
      lines.append(b"\n")  # A file end ends a document.
      if size >= chunk_bytes:
        yield take_chunk()
  if lines or counts:
    yield take_chunk()


# --------------------------------------------------------------------------------------------------
# Chunk processing (worker processes).


def _load_glibc_malloc() -> Optional[ctypes.CDLL]:
  """This process's C library if it has glibc's `mallopt` and `malloc_trim`, else None."""
  try:
    libc = ctypes.CDLL(None)
    return libc if libc.mallopt and libc.malloc_trim else None
  except (OSError, AttributeError):
    return None


_GLIBC_MALLOC = _load_glibc_malloc()
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h).
_LARGE_BLOCK_BYTES = 128 * 1024


def bound_heap_growth() -> None:
  """Makes malloc give every block of 128 KB or more its own mapping, unmapped when freed.

  glibc does that by default, but raises the threshold each time such a block is freed (up to
  32 MB). Chunk texts, pickled chunks and chunk results (0.25-3 MB, one per chunk) then come from
  the heap, and the holes they leave between long-lived records (the shuffle buffer) make the heap
  grow with the number of chunks. With the threshold fixed they never enter the heap (measured on
  the main process: 8 MB less at its peak).
  """
  if _GLIBC_MALLOC is not None:
    _GLIBC_MALLOC.mallopt(_M_MMAP_THRESHOLD, _LARGE_BLOCK_BYTES)


def release_free_heap_memory() -> None:
  """Gives the C heap's free pages back to the system (glibc's `malloc_trim`; else nothing).

  Records (~0.9 KB) are larger than Python's small-object allocator handles, so they come from
  malloc, and threads (the pool's result handler) get malloc arenas of their own. Freed blocks
  between live ones stay in the process unless trimmed: called after each chunk, in the workers
  and in the main process.
  """
  if _GLIBC_MALLOC is not None:
    _GLIBC_MALLOC.malloc_trim(0)


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
  """Everything a worker needs, picklable."""
  vocab_file: str
  do_lower_case: bool
  spm_model_file: Optional[str]
  options: pretraining_instances.InstanceOptions
  random_seed: int


class ChunkResult(NamedTuple):
  """A processed chunk: framed TFRecords in shuffled order, counts, readable first instances."""
  index: int
  end_offset: int
  records: list
  counts: collections.Counter
  readable: list  # Log lines of the chunk's first instances.


class ChunkProcessor:
  """Turns chunks of text into shuffled, framed TFRecords (one per worker process)."""

  def __init__(self, config: WorkerConfig):
    bound_heap_growth()  # For this process (and the workers it forks).
    self.config = config
    self.tokenizer = tokenization.FullTokenizer(vocab_file=config.vocab_file,
                                                do_lower_case=config.do_lower_case,
                                                spm_model_file=config.spm_model_file,
                                                max_cached_words=TOKENIZER_CACHED_WORDS)
    self.vocab = pretraining_instances.VocabIds.from_tokenizer(
        self.tokenizer, config.spm_model_file or config.vocab_file,
        is_sentencepiece=config.spm_model_file is not None)
    self.encoder = pretraining_instances.ExampleEncoder(config.options.max_seq_length,
                                  config.options.max_predictions_per_seq,
                                  max(self.vocab.id_to_token))

  def read_documents(self, text: bytes, counts: collections.Counter) -> list:
    """Documents (lists of sentences of ids) of a chunk's text, as the original reads its files."""
    documents = [[]]
    long_sentence = self.config.options.max_seq_length - 3
    for raw_line in text.split(b"\n"):
      try:
        line = raw_line.decode("utf-8")
      except UnicodeDecodeError:
        counts["lines_with_invalid_utf8"] += 1
        line = raw_line.decode("utf-8", "ignore")
      line = line.strip()
      if not line:
        if documents[-1]:
          documents.append([])
        continue
      ids = self.tokenizer.tokenize_to_ids(line)
      if not ids:
        counts["lines_without_tokens"] += 1
        continue
      documents[-1].append(ids)
      counts["sentences"] += 1
      counts["sentences_over_max_num_tokens"] += len(ids) > long_sentence
    if not documents[-1]:
      documents.pop()
    counts["documents"] += len(documents)
    counts["one_sentence_documents"] += sum(len(document) == 1 for document in documents)
    return documents

  def process(self, chunk: Chunk) -> ChunkResult:
    """A chunk's instances: `dupe_factor` passes over its documents, shuffled, serialized."""
    counts = collections.Counter()
    rng = random.Random("%d/%d" % (self.config.random_seed, chunk.index))
    documents = self.read_documents(chunk.text, counts)
    instances = []
    for _ in range(self.config.options.dupe_factor):
      for document_index in range(len(documents)):
        instances.extend(pretraining_instances.create_instances_from_document(
            documents, document_index, self.config.options, self.vocab, rng, counts))
    rng.shuffle(instances)
    counts["instances"] += len(instances)
    readable = [self.readable(instance) for instance in instances[:NUM_LOGGED_INSTANCES]]
    encoded = [self.encoder.encode(instance) for instance in instances]
    del instances, documents  # Only one form of the chunk's instances at a time besides the last.
    records = tfrecord_encoding.frame_tfrecords(encoded)
    del encoded
    release_free_heap_memory()
    return ChunkResult(chunk.index, chunk.end_offset, records, counts, readable)

  def readable(self, instance: pretraining_instances.TrainingInstance) -> str:
    """The original's log form of one instance: its tokens, then each feature's padded values."""
    lines = ["*** Example ***",
             "tokens: %s" % " ".join(tokenization.printable_text(self.vocab.id_to_token[token_id])
                                      for token_id in instance.input_ids)]
    for name, values in self.encoder.feature_values(instance).items():
      lines.append("%s: %s" % (name, " ".join(str(value) for value in values)))
    return "\n".join(lines)


_WORKER_PROCESSOR = None  # The processor of a worker process (inherited when forked).


def _init_worker(config: WorkerConfig) -> None:
  global _WORKER_PROCESSOR
  if _WORKER_PROCESSOR is None or _WORKER_PROCESSOR.config != config:
    _WORKER_PROCESSOR = ChunkProcessor(config)


def _process_in_worker(chunk: Chunk) -> ChunkResult:
  return _WORKER_PROCESSOR.process(chunk)


def _process_chunks(chunks: Iterable[Chunk], processor: ChunkProcessor,
                    num_workers: int) -> Iterator[ChunkResult]:
  """Processes chunks in `num_workers` processes, yielding results in chunk order.

  At most `2 * num_workers` chunks are in flight, so a slow chunk holds back a bounded number of
  finished ones. With one worker the chunks are processed in this process by `processor`; otherwise
  each worker builds its own from `processor.config`.
  """
  if num_workers == 1:
    yield from map(processor.process, chunks)
    return
  global _WORKER_PROCESSOR
  _WORKER_PROCESSOR = processor
  with _worker_context().Pool(num_workers, initializer=_init_worker,
                              initargs=(processor.config,)) as pool:
    pending = collections.deque()
    for chunk in chunks:
      pending.append(pool.apply_async(_process_in_worker, (chunk,)))
      if len(pending) >= 2 * num_workers:
        yield pending.popleft().get()
    while pending:
      yield pending.popleft().get()


def _worker_context() -> multiprocessing.context.BaseContext:
  """Fork when it is safe: workers then start at once with the main process's tokenizer.

  Forking a process that has loaded TensorFlow (only done here for gs:// paths) is not safe, and
  some platforms have no fork: then workers are spawned and load the tokenizer themselves.
  """
  if "fork" in multiprocessing.get_all_start_methods() and "tensorflow" not in sys.modules:
    return multiprocessing.get_context("fork")
  return multiprocessing.get_context("spawn")


# --------------------------------------------------------------------------------------------------
# Writing (main process).


class ShuffleBuffer:
  """Bounded random mixing across chunks, like tf.data's shuffle: emits random buffered elements."""

  def __init__(self, size: int, rng: random.Random):
    self.size = size
    self.rng = rng
    self.buffer = []

  def push(self, item: Any) -> Optional[Any]:
    """Adds an item; once the buffer is full, returns a random buffered item it replaces."""
    if len(self.buffer) < self.size:
      self.buffer.append(item)
      return None
    slot = self.rng.randrange(self.size)
    item, self.buffer[slot] = self.buffer[slot], item
    return item

  def drain(self) -> list:
    """The remaining items in random order."""
    self.rng.shuffle(self.buffer)
    items, self.buffer = self.buffer, []
    return items


class RoundRobinWriter:
  """Writes framed records to the output files in turn, as the original spreads its instances.

  `write_paths` are where the bytes go (the outputs' temporaries); `output_files` name them in
  errors.
  """

  def __init__(self, write_paths: Sequence[str], output_files: Sequence[str]):
    self.files = []
    for path, output_file in zip(write_paths, output_files):
      try:
        self.files.append(open_file(path, "wb"))
      except (OSError, IOError) as error:
        self.close()
        raise errors.InputError("cannot write output file %r: %s" % (output_file, error)) from error
    self.next_file = 0

  def write(self, record: bytes) -> None:
    self.files[self.next_file].write(record)
    self.next_file = (self.next_file + 1) % len(self.files)

  def close(self) -> None:
    for output in self.files:
      output.close()


def shard_output_files(output_file: str, shard_index: int, num_shards: int) -> list:
  """Output paths of comma-separated `output_file`; with shards, each gets `-SSSSS-of-NNNNN`."""
  paths = [path.strip() for path in output_file.split(",") if path.strip()]
  if not paths:
    raise errors.InputError("`output_file` is empty")
  if num_shards > 1:
    paths = ["%s-%05d-of-%05d" % (path, shard_index, num_shards) for path in paths]
  return paths


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """A whole run: the flags of create_pretraining_data.py."""
  input_file: str
  output_file: str
  vocab_file: str
  do_lower_case: bool = True
  spm_model_file: Optional[str] = None
  options: pretraining_instances.InstanceOptions = pretraining_instances.InstanceOptions()
  random_seed: int = 12345
  num_workers: int = 1
  shard_index: int = 0
  num_shards: int = 1
  chunk_bytes: int = 256 * 1024
  shuffle_buffer_size: int = 10000


SKIP_AND_ADJUST_COUNTS = ("empty_files", "lines_with_invalid_utf8", "lines_without_tokens",
                          "lines_split", "documents_split", "one_sentence_documents",
                          "sentences_over_max_num_tokens", "not_next_from_same_document")


def prepare(config: RunConfig) -> tuple:
  """Checks what can be checked before reading the corpus: flags, input patterns, vocab.

  Shared by the local pipeline and the Beam pipeline. Returns (input files, a ChunkProcessor);
  raises a ValueError naming the culprit.
  """
  config.options.validate()
  if config.num_workers < 1:
    raise errors.InputError("num_workers must be >= 1, got %d" % config.num_workers)
  if not 0 <= config.shard_index < config.num_shards:
    raise errors.InputError("shard_index must be in [0, num_shards), got %d of %d" %
                     (config.shard_index, config.num_shards))
  if config.chunk_bytes < 1 or config.shuffle_buffer_size < 1:
    raise errors.InputError("chunk size and shuffle buffer size must be positive")
  input_files = file_patterns.expand_text(config.input_file, "`input_file`")
  worker_config = WorkerConfig(config.vocab_file, config.do_lower_case, config.spm_model_file,
                               config.options, config.random_seed)
  return input_files, ChunkProcessor(worker_config)  # Fails here on a bad vocab.


def check_not_overwriting(config: RunConfig, input_files: Sequence[str],
                          output_files: Sequence[str]) -> None:
  """A FlagError if an output file is an input file, the vocab or another output, or is not a
  file (`atomic_files.check_run_paths`)."""
  inputs = {"`input_file`": input_files}
  for flag, path in (("`vocab_file`", config.vocab_file),
                     ("`spm_model_file`", config.spm_model_file)):
    if path:
      inputs[flag] = [path]
  atomic_files.check_run_paths(inputs, {"`output_file`": (atomic_files.OUTPUT_FILE, output_files)})


def run(config: RunConfig) -> dict:
  """Creates the TFRecords of one shard of the corpus and returns the summary.

  Everything that can be checked before reading the corpus is: flags, input patterns, vocab, output
  paths (a ValueError names the culprit).
  """
  input_files, processor = prepare(config)
  output_files = shard_output_files(config.output_file, config.shard_index, config.num_shards)
  check_not_overwriting(config, input_files, output_files)
  total_bytes = sum(map(file_size, input_files))
  logging.info("*** Reading from %d input files (%.1f MB) ***", len(input_files), total_bytes / 1e6)
  logging.info("*** Writing to output files ***")
  for path in output_files:
    logging.info("  %s", path)
  counts = collections.Counter()
  progress = progress_log.Progress("Reading input", total_bytes, "MB",
                                   PROGRESS_INTERVAL_SECONDS, scale=1e6)
  # The outputs are renamed to their names only when all are complete, as one unit.
  with atomic_files.atomic_outputs(output_files) as write_paths:
    writer = RoundRobinWriter(write_paths, output_files)
    try:
      _write_shard(config, processor, input_files, writer, counts, progress)
    finally:
      writer.close()
    if not counts["instances"]:
      shard = ("; this is shard %d of %d, which reads one chunk of `chunk_size_kb` in %d, from "
               "chunk %d: a small corpus has fewer chunks than shards, use fewer `num_shards`" %
               (config.shard_index, config.num_shards, config.num_shards, config.shard_index)
               if config.num_shards > 1 else "")
      raise errors.InputError(
          "no instances were created from `input_file` %s (%d documents, %d empty files%s): "
          "nothing written" % (describe_files(input_files), counts["documents"],
                               counts["empty_files"], shard))
  return make_summary(config, input_files, output_files, total_bytes, counts, progress.elapsed())


def describe_files(paths: Sequence[str], limit: int = 3) -> str:
  """The first `limit` paths, comma-separated, with how many more there are."""
  text = ", ".join(paths[:limit])
  return text + (" and %d more" % (len(paths) - limit) if len(paths) > limit else "")


def _write_shard(config: RunConfig, processor: ChunkProcessor, input_files: Sequence[str],
                 writer: RoundRobinWriter, counts: collections.Counter,
                 progress: progress_log.Progress) -> None:
  """Streams this shard's chunks through the workers, the shuffle buffer and the writer."""
  def shard_chunks():
    for chunk in iter_chunks(input_files, config.chunk_bytes, config.options.max_seq_length):
      if chunk.index % config.num_shards == config.shard_index:
        counts.update(chunk.counts)
        yield chunk


  shuffle = ShuffleBuffer(config.shuffle_buffer_size,
                          random.Random("%d/shuffle/%d" % (config.random_seed, config.shard_index)))
  logged = 0
  for result in _process_chunks(shard_chunks(), processor, config.num_workers):
    counts.update(result.counts)
    logged += log_readable(result.readable[:NUM_LOGGED_INSTANCES - logged])
    for record in result.records:
      evicted = shuffle.push(record)
      if evicted is not None:
        writer.write(evicted)
    progress.update(result.end_offset, _progress_detail(counts))
    del result
    release_free_heap_memory()
  for record in shuffle.drain():
    writer.write(record)
  progress.update(progress.total, _progress_detail(counts), force=True)
  logging.info("Wrote %d total instances", counts["instances"])


def _progress_detail(counts: collections.Counter) -> str:
  return "%d documents, %d instances" % (counts["documents"], counts["instances"])


def log_readable(readable: Sequence[str]) -> int:
  """Logs instances in the original's form (ChunkResult.readable); returns how many."""
  for text in readable:
    for line in text.split("\n"):
      logging.info("%s", line)
  return len(readable)


def make_summary(config: RunConfig, input_files: Sequence[str], output_files: Sequence[str],
                 total_bytes: int, counts: collections.Counter, seconds: float) -> dict:
  """The final JSON-able summary of a run."""
  return {
      "input_files": len(input_files),
      "input_bytes": total_bytes,
      "shard": "%d of %d" % (config.shard_index, config.num_shards),
      "documents": counts["documents"],
      "sentences": counts["sentences"],
      "instances": counts["instances"],
      "is_next": counts["is_next"],
      "not_next": counts["not_next"],
      "masked_tokens": counts["masked_tokens"],
      "skipped_or_adjusted": {name: counts[name] for name in SKIP_AND_ADJUST_COUNTS},
      "output_files": list(output_files),
      "seconds": round(seconds, 3),
      "input_mb_per_second": round(total_bytes / 1e6 / max(seconds, 1e-9), 3),
  }


def summary_json(summary: dict) -> str:
  return json.dumps(summary, indent=2)
