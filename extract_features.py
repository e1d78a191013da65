# coding=utf-8
"""Extracts fixed BERT features (the feature-based approach of the BERT paper).

Reads one text per line (`text_a ||| text_b` for a pair) and writes, as the original script:
JSON Lines, one object per input line, `{"linex_index": i, "features": [{"token": "[CLS]",
"layers": [{"index": -1, "values": [...]}, ...]}, ...]}` for every token including [CLS] and
[SEP], values rounded to 6 decimals, in input order. Layer -1 is the last Transformer layer
(indexes count encoder layers, not the embeddings).

Additions:
- `--pooling=cls|mean` writes one vector per text and layer instead of one per token:
  `{"linex_index": i, "pooled": [{"index": -1, "values": [...]}, ...]}` (`mean` averages the
  real tokens, [CLS] and [SEP] included, as sentence-transformers' mean pooling does).
- `--output_format=npz` writes `output_file` as a directory of `features-00000.npz`, ... (one per
  batch) with float32 arrays instead of text; see `feature_extraction.write_npz_batch`.
- `--export_dir` also writes the encoder as a SavedModel for TF Serving: raw text
  in, the same values out. With `--export_format=tf_hub` it writes TF Hub's BERT pair instead, an
  encoder and its preprocessor for `hub.KerasLayer`.
Input is read, run and written batch by batch, so memory does not grow with the input.
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

import os

from absl import flags

import atomic_files
import choices
import cli
import errors

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the script's flags (the original's, plus the TPU flags, --output_format, --pooling).

  Called only when run as a script, so that importing this module (tests, other tools) never
  collides with flags another script defines in the same process.
  """
  flags.DEFINE_string("input_file", None, "Text file, one example per line (`text_a ||| text_b` "
                      "for a pair). With --export_dir, --input_file and --output_file may both be "
                      "left out: the script then only exports.")
  flags.DEFINE_string("output_file", None, "Output JSON Lines file (a directory for "
                      "--output_format=npz).")
  flags.DEFINE_string("layers", "-1,-2,-3,-4", "Comma-separated encoder layer indexes to output "
                      "(-1 is the last layer).")
  cli.define_model_flags(max_seq_length=128)
  cli.define_tokenizer_flags()
  flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.")
  flags.DEFINE_enum("output_format", "jsonl", ["jsonl", "npz"], "jsonl: the original's JSON Lines. "
                    "npz: one uncompressed NumPy .npz file per batch in the --output_file "
                    "directory, written whole (an existing directory is replaced only when it "
                    "holds nothing but such files).")
  cli.define_tpu_flags()
  cli.define_bucketing_flag()
  flags.DEFINE_bool("use_one_hot_embeddings", False,
                    "Accepted so the original's command lines keep working. It chose a one-hot matmul "
                    "for the embedding lookup on TPUs; here the lookup is a gather on every device, "
                    "which gives the same values.")
  flags.DEFINE_enum("pooling", "none", ["none", "cls", "mean"], "none: one vector per token (the "
                    "original). cls: the [CLS] vector. mean: the mean over real tokens.")
  cli.define_export_flag("raw `text` (and `text_b`) in, `sequence_output` (the --layers "
                         "concatenated), `pooled_output` (per --pooling) and `input_mask` out")
  flags.DEFINE_enum("export_format", "serving", ["serving", "tf_hub"], "serving: the SavedModel "
                    "of --export_dir for TF Serving. tf_hub: TF Hub's BERT pair for "
                    "hub.KerasLayer, <export_dir>/%s/<version>/ (the whole encoder: every layer, "
                    "whatever --layers and --pooling say) and <export_dir>/%s/<version>/ (its "
                    "preprocessor, seq_length --max_seq_length); both also serve in TF Serving."
                    % (choices.TF_HUB_ENCODER, choices.TF_HUB_PREPROCESSOR))

