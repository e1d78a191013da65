# coding=utf-8
"""Creates masked-LM / next-sentence pretraining TFRecords from plain text (the original's CLI).

Input: one sentence per line, blank lines between documents, any number of files. Output: the
original's `tf.train.Example` features, instances spread round-robin over the output files.

Unlike the original, the corpus is streamed in chunks of whole documents that `num_workers`
processes turn into instances independently, so memory stays bounded whatever the corpus size (see
DESIGN.md, "Pretraining data"), and one corpus can be split over machines with `--num_shards` and
`--shard_index`: every machine runs the same command with its own `--shard_index` and writes its own
files. With `--runner=beam` the same chunks and algorithm run as an Apache Beam pipeline
(pretraining_data_beam.py). Prints a JSON summary at the end.
"""

import dataclasses
import os

from absl import flags
from absl import logging

import atomic_files
import cli
import errors
import pretraining_data
import pretraining_instances
import tokenization

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The original create_pretraining_data.py's flags and defaults, plus this project's."""
  flags.DEFINE_string("input_file", None,
                      "Input raw text file (or comma-separated list of files or glob patterns).")
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord file (or comma-separated list of files).")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Whether to lower case the input text. True for uncased models.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Whether to mask all of a word's pieces together rather than each piece alone.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  # Stricter than other scripts' 3: an instance holds two non-empty segments.
  flags.register_validator("max_seq_length", lambda value: value is None or value >= 5,
                           "must be at least 5 ([CLS] A [SEP] B [SEP], with A and B non-empty)")
  flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per "
                       "sequence.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer("dupe_factor", 10, "Number of times to duplicate the input data (with "
                       "different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float("short_seq_prob", 0.1, "Probability of creating sequences which are shorter "
                     "than the maximum length.")
  flags.DEFINE_string("spm_model_file", None, "Optional SentencePiece model: tokens are its pieces "
                      "and ids its ids (vocab_file may then be the model's .vocab file).")
  flags.DEFINE_integer("num_workers", None,
                       "Worker processes (default: all cores). The output does not depend on it.")
  flags.DEFINE_integer("num_shards", 1, "Split the corpus into this many shards, e.g. one per "
                       "machine; each output file name then gets a -SSSSS-of-NNNNN suffix.")
  flags.DEFINE_integer("shard_index", 0, "Which shard this run creates, in [0, num_shards).")
  flags.DEFINE_integer("chunk_size_kb", 256, "Text per independent chunk of whole documents: the "
                       "unit of work and of memory, and the pool NotNext segments are drawn from.")
  flags.DEFINE_enum("runner", "local", ["local", "beam"],
                    "local: this machine's processes. beam: an Apache Beam pipeline (pip "
                    "install -r requirements-beam.txt) writing --num_shards files in one job, "
                    "globally shuffled; see --beam_pipeline_options.")
  flags.DEFINE_string("beam_pipeline_options", "", "With --runner=beam: Beam's pipeline options, "
                      "e.g. \"--runner=DataflowRunner --project=P --region=R "
                      "--temp_location=gs://B/tmp\" (default: the in-process DirectRunner).")
  flags.DEFINE_integer("shuffle_buffer_size", 10000, "Instances held to mix the output across "
                       "chunks (the original shuffles all instances of the corpus in memory).")


def _run_beam(config: pretraining_data.RunConfig) -> dict:
  try:
    import pretraining_data_beam  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    if not (error.name or "").startswith("apache_beam"):
      raise
    raise errors.FlagError("--runner=beam needs Apache Beam (pip install -r "
                           "requirements-beam.txt): %s" % error) from error
  return pretraining_data_beam.run(config, FLAGS.beam_pipeline_options)


def _output_files() -> tuple:
  """--output_file's files as this run names them (a shard's suffix added), and those the job's
  other shards write: a Beam job writes every shard itself, the local runner one per run."""
  shards = [pretraining_data.shard_output_files(FLAGS.output_file, index, FLAGS.num_shards)
            for index in range(max(FLAGS.num_shards, 1))]
  if FLAGS.runner == "beam":
    return atomic_files.OUTPUT_FILE, sum(shards, []), []
  others = sum((paths for index, paths in enumerate(shards) if index != FLAGS.shard_index), [])
  return atomic_files.OUTPUT_FILE, pretraining_data.shard_output_files(
      FLAGS.output_file, FLAGS.shard_index, FLAGS.num_shards), others


def check_input_paths() -> None:
  """The validation pass after the output checks: the tokenizer's file, --vocab_file (required,
  as the original) unless --spm_model_file tokenizes."""
  if not FLAGS.spm_model_file:
    cli.require("vocab_file", reason=" (or --spm_model_file)")


def main(_):
  logging.set_verbosity(logging.INFO)
  num_workers = FLAGS.num_workers
  if num_workers is None:  # All cores this process may use.
    num_workers = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1)
  config = pretraining_data.RunConfig(
      input_file=FLAGS.input_file,
      output_file=FLAGS.output_file,
      vocab_file=FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case,
      spm_model_file=FLAGS.spm_model_file,
      options=pretraining_instances.InstanceOptions(**{
          field.name: FLAGS[field.name].value
          for field in dataclasses.fields(pretraining_instances.InstanceOptions)}),
      random_seed=FLAGS.random_seed,
      num_workers=num_workers,
      shard_index=FLAGS.shard_index,
      num_shards=FLAGS.num_shards,
      chunk_bytes=FLAGS.chunk_size_kb * 1024,
      shuffle_buffer_size=FLAGS.shuffle_buffer_size)
  if FLAGS.num_shards > 1 and not FLAGS["shard_index"].present and FLAGS.runner != "beam":
    others = "1" if FLAGS.num_shards == 2 else "1 to %d" % (FLAGS.num_shards - 1)
    logging.warning("--num_shards=%d without --shard_index: this run writes shard 0 only (a "
                    "1/%d share of the corpus); run the command with --shard_index=%s for the "
                    "rest, or --runner=beam for all of them in one job",
                    FLAGS.num_shards, FLAGS.num_shards, others)
  if not FLAGS.spm_model_file:
    tokenization.warn_of_casing_mismatch(tokenization.load_vocab(FLAGS.vocab_file),
                                         FLAGS.do_lower_case, FLAGS.vocab_file)
  if FLAGS.runner == "beam":
    summary = _run_beam(config)
  else:
    for output_file in _output_files()[1]:  # Creates a missing directory.
      atomic_files.check_writable_directory(os.path.dirname(output_file), "output_file")
    summary = pretraining_data.run(config)
  print(pretraining_data.summary_json(summary))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_file")
  cli.run_script(main, check_input_paths=check_input_paths,
                 outputs={"output_file": _output_files})
