"""Tests for pretraining.py and run_pretraining.py on small generated TFRecords.

The records are written here with tf.train.Example (the original's feature names), from a corpus
that is trivially learnable: segment A repeats one token, segment B repeats the same token when it
is the next sentence and another token when it is random, so a masked token is a copy of its
neighbours and the next-sentence label is whether the two segments' tokens agree.
"""
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

from absl import flags
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.util import event_pb2  # pylint: disable=g-import-not-at-top

import checkpoints  # pylint: disable=g-import-not-at-top
import errors  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import pretraining  # pylint: disable=g-import-not-at-top
import run_pretraining  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.slow

FLAGS = flags.FLAGS
run_pretraining.define_flags()

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ_LENGTH = 16
MAX_PREDICTIONS = 4
VOCAB_SIZE = 24
FIRST_WORD = 4  # 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK]
CONFIG = dict(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, max_position_embeddings=SEQ_LENGTH,
              type_vocab_size=2, initializer_range=0.02)


def make_example(rng, seq_length=SEQ_LENGTH, max_predictions=MAX_PREDICTIONS, words=6):
  """One record: [CLS] a*words [SEP] b*(words-1) [SEP] pad, 3 masked positions (the rest padding
  predictions)."""
  word_a = rng.randint(FIRST_WORD, VOCAB_SIZE)
  is_random_next = int(rng.rand() < 0.5)
  word_b = word_a
  while is_random_next and word_b == word_a:
    word_b = rng.randint(FIRST_WORD, VOCAB_SIZE)
  ids = [1] + [word_a] * words + [2] + [word_b] * (words - 1) + [2]
  segment_ids = [0] * (words + 2) + [1] * words
  positions = sorted(rng.choice(np.arange(1, words + 1), 2, replace=False).tolist() +
                     [int(rng.randint(words + 2, 2 * words + 1))])
  masked_ids = [ids[p] for p in positions]
  for p in positions:
    ids[p] = 3
  pad = seq_length - len(ids)
  pad_predictions = max_predictions - len(positions)

  def int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  return tf.train.Example(features=tf.train.Features(feature={
      "input_ids": int_feature(ids + [0] * pad),
      "input_mask": int_feature([1] * len(ids) + [0] * pad),
      "segment_ids": int_feature(segment_ids + [0] * pad),
      "masked_lm_positions": int_feature(positions + [0] * pad_predictions),
      "masked_lm_ids": int_feature(masked_ids + [0] * pad_predictions),
      "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
          value=[1.0] * len(positions) + [0.0] * pad_predictions)),
      "next_sentence_labels": int_feature([is_random_next]),
  }))


def write_records(path, count, seed=0, **lengths):
  rng = np.random.RandomState(seed)
  with tf.io.TFRecordWriter(str(path)) as writer:
    for _ in range(count):
      writer.write(make_example(rng, **lengths).SerializeToString())
  return str(path)


def write_config(path):
  path.write_text(modeling.BertConfig.from_dict(CONFIG).to_json_string())
  return str(path)


def test_bad_globs_give_clear_errors(tmp_path):
  with pytest.raises(ValueError, match=r"`input_file`: '.*nothing\*\.tfrecord' matches no files"):
    pretraining.expand_input_files(str(tmp_path / "nothing*.tfrecord"))
  with pytest.raises(ValueError, match="`input_file` is required"):
    pretraining.expand_input_files(" , ")
  first = write_records(tmp_path / "b.tfrecord", 1)
  second = write_records(tmp_path / "a.tfrecord", 1)
  assert pretraining.expand_input_files("%s/*.tfrecord,%s" % (tmp_path, first)) == [
      second, first, first]


