"""Pretraining speed (examples/s) and a proof that pretraining from scratch learns.

Speed: the training loop of run_pretraining (training_loop.train with pretraining.loss_fn, the
original's AdamWeightDecay, `--steps` steps per graph call) on in-memory batches of the pretraining
features, for BERT-Base and a tiny config at `--seq_length`/`--batch_size`, with and without XLA;
next to Hugging Face's PyTorch `BertForPreTraining` (AdamW, the same shapes, MLM labels only at the
masked positions) when torch and transformers import. Medians over `--loops` timed graph calls
after one warm-up call.

Positions (`--record_positions`, no model runs): create_pretraining_data.py's records of
`--corpus` (the original's flags, `--short_seq_prob=0.1`) at each of `--position_lengths`, read in
run_pretraining's training order: the positions per record a step computes on padded rows (every
record is max_seq_length wide) and on packed rows (packing.first_fit_decreasing of each batch's
records into rows of max_seq_length), and the real tokens. It bounds what packing short records
(the short_seq_prob targets, document ends) could save.

Proof (`--proof`): the real command-line tools end to end on WikiText-2 validation articles:
create_vocab.py learns a vocab, create_pretraining_data.py writes training records from the first
90% of every article and held-out records from the last 10%, run_pretraining.py trains a tiny BERT
from scratch for `--proof_steps` steps and evaluates on the held-out records. The table compares masked_lm_accuracy
with always predicting the most frequent masked token of the held-out records, and
next_sentence_accuracy with always predicting their more frequent next-sentence label.

  python benchmarks/bench_pretraining.py                     # speed, then the proof
  python benchmarks/bench_pretraining.py --noproof --configs=tiny --loops=2
  python benchmarks/bench_pretraining.py --record_positions
"""

import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from benchmark_paths import REPO_ROOT, SHARED_DIR  # Also puts the project on sys.path.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import checkpoints  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import packing  # pylint: disable=g-import-not-at-top
import pretraining  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_list("configs", ["base", "tiny"], "Model configs to time (base, tiny).")
flags.DEFINE_integer("batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
flags.DEFINE_integer("steps", 5, "Training steps per timed graph call (iterations_per_loop).")
flags.DEFINE_integer("loops", 3, "Timed graph calls per measurement (after one warm-up call).")
flags.DEFINE_list("xla", ["off", "on"], "Time our loop without (off) and/or with (on) XLA.")
flags.DEFINE_bool("peer", True, "Also time Hugging Face BertForPreTraining (PyTorch) if installed.")
flags.DEFINE_bool("proof", True, "Run the learning proof on WikiText-2 after the speed table.")
flags.DEFINE_string("corpus", os.path.join(SHARED_DIR, "corpora",
                                           "wikitext2_valid.bert.txt"), "Proof corpus.")
flags.DEFINE_integer("proof_steps", 3000, "Training steps of the proof.")
flags.DEFINE_integer("proof_batch_size", 32, "Training batch size of the proof.")
flags.DEFINE_integer("proof_vocab_size", 8000, "Vocab size create_vocab.py learns for the proof.")
flags.DEFINE_float("proof_learning_rate", 5e-4, "Peak learning rate of the proof.")
flags.DEFINE_integer("proof_warmup_steps", 500,
                     "Warmup steps of the proof. The original's Adam has no bias correction, so "
                     "its first steps are several times larger than the learning rate until the "
                     "second moment has averaged ~1,000 steps; a short warmup on top of that "
                     "collapses this post-LayerNorm model to the unigram distribution.")
flags.DEFINE_string("proof_dir", None, "Where the proof writes (default: a temporary directory).")
flags.DEFINE_bool("record_positions", False, "Only print the table of positions per record, "
                  "padded and packed (no model runs).")
flags.DEFINE_list("position_lengths", ["128", "512"], "max_seq_length of --record_positions.")
flags.DEFINE_string("vocab_file", os.path.join(SHARED_DIR, "fixtures", "uncased_vocab",
                                               "vocab.txt"), "Vocab of --record_positions.")

CONFIGS = {
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "tiny": dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=512),
}
COMMON_CONFIG = dict(hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                     max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02)


def bert_config(name: str, **overrides) -> modeling.BertConfig:
  return modeling.BertConfig.from_dict({**COMMON_CONFIG, **CONFIGS[name], **overrides})


