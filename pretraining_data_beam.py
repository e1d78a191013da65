# coding=utf-8
"""`create_pretraining_data.py --runner=beam`: the same chunks and chunk algorithm on Apache Beam.

Needs the optional `apache-beam` (requirements-beam.txt); only this module imports it. The pipeline
is the local one (pretraining_data.py) with the main process's two sequential steps replaced:

1. One step streams the input files into chunks with `pretraining_data.iter_chunks` (cheap: no
   tokenization), so chunk i holds exactly the text of the local path's chunk i.
2. `Reshuffle` spreads the chunks over the workers; each worker turns a chunk into framed records
   with `pretraining_data.ChunkProcessor.process`, seeded by (random_seed, chunk index) as locally,
   so every chunk gives the local path's records byte for byte, on any runner.
3. Instead of the local bounded shuffle buffer, a global shuffle: each record goes to an output
   shard drawn by a generator seeded by (random_seed, chunk index); a shard's records are grouped,
   sorted (so their order does not depend on the runner) and shuffled by a generator seeded by
   (random_seed, shard), then written to `<output_file>-SSSSS-of-NNNNN` under a temporary name.

So the records of all shards are the local run's records (same flags and `chunk_size_kb`), and the
output files are the same bytes for every runner and rerun; which file a record is in and where
differ from the local path (a uniform global shuffle rather than a bounded one). A shard's records
are held in memory while it is written: choose `--num_shards` so that a shard stays well below a
worker's memory (records are ~11 bytes per input byte at dupe_factor=5, ~22 at 10).
"""

import collections
import os
import random
import shlex
import time
from typing import Iterator, Sequence, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import atomic_files
import errors
import file_patterns
import pretraining_data

COUNTER_NAMESPACE = "create_pretraining_data"


def _count(counts: collections.Counter) -> None:
  for name, value in counts.items():
    Metrics.counter(COUNTER_NAMESPACE, name).inc(value)


class _ReadChunks(beam.DoFn):
  """All input files as the local path's chunks (one element in, every chunk out)."""

  def __init__(self, input_files: Sequence[str], chunk_bytes: int):
    super().__init__()
    self.input_files = list(input_files)
    self.chunk_bytes = chunk_bytes

  def process(self, unused_element: object) -> Iterator[pretraining_data.Chunk]:
    for chunk in pretraining_data.iter_chunks(self.input_files, self.chunk_bytes):
      _count(chunk.counts)
      yield chunk


class _ProcessChunks(beam.DoFn):
  """A chunk's framed records, each keyed by the output shard it goes to."""

  def __init__(self, worker_config: pretraining_data.WorkerConfig, num_shards: int):
    super().__init__()
    self.worker_config = worker_config
    self.num_shards = num_shards
    self.processor = None

  def setup(self) -> None:
    self.processor = pretraining_data.ChunkProcessor(self.worker_config)

  def process(self, chunk: pretraining_data.Chunk) -> Iterator[Tuple[int, bytes]]:
    result = self.processor.process(chunk)
    _count(result.counts)
    if chunk.index == 0:  # The first instances in the original's log form, as the local path.
      pretraining_data.log_readable(result.readable)
    rng = random.Random("%d/beam_shard/%d" % (self.worker_config.random_seed, chunk.index))
    for record in result.records:
      yield rng.randrange(self.num_shards), record


def shard_path(output_file: str, shard: int, num_shards: int) -> str:
  return pretraining_data.shard_output_files(output_file, shard, num_shards)[0]


def _write_shard(keyed_records: tuple, output_file: str, num_shards: int,
                 random_seed: int) -> str:
  """Writes one shard's records, sorted then shuffled with a (random_seed, shard) generator."""
  shard, records = keyed_records
  records = sorted(record for record in records if record)  # b"": see every_shard.
  random.Random("%d/shuffle/%d" % (random_seed, shard)).shuffle(records)
  path = shard_path(output_file, shard, num_shards)
  with atomic_files.atomic_output(path) as temporary:
    with pretraining_data.open_file(temporary, "wb") as writer:
      for record in records:
        writer.write(record)
  return path


def build_pipeline(pipeline: beam.Pipeline, config: pretraining_data.RunConfig,
                   input_files: Sequence[str],
                   worker_config: pretraining_data.WorkerConfig) -> None:
  """Adds the steps that write `config.num_shards` files of pretraining records."""
  num_shards = config.num_shards
  keyed_records = (
      pipeline
      | "Start" >> beam.Create([None])
      | "ReadChunks" >> beam.ParDo(_ReadChunks(input_files, config.chunk_bytes))
      | "SpreadChunks" >> beam.Reshuffle()
      | "ProcessChunks" >> beam.ParDo(_ProcessChunks(worker_config, num_shards)))
  every_shard = (pipeline  # So that a shard that draws no record is still written (empty).
                 | "ShardKeys" >> beam.Create([(shard, b"") for shard in range(num_shards)]))
  _ = ((keyed_records, every_shard)
       | "Flatten" >> beam.Flatten()
       | "GroupByShard" >> beam.GroupByKey()
       | "WriteShards" >> beam.Map(_write_shard, config.output_file, num_shards,
                                   config.random_seed))


def _remove_files(paths: Sequence[str]) -> None:
  """Deletes the (empty) shard files of a run that made no instance."""
  for path in paths:
    if file_patterns.is_remote(path):
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf.io.gfile.remove(path)
    else:
      os.remove(path)


def run(config: pretraining_data.RunConfig, pipeline_args: str = "") -> dict:
  """Runs the pipeline and returns the local path's summary, its counts from Beam's metrics.

  `pipeline_args` are Beam's options as one command-line string (default: the DirectRunner).

  `config.num_shards` is the number of output files; `shard_index` must be 0 (one job writes
  every shard), and `num_workers` and `shuffle_buffer_size` are the runner's business. What the
  user can fix (those flags, an input without instances) raises `errors.InputError`, which the
  script prints as one line.
  """
  if "," in config.output_file:
    raise errors.InputError("`runner`=beam writes `num_shards` files named after one "
                            "`output_file`; got a comma-separated list %r" % config.output_file)
  if config.shard_index != 0:
    raise errors.InputError("`runner`=beam writes every shard in one job: leave `shard_index` at 0")
  input_files, processor = pretraining_data.prepare(config)
  output_files = [shard_path(config.output_file, shard, config.num_shards)
                  for shard in range(config.num_shards)]
  pretraining_data.check_not_overwriting(config, input_files, output_files)
  total_bytes = sum(map(pretraining_data.file_size, input_files))
  start = time.monotonic()
  options = PipelineOptions(shlex.split(pipeline_args))
  with beam.Pipeline(options=options) as pipeline:
    build_pipeline(pipeline, config, input_files, processor.config)
  counts = collections.Counter()
  query = pipeline.result.metrics().query(MetricsFilter().with_namespace(COUNTER_NAMESPACE))
  for counter in query["counters"]:
    value = counter.committed if counter.committed is not None else counter.attempted
    counts[counter.key.metric.name] += value
  if not counts["instances"]:
    _remove_files(output_files)
    raise errors.InputError(
        "no instances were created from `input_file` %s (%d documents, %d empty files): "
        "nothing written" % (pretraining_data.describe_files(input_files), counts["documents"],
                             counts["empty_files"]))
  summary = pretraining_data.make_summary(config, input_files, output_files, total_bytes, counts,
                                          time.monotonic() - start)
  summary["shard"] = "all %d (beam)" % config.num_shards
  return summary