def test_mismatched_records_name_the_flag(tmp_path):
  path = write_records(tmp_path / "data.tfrecord", 2)
  with pytest.raises(ValueError, match=r"data\.tfrecord has 16 values for feature input_ids but "
                     r"`max_seq_length`=32 expects 32"):
    pretraining.check_first_record(path, 32, MAX_PREDICTIONS)
  with pytest.raises(ValueError, match=r"masked_lm_positions but `max_predictions_per_seq`=5"):
    pretraining.check_first_record(path, SEQ_LENGTH, 5)
  pretraining.check_first_record(path, SEQ_LENGTH, MAX_PREDICTIONS)
  # A classifier's cached records (run_classifier's train.tf_record) are another kind of record:
  # said so, not as a flag to change.
  classifier_records = str(tmp_path / "train.tf_record")
  with tf.io.TFRecordWriter(classifier_records) as writer:
    writer.write(tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * SEQ_LENGTH))
        for name in ("input_ids", "input_mask", "segment_ids")})).SerializeToString())
  with pytest.raises(ValueError, match=r"train\.tf_record has no feature masked_lm_positions "
                     r"\(it holds input_ids, input_mask, segment_ids\): it is not a pretraining "
                     r"record"):
    pretraining.check_first_record(classifier_records, SEQ_LENGTH, MAX_PREDICTIONS)
  # A file whose later records disagree fails when a batch holding them is decoded. The stream
  # is shuffled across repeats (its order depends on the global seed an earlier test may have
  # set), so the first batch may hold the good record twice: read several.
  mixed = str(tmp_path / "mixed.tfrecord")
  with tf.io.TFRecordWriter(mixed) as writer:
    rng = np.random.RandomState(0)
    writer.write(make_example(rng).SerializeToString())
    writer.write(make_example(rng, seq_length=20).SerializeToString())
  pretraining.check_first_record(mixed, SEQ_LENGTH, MAX_PREDICTIONS)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"mixed\.tfrecord has 20 values .*"
                     r"`max_seq_length`=16"):
    list(pretraining.train_dataset([mixed], 2, 0, SEQ_LENGTH, MAX_PREDICTIONS).take(20))


def numpy_eval_metrics(model, records, batch_size):
  """The original's eval metrics over full batches, computed from the logits with NumPy."""
  count = len(records) // batch_size * batch_size
  features = {name: np.stack([r[name] for r in records[:count]]) for name in records[0]}
  outputs = model(features)
  mlm_logits = outputs["masked_lm_logits"].numpy().astype(np.float64)
  nsp_logits = outputs["next_sentence_logits"].numpy().astype(np.float64)

  def log_softmax(x):
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))

  ids, weights = features["masked_lm_ids"], features["masked_lm_weights"]
  labels = features["next_sentence_labels"][:, 0]
  mlm_loss = -np.take_along_axis(log_softmax(mlm_logits), ids[..., None], -1)[..., 0]
  nsp_loss = -np.take_along_axis(log_softmax(nsp_logits), labels[:, None], -1)[:, 0]
  batch_losses = []
  for start in range(0, count, batch_size):
    rows = slice(start, start + batch_size)
    batch_losses.append(np.sum(mlm_loss[rows] * weights[rows]) / (np.sum(weights[rows]) + 1e-5) +
                        np.mean(nsp_loss[rows]))
  return {
      "loss": np.mean(batch_losses),
      "masked_lm_accuracy": np.sum((mlm_logits.argmax(-1) == ids) * weights) / np.sum(weights),
      "masked_lm_loss": np.sum(mlm_loss * weights) / np.sum(weights),
      "next_sentence_accuracy": np.mean(nsp_logits.argmax(-1) == labels),
      "next_sentence_loss": np.mean(nsp_loss),
  }


def read_eval_results(path):
  results = {}
  for line in open(path):
    key, value = line.strip().split(" = ")
    results[key] = float(value)
  return results