def synthetic_batches(config: modeling.BertConfig, count: int, seed: int = 0) -> dict:
  """`count` random examples with the pretraining features (all positions real)."""
  rng = np.random.RandomState(seed)
  seq, predictions = FLAGS.seq_length, FLAGS.max_predictions_per_seq
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq), predictions, replace=False)
                                for _ in range(count)]), axis=1).astype(np.int32)
  return {
      "input_ids": rng.randint(1000, config.vocab_size, (count, seq)).astype(np.int32),
      "input_mask": np.ones((count, seq), np.int32),
      "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(count, 0).astype(np.int32),
      "masked_lm_positions": positions,
      "masked_lm_ids": rng.randint(1000, config.vocab_size, (count, predictions)).astype(np.int32),
      "masked_lm_weights": np.ones((count, predictions), np.float32),
      "next_sentence_labels": rng.randint(0, 2, (count, 1)).astype(np.int32),
  }


def time_ours(config: modeling.BertConfig, use_xla: bool) -> float:
  """Median examples/s of our training loop over FLAGS.loops graph calls after a warm-up call."""
  data = synthetic_batches(config, 4 * FLAGS.batch_size)
  output_dir = tempfile.mkdtemp(prefix="bench_pretraining_")
  total = FLAGS.steps * (FLAGS.loops + 1)
  try:
    result = training_loop.train(
        tf.distribute.get_strategy(),
        lambda: pretraining.build_model(config),
        pretraining.loss_fn,
        lambda batch_size, seed: tf.data.Dataset.from_tensor_slices(data).repeat().batch(
            batch_size, drop_remainder=True).prefetch(2),
        training_loop.TrainConfig(output_dir=output_dir, num_train_steps=total, num_warmup_steps=1,
                             learning_rate=1e-4, train_batch_size=FLAGS.batch_size,
                             save_checkpoints_steps=total, iterations_per_loop=FLAGS.steps,
                             use_xla=use_xla))
  finally:
    shutil.rmtree(output_dir, ignore_errors=True)
  return statistics.median(result.loop_examples_per_second[1:])