def check_npz_output(output_file: str) -> None:
  """An .npz output replaces its directory whole: only an earlier .npz output of this script,
  a directory of NPZ_PATTERN files and nothing else (`atomic_files.check_replaceable_directory`)."""
  atomic_files.check_replaceable_directory(output_file, "--output_file",
                                           "extract_features.py --output_format=npz",
                                           written_names=[choices.NPZ_PATTERN.replace("%05d", "*")])


def _output_file() -> tuple:
  """--output_file is a file, or with --output_format=npz a directory written whole."""
  kind = atomic_files.OUTPUT_DIRECTORY if FLAGS.output_format == "npz" else atomic_files.OUTPUT_FILE
  return kind, [FLAGS.output_file]


def check_input_paths() -> None:
  """The validation pass after the output checks: the flags the script needs, an npz output's
  directory (`check_npz_output`) and --use_tpu before TensorFlow loads, then the model's files
  (`cli.check_model_files`)."""
  cli.require("init_checkpoint")
  if not (FLAGS.export_dir and not FLAGS.input_file and not FLAGS.output_file):
    cli.require("input_file", "output_file")  # Only an export may go without features.
  if FLAGS.output_file and FLAGS.output_format == "npz":
    check_npz_output(FLAGS.output_file)
  if FLAGS.use_tpu:
    raise errors.FlagError("extract_features.py runs on the local CPU or GPU; --use_tpu is not "
                           "supported")
  cli.check_model_files()


def main(_):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import checkpoints
  import cli_setup
  import feature_extraction
  # pylint: enable=g-import-not-at-top
  if FLAGS.export_dir and FLAGS.export_format == "tf_hub":
    feature_extraction.check_tf_hub_export_dir(FLAGS.export_dir)
  bert_config = cli_setup.bert_config()
  extracts = bool(FLAGS.input_file)  # Else --export_dir alone (check_input_paths).
  reads_layers = extracts or FLAGS.export_format == "serving"  # TF Hub's has every layer.
  layer_indexes = (feature_extraction.parse_layer_indexes(FLAGS.layers,
                                                          bert_config.num_hidden_layers)
                   if reads_layers else None)
  tokenizer = cli_setup.tokenizer()
  if extracts:
    total = feature_extraction.count_lines(FLAGS.input_file)
    if not total:
      raise errors.FlagError("--input_file=%s is empty: no examples to extract" %
                             FLAGS.input_file)
    atomic_files.check_writable_directory(os.path.dirname(FLAGS.output_file), "output_file")
  bert = feature_extraction.build_bert(bert_config)
  report = checkpoints.init_from_checkpoint(bert, FLAGS.init_checkpoint)
  if report.missing:
    raise errors.FlagError("--init_checkpoint=%s lacks %d BERT variables, e.g. %s" %
                           (FLAGS.init_checkpoint, len(report.missing), report.missing[:3]))
  checkpoints.check_no_unused_encoder_variables(bert, report)
  extractor = (feature_extraction.FeatureExtractor(bert, layer_indexes, FLAGS.pooling)
               if reads_layers else None)
  if extracts:
    batches = feature_extraction.read_batches(
        feature_extraction.read_lines(FLAGS.input_file), tokenizer, FLAGS.max_seq_length,
        FLAGS.batch_size, cli.bucket_by_length())
    feature_extraction.extract(extractor, batches, FLAGS.output_file, FLAGS.output_format,
                               total)
  if FLAGS.export_dir and FLAGS.export_format == "tf_hub":
    feature_extraction.export_tf_hub(FLAGS.export_dir, bert, tokenizer, FLAGS.max_seq_length,
                                     FLAGS.export_precision, cli_setup.request_limits())
  elif FLAGS.export_dir:
    feature_extraction.export_encoder(FLAGS.export_dir, extractor, tokenizer,
                                      FLAGS.max_seq_length, FLAGS.export_precision,
                                      cli_setup.request_limits())


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, check_input_paths=check_input_paths,
                 outputs={"output_file": _output_file})