def test_learns_a_trivial_corpus_and_eval_results_match_numpy(tmp_path):
  """Tiny BERT from scratch: MLM accuracy far above the most-frequent-token baseline and
  next-sentence accuracy far above chance, in seconds."""
  train_file = write_records(tmp_path / "train.tfrecord", 512, seed=1)
  eval_file = write_records(tmp_path / "eval.tfrecord", 100, seed=2)
  bert_config = modeling.BertConfig.from_dict(CONFIG)
  strategy = tf.distribute.get_strategy()
  output_dir = str(tmp_path / "out")
  # The untrained model's baseline (evaluation without a checkpoint is refused).
  before = pretraining.run_evaluation(strategy, bert_config, [eval_file], output_dir, None, 32, 3,
                                      SEQ_LENGTH, MAX_PREDICTIONS,
                                      model=pretraining.build_model(bert_config), global_step=0)
  # 300 steps: next-sentence accuracy 0.97-0.99 on three corpora (150 gave 0.85-0.98, too near 0.9).
  config = training_loop.TrainConfig(output_dir=output_dir, num_train_steps=300, num_warmup_steps=20,
                                learning_rate=3e-3, train_batch_size=32,
                                save_checkpoints_steps=300, iterations_per_loop=100)
  result = pretraining.run_training(strategy, bert_config, [train_file], config, SEQ_LENGTH,
                                    MAX_PREDICTIONS)
  after = pretraining.run_evaluation(strategy, bert_config, [eval_file], output_dir, None, 32, 3,
                                     SEQ_LENGTH, MAX_PREDICTIONS)
  assert after["global_step"] == 300
  # 20 words: always predicting one word is right ~5% of the time.
  assert before["masked_lm_accuracy"] < 0.2
  assert after["masked_lm_accuracy"] > 0.9
  assert after["masked_lm_loss"] < 0.5 * before["masked_lm_loss"]
  # The next-sentence label is whether the two segments repeat the same word: learnable too.
  assert after["next_sentence_accuracy"] > 0.9
  assert after["loss"] < before["loss"]
  # eval_results.txt agrees with the metrics recomputed from the logits with NumPy.
  written = read_eval_results(os.path.join(output_dir, "eval_results.txt"))
  assert set(written) == {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                          "next_sentence_accuracy", "next_sentence_loss"}
  records = list(pretraining.eval_dataset([eval_file], SEQ_LENGTH, MAX_PREDICTIONS)
                 .as_numpy_iterator())
  expected = numpy_eval_metrics(result.model, records, 32)
  for name, value in expected.items():
    np.testing.assert_allclose(written[name], value, rtol=1e-4, err_msg=name)


def _cli(tmp_path, *extra):
  """run_pretraining.py's command line on tmp_path's records and config."""
  return [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
          "--input_file=%s" % (tmp_path / "data*.tfrecord"),
          "--bert_config_file=%s" % (tmp_path / "bert_config.json"),
          "--output_dir=%s" % (tmp_path / "out"),
          "--max_seq_length=%d" % SEQ_LENGTH, "--max_predictions_per_seq=%d" % MAX_PREDICTIONS,
          "--train_batch_size=8", "--eval_batch_size=8", "--max_eval_steps=2",
          "--num_train_steps=400", "--num_warmup_steps=10", "--learning_rate=1e-3",
          "--save_checkpoints_steps=10", "--iterations_per_loop=10", "--keep_checkpoint_max=3"
          ] + list(extra)


def run_main(tmp_path, *extra) -> None:
  """Runs run_pretraining's main in this process with _cli's flags (its log: caplog at INFO).

  Usage errors reach the caller as errors.FlagError; the dynamic-masking test checks once, on the
  real command line, that run_script prints one as one line.
  """
  FLAGS.unparse_flags()
  # Flags of fine-tuning scripts that other tests of this process defined keep their defaults
  # here; run_pretraining.py's own process has no --pack_sequences (pretraining cannot pack).
  not_packed = ["--pack_sequences=false"] if "pack_sequences" in FLAGS else []
  FLAGS(["run_pretraining.py"] + _cli(tmp_path, *extra)[2:] + not_packed)
  run_pretraining.main([])


class _LogLines(logging.Handler):
  """The log lines of a run, for a module fixture (caplog is per test)."""

  def __init__(self):
    super().__init__(logging.INFO)
    self.lines = []

  def emit(self, record):
    self.lines.append(record.getMessage())