def time_peer(config: modeling.BertConfig):
  """Median examples/s of Hugging Face BertForPreTraining training steps, or None without torch."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  torch.manual_seed(0)
  model = transformers.BertForPreTraining(transformers.BertConfig(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      intermediate_size=config.intermediate_size, hidden_act="gelu",
      hidden_dropout_prob=config.hidden_dropout_prob,
      attention_probs_dropout_prob=config.attention_probs_dropout_prob,
      max_position_embeddings=config.max_position_embeddings, type_vocab_size=2))
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
  data = synthetic_batches(config, FLAGS.batch_size)
  labels = np.full(data["input_ids"].shape, -100, np.int64)
  np.put_along_axis(labels, data["masked_lm_positions"], data["masked_lm_ids"], axis=1)
  inputs = dict(input_ids=torch.tensor(data["input_ids"], dtype=torch.long),
                attention_mask=torch.tensor(data["input_mask"], dtype=torch.long),
                token_type_ids=torch.tensor(data["segment_ids"], dtype=torch.long),
                labels=torch.tensor(labels),
                next_sentence_label=torch.tensor(data["next_sentence_labels"][:, 0],
                                                 dtype=torch.long))

  def one_call():
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
      optimizer.zero_grad()
      loss = model(**inputs).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
    return FLAGS.steps * FLAGS.batch_size / (time.perf_counter() - start)

  one_call()
  return statistics.median(one_call() for _ in range(FLAGS.loops))


def speed_table() -> list:
  rows = ["| config | implementation | seq | global batch | examples/s | vs peer |",
          "| --- | --- | --- | --- | --- | --- |"]
  for name in FLAGS.configs:
    config = bert_config(name)
    peer = time_peer(config) if FLAGS.peer else None
    measured = [("ours, tf.function" + (" + XLA" if mode == "on" else ""),
                 time_ours(config, mode == "on")) for mode in FLAGS.xla]
    if peer is not None:
      measured.append(("Hugging Face BertForPreTraining (PyTorch)", peer))
    for implementation, rate in measured:
      ratio = "%.2fx" % (rate / peer) if peer else "n/a"
      rows.append("| %s | %s | %d | %d | %.2f | %s |" % (
          name, implementation, FLAGS.seq_length, FLAGS.batch_size, rate, ratio))
  return rows


# ------------------------------------------------------------------------------------------------
# The learning proof.
# ------------------------------------------------------------------------------------------------


def _run(arguments: list) -> None:
  logging.info("$ %s", " ".join(arguments))
  subprocess.run([sys.executable] + arguments, check=True, cwd=REPO_ROOT)


def _split_corpus(corpus: str, directory: str) -> tuple:
  """Writes train.txt and heldout.txt: the first 90% and the last 10% of the lines of each article.

  Held-out sentences are unseen text whose topics the model has met in training, so next-sentence
  prediction can tell a continuation from a sentence of another article there. (With whole
  held-out articles, 3,000 steps of this tiny model learn NSP pairs of the training articles only:
  0.75 accuracy on them, 0.52 balanced accuracy on unseen articles.)
  """
  with open(corpus, encoding="utf-8") as f:
    articles = [a.strip().split("\n") for a in f.read().split("\n\n") if a.strip()]
  cuts = [int(len(lines) * 0.9) for lines in articles]
  paths = []
  for name, parts in (("train.txt", [a[:cut] for a, cut in zip(articles, cuts)]),
                      ("heldout.txt", [a[cut:] for a, cut in zip(articles, cuts)])):
    paths.append(os.path.join(directory, name))
    with open(paths[-1], "w", encoding="utf-8") as f:
      f.write("\n\n".join("\n".join(lines) for lines in parts if lines) + "\n")
  return tuple(paths)


def _heldout_statistics(config: modeling.BertConfig, checkpoint: str, record_file: str) -> dict:
  """One pass over the held-out records: the accuracies of always predicting the most frequent
  masked token and next-sentence label, and the checkpoint's recall of IsNext and of NotNext pairs
  (a constant predictor has 1 and 0, so their mean, the balanced accuracy, is 0.5 whatever the
  label shares are)."""
  model = pretraining.build_model(config)
  checkpoints.init_from_checkpoint(model, checkpoint)
  token_counts = collections.Counter()
  label_by_prediction = np.zeros((2, 2))
  for features in pretraining.eval_dataset([record_file], 128, 20).batch(64):
    real = features["masked_lm_weights"].numpy() > 0
    token_counts.update(features["masked_lm_ids"].numpy()[real].tolist())
    predictions = np.argmax(model(features)["next_sentence_logits"], -1)
    np.add.at(label_by_prediction,
              (features["next_sentence_labels"].numpy().reshape(-1), predictions), 1)
  labels = label_by_prediction.sum(axis=1)
  return {"most_frequent_token_accuracy": max(token_counts.values()) / sum(token_counts.values()),
          "most_frequent_label_accuracy": labels.max() / labels.sum(),
          "is_next_recall": label_by_prediction[0, 0] / labels[0],
          "not_next_recall": label_by_prediction[1, 1] / labels[1]}


def proof_table() -> list:
  directory = FLAGS.proof_dir or tempfile.mkdtemp(prefix="bench_pretraining_proof_")
  os.makedirs(directory, exist_ok=True)
  train_text, heldout_text = _split_corpus(FLAGS.corpus, directory)
  vocab = os.path.join(directory, "vocab.txt")
  _run(["create_vocab.py", "--input_file=" + train_text, "--output_file=" + vocab,
        "--vocab_size=%d" % FLAGS.proof_vocab_size])
  with open(vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  records = {}
  # Held-out: 5 passes too (other pairs and masks of the same sentences), for more pairs.
  for name, text in (("train", train_text), ("heldout", heldout_text)):
    records[name] = os.path.join(directory, name + ".tfrecord")
    _run(["create_pretraining_data.py", "--input_file=" + text, "--output_file=" + records[name],
          "--vocab_file=" + vocab, "--max_seq_length=128", "--max_predictions_per_seq=20",
          "--dupe_factor=5", "--random_seed=%d" % len(name)])
  config = bert_config("tiny", vocab_size=vocab_size)
  config_file = os.path.join(directory, "bert_config.json")
  with open(config_file, "w") as f:
    f.write(config.to_json_string())
  output_dir = os.path.join(directory, "output")
  common = ["run_pretraining.py", "--bert_config_file=" + config_file,
            "--output_dir=" + output_dir, "--max_seq_length=128", "--max_predictions_per_seq=20"]
  start = time.time()
  _run(common + ["--do_train", "--input_file=" + records["train"],
                 "--train_batch_size=%d" % FLAGS.proof_batch_size,
                 "--num_train_steps=%d" % FLAGS.proof_steps,
                 "--num_warmup_steps=%d" % FLAGS.proof_warmup_steps, "--use_xla",
                 "--learning_rate=%g" % FLAGS.proof_learning_rate,
                 "--save_checkpoints_steps=%d" % FLAGS.proof_steps,
                 "--iterations_per_loop=50"])
  minutes = (time.time() - start) / 60
  _run(common + ["--do_eval", "--input_file=" + records["heldout"], "--eval_batch_size=32",
                 "--max_eval_steps=1000"])
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    for line in f:
      key, value = line.strip().split(" = ")
      results[key] = float(value)
  heldout = _heldout_statistics(config, checkpoints.latest_checkpoint(output_dir),
                                records["heldout"])
  print(json.dumps(dict(results, minutes=minutes, **heldout)))
  return [
      "| steps | batch | train minutes | held-out masked_lm_accuracy | most-frequent-token "
      "baseline | held-out next_sentence_accuracy | most-frequent-label baseline | "
      "IsNext / NotNext recall | balanced NSP accuracy |",
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
      "| %d | %d | %.1f | %.4f | %.4f | %.4f | %.4f | %.3f / %.3f | %.4f |" % (
          results["global_step"], FLAGS.proof_batch_size, minutes,
          results["masked_lm_accuracy"], heldout["most_frequent_token_accuracy"],
          results["next_sentence_accuracy"], heldout["most_frequent_label_accuracy"],
          heldout["is_next_recall"], heldout["not_next_recall"],
          (heldout["is_next_recall"] + heldout["not_next_recall"]) / 2)]


# Positions per record, padded and packed.
# ------------------------------------------------------------------------------------------------


def record_positions(directory: str, max_seq_length: int) -> dict:
  """Per record of one pass over --corpus's training records at `max_seq_length`: positions on
  padded rows, on packed rows (each batch of --batch_size packed into rows of max_seq_length),
  real tokens; and the share of records shorter than half the length."""
  records = os.path.join(directory, "records_%d.tfrecord" % max_seq_length)
  max_predictions = round(max_seq_length * 0.15 + 0.5)
  _run(["create_pretraining_data.py", "--input_file=" + FLAGS.corpus, "--output_file=" + records,
        "--vocab_file=" + FLAGS.vocab_file, "--max_seq_length=%d" % max_seq_length,
        "--max_predictions_per_seq=%d" % max_predictions, "--dupe_factor=1"])
  count = sum(1 for _ in tf.data.TFRecordDataset(records))
  batches = pretraining.train_dataset([records], FLAGS.batch_size, 12345, max_seq_length,
                                      max_predictions).take(count // FLAGS.batch_size)
  totals = collections.Counter()
  for features in batches.as_numpy_iterator():
    lengths = packing.sequence_lengths(features["input_mask"])
    totals["padded"] += lengths.size * max_seq_length
    totals["packed"] += len(packing.first_fit_decreasing(lengths.tolist(),
                                                         max_seq_length)) * max_seq_length
    totals["real"] += int(lengths.sum())
    totals["short"] += int(np.sum(lengths < max_seq_length / 2))
    totals["records"] += lengths.size
  return {name: totals[name] / totals["records"] for name in ("padded", "packed", "real", "short")}


def record_positions_table() -> list:
  directory = tempfile.mkdtemp(prefix="bench_pretraining_positions_")
  lines = ["Positions per pretraining record of %s (create_pretraining_data.py defaults, "
           "batch %d):" % (os.path.basename(FLAGS.corpus), FLAGS.batch_size),
           "| max_seq_length | padded | packed | real tokens | records under half the length | "
           "padded / packed |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
  for length in map(int, FLAGS.position_lengths):
    positions = record_positions(directory, length)
    lines.append("| %d | %.1f | %.1f | %.1f | %.1f%% | %.3fx |" % (
        length, positions["padded"], positions["packed"], positions["real"],
        100 * positions["short"], positions["padded"] / positions["packed"]))
  shutil.rmtree(directory)
  return lines


def main(_):
  if FLAGS.record_positions:
    print("\n".join(record_positions_table()))
    return
  logging.set_verbosity(logging.WARNING)
  print("\n".join(speed_table()))
  if FLAGS.proof:
    logging.set_verbosity(logging.INFO)
    print()
    print("\n".join(proof_table()))


if __name__ == "__main__":
  app.run(main)