def run_main_logged(tmp_path, *extra) -> str:
  """run_main, returning what it logged (at INFO) as caplog.text would hold it."""
  handler = _LogLines()
  logger = logging.getLogger("absl")
  level = logger.level
  logger.addHandler(handler)
  try:
    run_main(tmp_path, *extra)
  finally:
    logger.removeHandler(handler)
    logger.setLevel(level)
  return "\n".join(handler.lines)


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory):
  """(directory, log) of one 10-step run of _cli's settings in directory/out, on data-0.tfrecord
  (seed 6) and bert_config.json there: the gradient-accumulation test's run with whole batches and
  the trained run the changed-settings test resumes (a copy). Read only."""
  tmp_path = tmp_path_factory.mktemp("ten_steps")
  write_records(tmp_path / "data-0.tfrecord", 64, seed=6)
  write_config(tmp_path / "bert_config.json")
  log = run_main_logged(tmp_path, "--do_train", "--num_train_steps=10",
                        "--gradient_accumulation_steps=1")
  return tmp_path, log


def _copy_run(source, tmp_path):
  """source's records, config and out/ (its paths are relative: checkpoint, settings) in
  tmp_path, for a test that goes on with the run."""
  for path in source.iterdir():
    if path.is_dir():
      shutil.copytree(path, tmp_path / path.name)
    else:
      shutil.copy(path, tmp_path / path.name)


def test_cli_resumes_after_sigkill_and_stops_at_num_train_steps(tmp_path, caplog):
  write_records(tmp_path / "data-0.tfrecord", 64, seed=3)
  write_records(tmp_path / "data-1.tfrecord", 64, seed=4)
  write_config(tmp_path / "bert_config.json")
  output_dir = tmp_path / "out"
  process = subprocess.Popen(_cli(tmp_path, "--do_train"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 120
  while not (output_dir / "checkpoint").exists():
    assert process.poll() is None, process.stderr.read()[-3000:]
    assert time.time() < deadline, "no checkpoint within 120 s"
    time.sleep(0.02)
  process.send_signal(signal.SIGKILL)
  process.wait()
  killed_at = checkpoints.checkpoint_step(checkpoints.latest_checkpoint(str(output_dir)))
  assert 10 <= killed_at < 400, "the first run was not killed mid-run"

  caplog.set_level(logging.INFO)
  run_main(tmp_path, "--do_train", "--do_eval")
  assert "Resuming from %s" % (output_dir / "model.ckpt-") in caplog.text
  latest = checkpoints.latest_checkpoint(str(output_dir))
  assert latest == str(output_dir / "model.ckpt-400")
  assert checkpoints.checkpoint_step(latest) == 400
  state = tf.train.get_checkpoint_state(str(output_dir))
  assert len(state.all_model_checkpoint_paths) == 3
  for prefix in state.all_model_checkpoint_paths:
    model = pretraining.build_model(modeling.BertConfig.from_dict(CONFIG))
    report = checkpoints.init_from_checkpoint(model, prefix)
    assert not report.missing and not report.unused
  results = read_eval_results(str(output_dir / "eval_results.txt"))
  assert results["global_step"] == 400
  assert 0.0 <= results["masked_lm_accuracy"] <= 1.0 and results["loss"] > 0


def _logged_losses(output_dir, tag="loss") -> dict:
  """Step -> training loss (or another scalar) from the TensorBoard event files the loop writes."""
  losses = {}
  for event_file in tf.io.gfile.glob(os.path.join(output_dir, "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(event_file):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.tag == tag:
          losses[event.step] = float(tf.make_ndarray(value.tensor))
  return losses


def _write_vocab(path):
  """A vocab.txt of CONFIG's 24 ids for --dynamic_masking ([MASK] at 3, as the records have it)."""
  tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"] + [
      "word%d" % i for i in range(FIRST_WORD + 1, VOCAB_SIZE)]
  path.write_text("\n".join(tokens) + "\n")
  return str(path)


# LAMB moves each weight matrix by ~learning_rate times its norm per step: rates ~10x Adam's.
LAMB_FLAGS = ("--optimizer=lamb", "--learning_rate=5e-2", "--num_warmup_steps=2")


@pytest.fixture(scope="module")
def lamb_and_dynamic_masking(tmp_path_factory):
  """(directory, log) of one 20-step --do_train --do_eval run with --optimizer=lamb and
  --dynamic_masking in directory/out, on data-0.tfrecord (seed 5), bert_config.json and
  vocab.txt there. The lamb test reads its optimizer and slots, the dynamic-masking test its
  masking, losses and evaluation: one run shows both (each flag changes what is trained, neither
  what the other's checks read). Read only."""
  tmp_path = tmp_path_factory.mktemp("lamb_and_dynamic_masking")
  write_records(tmp_path / "data-0.tfrecord", 64, seed=5)
  write_config(tmp_path / "bert_config.json")
  vocab_file = _write_vocab(tmp_path / "vocab.txt")
  log = run_main_logged(tmp_path, "--do_train", "--do_eval", "--num_train_steps=20", *LAMB_FLAGS,
                        "--dynamic_masking", "--vocab_file=%s" % vocab_file,
                        "--masked_lm_prob=0.3")
  return tmp_path, log


def test_cli_lamb_trains_and_saves_adam_slots(lamb_and_dynamic_masking):
  """--optimizer=lamb end to end (its exact resume from these slots: test_training_loop)."""
  run_dir, log = lamb_and_dynamic_masking
  output_dir = run_dir / "out"
  assert "Optimizer: lamb (Lamb)" in log and "`optimizer`=adamw" not in log
  losses = _logged_losses(str(output_dir))
  assert sorted(losses) == [10, 20] and losses[20] < losses[10]
  # Every trainable variable's LAMB moments are in the checkpoint under the Adam slot names, and
  # the checkpoint initializes a fresh model like any other.
  reader = tf.train.load_checkpoint(str(output_dir / "model.ckpt-20"))
  shapes = reader.get_variable_to_shape_map()
  model = pretraining.build_model(modeling.BertConfig.from_dict(CONFIG))
  for name, variable in checkpoints.checkpoint_variables(model).items():
    if variable.trainable:
      assert shapes[name + "/adam_m"] == shapes[name + "/adam_v"] == list(variable.shape), name
  assert np.any(reader.get_tensor("bert/encoder/layer_1/output/dense/kernel/adam_v") != 0)
  report = checkpoints.init_from_checkpoint(model, str(output_dir / "model.ckpt-20"))
  assert not report.missing and not report.unused


def test_cli_rejects_mismatched_records(tmp_path):
  write_records(tmp_path / "data.tfrecord", 4)
  write_config(tmp_path / "bert_config.json")
  with pytest.raises(ValueError, match="`max_predictions_per_seq`=6 expects 6"):
    run_main(tmp_path, "--do_eval", "--max_predictions_per_seq=6")


def test_cli_dynamic_masking_trains_on_the_records_with_new_masks(tmp_path,
                                                                  lamb_and_dynamic_masking):
  """--dynamic_masking end to end (its masking statistics: test_pretraining.py)."""
  write_records(tmp_path / "data-0.tfrecord", 64, seed=6)
  write_config(tmp_path / "bert_config.json")
  _write_vocab(tmp_path / "vocab.txt")
  missing_vocab = subprocess.run(_cli(tmp_path, "--do_train", "--dynamic_masking"),
                                 capture_output=True, text=True, timeout=120)
  assert missing_vocab.returncode != 0
  assert "--dynamic_masking needs --vocab_file" in missing_vocab.stderr
  assert "Traceback" not in missing_vocab.stderr  # A usage error, not a crash quoting the line.
  # The run with --vocab_file (and --optimizer=lamb: the fixture's run is the lamb test's too).
  run_dir, log = lamb_and_dynamic_masking
  assert "Dynamic masking: masked_lm_prob=0.3, max_predictions_per_seq=4" in log
  losses = _logged_losses(str(run_dir / "out"))
  assert sorted(losses) == [10, 20] and losses[20] < losses[10]
  assert read_eval_results(str(run_dir / "out" / "eval_results.txt"))["global_step"] == 20
  # The run is recorded as masked dynamically: going on with the records' masks is another run.
  resumed = tmp_path / "resumed"
  resumed.mkdir()
  _copy_run(run_dir, resumed)
  with pytest.raises(errors.TrainingError, match=r"dynamic_masking.?: recorded True, now False"):
    run_main(resumed, "--do_train", "--num_train_steps=30", *LAMB_FLAGS)


# Phase 2 (issue 20): 20 steps at length 16, then 20 at length 32 whose records fill 30 positions.
PHASE2_LENGTH, PHASE2_PREDICTIONS, PHASE2_WORDS = 32, 6, 14
PHASE2_CONFIG = dict(CONFIG, max_position_embeddings=PHASE2_LENGTH)


def _phase1_config(output_dir):
  return training_loop.TrainConfig(
      output_dir=str(output_dir), num_train_steps=20, num_warmup_steps=5, learning_rate=1e-3,
      train_batch_size=8, save_checkpoints_steps=10, iterations_per_loop=10, keep_checkpoint_max=10)


def _two_phases(output_dir, phase1_file, phase2_file, phase2_learning_rate=5e-4):
  """Phase 1 then phase 2 in one process, as run_pretraining.py's main runs them."""
  bert_config = modeling.BertConfig.from_dict(PHASE2_CONFIG)
  strategy = tf.distribute.get_strategy()
  config = _phase1_config(output_dir)
  pretraining.run_training(strategy, bert_config, [phase1_file], config, SEQ_LENGTH,
                           MAX_PREDICTIONS)
  return pretraining.run_training(
      strategy, bert_config, [phase2_file],
      pretraining.phase2_config(config, 20, learning_rate=phase2_learning_rate,
                                num_warmup_steps=4, train_batch_size=4),
      PHASE2_LENGTH, PHASE2_PREDICTIONS)


def _checkpoint_tensors(prefix) -> dict:
  reader = tf.train.load_checkpoint(str(prefix))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _copy_checkpoint(source_dir, step, output_dir):
  """output_dir as a run killed right after writing model.ckpt-<step> leaves it (with the
  settings both phases recorded)."""
  os.makedirs(output_dir)
  for path in tf.io.gfile.glob(str(source_dir / ("model.ckpt-%d.*" % step))) + [
      str(source_dir / training_loop.SETTINGS_FILE)]:
    tf.io.gfile.copy(path, os.path.join(output_dir, os.path.basename(path)))
  with open(os.path.join(output_dir, "checkpoint"), "w") as f:  # TF's CheckpointState text format.
    f.write('model_checkpoint_path: "model.ckpt-%d"\n' % step)
    f.write('all_model_checkpoint_paths: "model.ckpt-%d"\n' % step)


def test_phase2_continues_step_and_optimizer_state_at_its_length_and_resumes_in_either_phase(
    tmp_path):
  phase1_file = write_records(tmp_path / "phase1.tfrecord", 64, seed=7)
  phase2_file = write_records(tmp_path / "phase2.tfrecord", 32, seed=8, seq_length=PHASE2_LENGTH,
                              max_predictions=PHASE2_PREDICTIONS, words=PHASE2_WORDS)
  one_job = tmp_path / "one_job"
  result = _two_phases(one_job, phase1_file, phase2_file)
  assert result.global_step == 40
  assert checkpoints.latest_checkpoint(str(one_job)) == str(one_job / "model.ckpt-40")
  at = {step: _checkpoint_tensors(one_job / ("model.ckpt-%d" % step)) for step in (20, 30, 40)}
  assert [int(at[step]["global_step"]) for step in (20, 30, 40)] == [20, 30, 40]
  # Phase 2's batches are 32 long: its records' 30 tokens give positions 16-29 gradients, which
  # phase 1's 14-token records at length 16 never do.
  slot = "bert/embeddings/position_embeddings/adam_v"
  assert np.all(at[20][slot][:14] > 0) and np.all(at[20][slot][SEQ_LENGTH:] == 0)
  assert np.all(at[40][slot][SEQ_LENGTH:2 * PHASE2_WORDS + 2] > 0)
  # The optimizer's moments carry over: Adam's v decays by beta2=0.999 per step and only grows by
  # squared gradients, so 10 phase-2 steps keep at least 0.999**10 of phase 1's (a reset slot
  # would hold 10 steps of 0.001 * g**2 alone).
  for name in at[20]:
    if name.endswith("/adam_v"):
      assert np.all(at[30][name] >= 0.999 ** 10 * at[20][name] * (1 - 1e-5)), name
  # Phase 2's own schedule (peak 5e-4, 4 warmup steps, decay over its 20 steps): the rate the
  # next update uses, logged after steps 20 (phase 1's end: 0), 30 and 40.
  rates = _logged_losses(str(one_job), "learning_rate")
  assert rates[20] == pytest.approx(0.0) and rates[30] == pytest.approx(2.5e-4)
  assert rates[40] == pytest.approx(0.0)
  # Killed in phase 2 (after step 30) or in phase 1 (after step 10): the rerun of the same job
  # ends with the uninterrupted job's weights and slots.
  for step in (30, 10):
    killed = tmp_path / ("killed_after_%d" % step)
    _copy_checkpoint(one_job, step, killed)
    assert _two_phases(killed, phase1_file, phase2_file).global_step == 40
    resumed = _checkpoint_tensors(killed / "model.ckpt-40")
    assert set(resumed) == set(at[40])
    for name, value in at[40].items():
      np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-7,
                                 err_msg="%s after a kill at step %d" % (name, step))
  # Each phase's settings are recorded and checked on its own: a resume in phase 2 with another
  # phase-2 learning rate is refused (phase 1, finished, has the same settings).
  changed = tmp_path / "changed_in_phase2"
  _copy_checkpoint(one_job, 30, changed)
  with pytest.raises(errors.TrainingError, match=(
      r"\(recorded in .*training_settings.json for the phase that starts at step 20\): "
      r"`learning_rate`: recorded 0.0005, now 0.001\. ")):
    _two_phases(changed, phase1_file, phase2_file, phase2_learning_rate=1e-3)


def test_cli_phase2_trains_both_phases_and_checks_its_input_before_phase1(tmp_path, caplog):
  write_records(tmp_path / "data-0.tfrecord", 64, seed=9)
  write_records(tmp_path / "phase2.tfrecord", 32, seed=10, seq_length=PHASE2_LENGTH,
                max_predictions=PHASE2_PREDICTIONS, words=PHASE2_WORDS)
  (tmp_path / "bert_config.json").write_text(
      modeling.BertConfig.from_dict(PHASE2_CONFIG).to_json_string())
  phase2 = ["--phase2_input_file=%s" % (tmp_path / "phase2.tfrecord"), "--phase2_steps=10",
            "--phase2_max_seq_length=%d" % PHASE2_LENGTH, "--phase2_learning_rate=5e-4"]
  with pytest.raises(errors.FlagError, match="`phase2_max_predictions_per_seq`=7 expects 7"):
    run_main(tmp_path, "--do_train", "--num_train_steps=10", *phase2,
             "--phase2_max_predictions_per_seq=7")
  assert not (tmp_path / "out" / "checkpoint").exists()  # Found before phase 1 trained.
  caplog.set_level(logging.INFO)
  run_main(tmp_path, "--do_train", "--do_eval", "--num_train_steps=10", *phase2,
           "--phase2_max_predictions_per_seq=%d" % PHASE2_PREDICTIONS)
  assert "Phase 2: steps 10 to 20 at max_seq_length 32, batch 8, learning rate 0.0005" in (
      caplog.text)
  assert checkpoints.latest_checkpoint(str(tmp_path / "out")) == str(tmp_path / "out" /
                                                                  "model.ckpt-20")
  # --do_eval reads --input_file at --max_seq_length with the final model.
  assert read_eval_results(str(tmp_path / "out" / "eval_results.txt"))["global_step"] == 20


def test_cli_resume_with_changed_settings_is_a_one_line_error_but_evaluation_is_not_blocked(
    tmp_path, ten_steps):
  _copy_run(ten_steps[0], tmp_path)  # Trained with --num_train_steps=10 in tmp_path/out.
  changed = ["--learning_rate=2e-3", "--train_batch_size=4"]
  run = subprocess.run(_cli(tmp_path, "--do_train", "--num_train_steps=10", *changed),
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 1 and "Traceback" not in run.stderr
  assert run.stderr.strip().splitlines()[-1] == (
      "run_pretraining.py: error: --output_dir=%s was trained with other settings (recorded in "
      "%s): --learning_rate: recorded 0.001, now 0.002; --train_batch_size: recorded 8, now 4. "
      "Resume with the recorded values, use another --output_dir, or pass "
      "--allow_changed_settings to continue this run with the new ones" % (
          tmp_path / "out", tmp_path / "out" / training_loop.SETTINGS_FILE))
  # Evaluation alone trains nothing: the training flags are not checked.
  run_main(tmp_path, "--do_eval", *changed)
  results = (tmp_path / "out" / "eval_results.txt").read_text()
  with open(tmp_path / "out" / training_loop.SETTINGS_FILE) as f:  # A fine-tuning run is refused.
    assert [phase["task"] for phase in json.load(f)["phases"].values()] == ["pretraining"]
  assert read_eval_results(str(tmp_path / "out" / "eval_results.txt"))["global_step"] == 10
  # But the model is the run's: another activation in the config is refused, its results kept.
  config = json.loads((tmp_path / "bert_config.json").read_text())
  (tmp_path / "relu.json").write_text(json.dumps(dict(config, hidden_act="relu")))
  run = subprocess.run(_cli(tmp_path, "--do_eval") + ["--bert_config_file=%s" %
                                                      (tmp_path / "relu.json")],
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 1 and "Traceback" not in run.stderr
  assert run.stderr.strip().splitlines()[-1].startswith(
      "run_pretraining.py: error: the model in --output_dir=%s was trained with other settings "
      "(recorded in %s): --bert_config_file (hidden_act): recorded gelu, now relu" % (
          tmp_path / "out", training_loop.SETTINGS_FILE)), run.stderr[-2000:]
  assert (tmp_path / "out" / "eval_results.txt").read_text() == results


def test_cli_gradient_accumulation_trains_as_the_whole_batch(tmp_path, caplog, ten_steps):
  """4 micro-batches of 2 per update train as batches of 8: the same losses and weights (the MLM
  loss's normalizer, the number of masked positions, differs between micro-batches)."""
  # The run with whole batches (--gradient_accumulation_steps=1) is ten_steps's, on its records.
  whole_batches, whole_batches_log = ten_steps
  output_dirs = {1: whole_batches / "out", 4: tmp_path / "out4"}
  shutil.copy(whole_batches / "data-0.tfrecord", tmp_path / "data-0.tfrecord")
  write_config(tmp_path / "bert_config.json")
  caplog.set_level(logging.INFO)
  run_main(tmp_path, "--do_train", "--num_train_steps=10", "--output_dir=%s" % output_dirs[4],
           "--gradient_accumulation_steps=4")
  assert "global batch 8 (1 micro-batches)" in whole_batches_log
  assert "global batch 8 (4 micro-batches)" in caplog.text
  weights = {steps: tf.train.load_checkpoint(str(output_dir / "model.ckpt-10"))
             for steps, output_dir in output_dirs.items()}
  np.testing.assert_allclose(_logged_losses(str(output_dirs[4]))[10],
                             _logged_losses(str(output_dirs[1]))[10], rtol=1e-5)
  for name in weights[1].get_variable_to_shape_map():
    np.testing.assert_allclose(weights[4].get_tensor(name), weights[1].get_tensor(name),
                               rtol=0, atol=1e-5, err_msg=name)
