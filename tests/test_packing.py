"""Packed rows (issue 42): several sequences share a row with the padded model's math.

Dropout is off throughout (the config's rates are 0 and the task heads' own dropout is removed),
so a packed sequence must give what its padded row gives, up to float rounding: outputs, a
training step of each task (loss, gradients, the original's AdamWeightDecay update), several
steps of the training loop with and without gradient accumulation, and two replicas. This file
also runs as the MirroredStrategy worker of its subprocess test.
"""
import json
import os
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import classifier
import classifier_data
import conftest
import fine_tuning
import modeling
import multiple_choice
import optimization
import packing
import tagging
import training_loop

pytestmark = pytest.mark.slow

MAX_SEQ_LENGTH = 32
VOCAB_SIZE = 40
CONFIG = modeling.BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=MAX_SEQ_LENGTH, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
NUM_TAGS = 5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def padded_features(lengths, seed, num_choices=None, seq_length=MAX_SEQ_LENGTH):
  """Random padded features of the given sequence lengths ([B] or [B, choices]): ids, mask,
  segment ids (the second half of each sequence is segment 1), classifier or multiple-choice
  labels, NER tags on every other token (-1 elsewhere), `is_real_example`."""
  rng = np.random.default_rng(seed)
  lengths = np.asarray(lengths)
  shape = lengths.shape + (seq_length,)
  positions = np.arange(seq_length)
  mask = (positions < lengths[..., np.newaxis]).astype(np.int32)
  features = {
      "input_ids": rng.integers(5, VOCAB_SIZE, size=shape, dtype=np.int32) * mask,
      "input_mask": mask,
      "segment_ids": (positions >= lengths[..., np.newaxis] // 2).astype(np.int32) * mask,
      "is_real_example": np.ones(len(lengths), np.int32),
  }
  if num_choices:
    features["choice_mask"] = (lengths > 0).astype(np.int32)
    features["label_ids"] = rng.integers(0, 2, size=len(lengths), dtype=np.int32)
  return features


def tagger_features(lengths, seed):
  features = padded_features(lengths, seed)
  rng = np.random.default_rng(seed + 1)
  tags = rng.integers(0, NUM_TAGS, size=features["input_mask"].shape, dtype=np.int32)
  every_other = (np.arange(MAX_SEQ_LENGTH) % 2 == 1) & (features["input_mask"] != 0)
  features["label_ids"] = np.where(every_other, tags, tagging.IGNORE_LABEL).astype(np.int32)
  return features


def classifier_features(lengths, seed):
  features = padded_features(lengths, seed)
  features["label_ids"] = np.random.default_rng(seed + 2).integers(0, 2, len(lengths),
                                                                    dtype=np.int32)
  return features


def as_tensors(features):
  return {name: tf.constant(value) for name, value in features.items()}


def packed_tensors(features, num_groups=1):
  """`features` packed into `num_groups` groups and merged as one replica reads them."""
  return packing.merge_groups(packing.pack_batch(as_tensors(features), num_groups))


# ------------------------------------------------------------------------------------------------
# The packer.


def test_first_fit_decreasing_by_hand():
  # Longest first: 7 opens bin 0 (room 1), 5 bin 1 (room 3), 4 bin 2 (room 4), 3 fills bin 1,
  # 2 goes to bin 2 (room 2), 1 fills bin 0.
  assert packing.first_fit_decreasing([5, 3, 7, 2, 4, 1], 8) == [[2, 5], [0, 1], [4, 3]]
  # Equal lengths keep their input order; an empty item takes no room.
  assert packing.first_fit_decreasing([4, 4, 0, 4], 8) == [[0, 1, 2], [3]]
  with pytest.raises(ValueError, match="does not fit"):
    packing.first_fit_decreasing([9], 8)


def test_pack_arrays_layout_by_hand():
  features = padded_features([3, 5, 2, 1], seed=0, seq_length=8)
  features["label_ids"] = np.array([10, 11, 12, 13], np.int32)
  packed = packing.pack_arrays(features, num_groups=1)
  # Buckets of 8 are 4 and 8; the longest (5) needs 8. FFD: row 0 = example 1 (5) + example 0
  # (3); row 1 = example 2 (2) + example 3 (1), then padding.
  np.testing.assert_array_equal(packed["position_ids"][0],
                                [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 0, 0, 0, 0, 0, 0]])
  np.testing.assert_array_equal(packed["packed_sequence_ids"][0],
                                [[1, 1, 1, 1, 1, 2, 2, 2], [1, 1, 2, 0, 0, 0, 0, 0]])
  np.testing.assert_array_equal(packed["sequence_starts"][0], [[0, 5], [0, 0], [1, 0], [1, 2]])
  ids = features["input_ids"]
  np.testing.assert_array_equal(packed["input_ids"][0, 0], np.concatenate([ids[1, :5], ids[0, :3]]))
  np.testing.assert_array_equal(packed["input_ids"][0, 1, :3], np.concatenate([ids[2, :2],
                                                                               ids[3, :1]]))
  np.testing.assert_array_equal(packed["input_mask"][0], (packed["packed_sequence_ids"][0] > 0))
  np.testing.assert_array_equal(packed["segment_ids"][0, 0], [0, 0, 1, 1, 1, 0, 1, 1])
  np.testing.assert_array_equal(packed["label_ids"], [[10, 11, 12, 13]])


def pack_request(features):
  """`packing.pack_request` of numpy features, as numpy."""
  packed = packing.pack_request(as_tensors(features))
  return {name: value.numpy() for name, value in packed.items()}


def test_the_in_graph_packer_gives_the_rows_of_a_hand_packing():
  # Rows of T = 8, lengths 3, 5, 2, 6, 1, and a row whose mask ends in a hole (length 4 by its
  # last real token). FFD, longest first: 6 opens row 0 (room 2), 5 row 1 (room 3), 4 row 2
  # (room 4), 3 fills row 1, 2 fills row 0, 1 goes to row 2 (room 3).
  features = padded_features([3, 5, 2, 6, 1, 4], seed=1, seq_length=8)
  features["input_mask"][5, 2] = 0
  features["choice_mask"] = np.arange(6, dtype=np.int32)  # Per example: passed on as it is.
  packed = pack_request(features)
  expected_starts = [[1, 5], [1, 0], [0, 6], [0, 0], [2, 4], [2, 0]]
  np.testing.assert_array_equal(packed["sequence_starts"], expected_starts)
  np.testing.assert_array_equal(packed["position_ids"], [[0, 1, 2, 3, 4, 5, 0, 1],
                                                         [0, 1, 2, 3, 4, 0, 1, 2],
                                                         [0, 1, 2, 3, 0, 0, 0, 0]])
  np.testing.assert_array_equal(packed["packed_sequence_ids"], [[1, 1, 1, 1, 1, 1, 2, 2],
                                                                [1, 1, 1, 1, 1, 2, 2, 2],
                                                                [1, 1, 1, 1, 2, 0, 0, 0]])
  expected = {name: np.zeros([3, 8], np.int32) for name in packing.PACKED_INPUTS}
  for sequence, (row, start) in enumerate(expected_starts):
    length = [3, 5, 2, 6, 1, 4][sequence]
    for name in packing.PACKED_INPUTS:
      expected[name][row, start:start + length] = features[name][sequence, :length]
  for name in packing.PACKED_INPUTS:
    np.testing.assert_array_equal(packed[name], expected[name], err_msg=name)
  assert packed["input_mask"][2, 2] == 0  # The hole stays a hole.
  np.testing.assert_array_equal(packed["choice_mask"], features["choice_mask"])


def test_the_in_graph_packer_packs_as_pack_arrays_at_the_same_width():
  features = padded_features([9, 30, 4, 17, 12, 1, 25, 8], seed=2)  # pack_arrays chooses 32.
  in_graph, numpy_packed = pack_request(features), packing.pack_arrays(features, 1)
  for name in packing.PACKED_INPUTS + (packing.POSITION_IDS, packing.SEQUENCE_IDS,
                                       packing.SEQUENCE_STARTS):
    np.testing.assert_array_equal(in_graph[name], numpy_packed[name][0], err_msg=name)


def test_the_in_graph_packer_packs_every_ending_of_rank_3_ids():
  lengths = [[3, 0, 5], [2, 6, 1]]  # Example 0's second ending is missing (no tokens).
  features = padded_features(lengths, seed=3, num_choices=3, seq_length=8)
  packed = pack_request(features)
  assert packed["sequence_starts"].shape == (2, 3, 2)
  np.testing.assert_array_equal(packed["sequence_starts"][0, 1], [0, 0])
  for example, ending in np.ndindex(2, 3):
    row, start = packed["sequence_starts"][example, ending]
    length = lengths[example][ending]
    np.testing.assert_array_equal(packed["input_ids"][row, start:start + length],
                                  features["input_ids"][example, ending, :length])
  assert packed["input_ids"].shape == (3, 8)  # 6, 5, 3, 2, 1 in rows of 8: three rows.


@pytest.mark.parametrize("lengths", [[], [5], [0]])
def test_the_in_graph_packer_gives_no_request_no_rows_and_one_its_own_row(lengths):
  features = padded_features(lengths, seed=4, seq_length=8)
  packed = pack_request(features)
  assert packed["input_ids"].shape == (len(lengths), 8)
  assert packed["sequence_starts"].shape == (len(lengths), 2)
  np.testing.assert_array_equal(packed["input_ids"], features["input_ids"])
  np.testing.assert_array_equal(packed["packed_sequence_ids"], features["input_mask"])
  np.testing.assert_array_equal(packed["position_ids"],
                                np.arange(8) * features["input_mask"])


def test_the_width_is_the_bucket_that_computes_fewest_positions():
  # Four sequences of 20: rows of 32 hold one each (4 x 32 = 128 positions), rows of 40 two
  # (2 x 40 = 80), rows of 64 three (2 x 64 = 128). So 40.
  assert packing.choose_width(np.array([20, 20, 20, 20]), 1, [4, 8, 32, 40, 64]) == 40
  # Groups pack separately; the fullest group sets the rows: two groups of two -> 2 x 1 x 40.
  assert packing.choose_width(np.array([20, 20, 20, 20]), 2, [32, 40, 64]) == 40


# ------------------------------------------------------------------------------------------------
# The model on packed rows.


@pytest.fixture(scope="module")
def bert():
  model = modeling.BertModel(CONFIG)
  model.build()
  return model


LENGTHS = [27, 3, 11, 1, 17, 8, 30, 5]


def test_every_packed_sequence_gives_its_padded_outputs(bert):
  features = classifier_features(LENGTHS, seed=1)
  padded = bert(as_tensors(features))
  packed = packed_tensors(features, num_groups=2)
  assert packed["input_ids"].shape[0] < len(LENGTHS)  # fewer rows than sequences
  outputs = bert(packed)
  np.testing.assert_allclose(outputs["pooled_output"], padded["pooled_output"], atol=1e-5)
  tokens = packing.unpack_tokens(outputs["sequence_output"], packed["sequence_starts"],
                                 packed["packed_sequence_ids"]).numpy()
  for index, length in enumerate(LENGTHS):
    np.testing.assert_allclose(tokens[index, :length], padded["sequence_output"][index, :length],
                               atol=1e-5)
    assert not tokens[index, length:].any()


def test_changing_one_sequence_of_a_row_changes_no_other_sequence(bert):
  features = classifier_features(LENGTHS, seed=2)
  packed = packed_tensors(features)
  starts = packed["sequence_starts"].numpy()
  # Example 1 (3 tokens) shares its row with others: change its tokens in place.
  row, start = starts[1]
  assert (packed["packed_sequence_ids"][row] > 0).numpy().sum() > 3
  changed = dict(packed, input_ids=tf.tensor_scatter_nd_update(
      packed["input_ids"], [[row, start + 1], [row, start + 2]], [7, 9]))
  before, after = bert(packed), bert(changed)
  others = [index for index in range(len(LENGTHS)) if index != 1]
  np.testing.assert_array_equal(tf.gather(after["pooled_output"], others),
                                tf.gather(before["pooled_output"], others))
  ids = packed["packed_sequence_ids"].numpy()
  # Every token of every other sequence (padding belongs to none).
  others_tokens = (ids > 0) & ~((ids == ids[row, start]) &
                                (np.arange(len(ids)) == row)[:, np.newaxis])
  np.testing.assert_array_equal(after["sequence_output"].numpy()[others_tokens],
                                before["sequence_output"].numpy()[others_tokens])
  assert np.abs(after["pooled_output"][1] - before["pooled_output"][1]).max() > 1e-4


# ------------------------------------------------------------------------------------------------
# One training step of each task: packed equals padded.


def without_head_dropout(model):
  model.dropout = None
  return model


def classifier_task(output_dir):
  return classifier.ClassifierTask(CONFIG, classifier_data.get_processor("sst-2"), None, None,
                                   output_dir, MAX_SEQ_LENGTH)


def tagger_task(output_dir):
  return tagging.TaggingTask(CONFIG, None, None, output_dir, MAX_SEQ_LENGTH,
                             tag_list=["t%d" % i for i in range(NUM_TAGS)])


def multiple_choice_task(output_dir):
  return multiple_choice.MultipleChoiceTask(CONFIG, None, None, output_dir, MAX_SEQ_LENGTH)


def choice_features(seed):
  # Four examples of three choices; the last example has only two.
  return padded_features([[9, 14, 6], [3, 20, 11], [25, 4, 7], [12, 5, 0]], seed, num_choices=3)


def one_step(task, features):
  """Loss, gradients and weights after one AdamWeightDecay update from a seeded model."""
  tf.keras.utils.set_random_seed(5)
  model = without_head_dropout(task.build_model())
  optimizer = optimization.create_optimizer(1e-4, num_train_steps=10, num_warmup_steps=0)
  with tf.GradientTape() as tape:
    loss, _ = task.loss(model, features, True)
  grads = tape.gradient(loss, model.trainable_variables)
  used = [(g, v) for g, v in zip(grads, model.trainable_variables) if g is not None]
  optimizer.apply([g for g, _ in used], [v for _, v in used])
  return (float(loss), [tf.convert_to_tensor(g).numpy() for g, _ in used],
          {v.path: v.numpy() for v in model.trainable_variables})


@pytest.mark.parametrize("make_task, make_features", [
    (classifier_task, lambda: classifier_features(LENGTHS, seed=3)),
    (tagger_task, lambda: tagger_features(LENGTHS, seed=4)),
    (multiple_choice_task, lambda: choice_features(seed=5)),
], ids=["classifier", "tagger", "multiple_choice"])
def test_a_packed_training_step_equals_the_padded_step(make_task, make_features, tmp_path):
  task = make_task(str(tmp_path))
  features = make_features()
  padded = one_step(task, as_tensors(features))
  packed = one_step(task, packed_tensors(features, num_groups=2))
  assert packed[0] == pytest.approx(padded[0], abs=1e-5)
  assert len(packed[1]) == len(padded[1])
  for packed_grad, padded_grad in zip(packed[1], padded[1]):
    np.testing.assert_allclose(packed_grad, padded_grad, atol=1e-5)
  for name, value in padded[2].items():
    np.testing.assert_allclose(packed[2][name], value, atol=1e-5, err_msg=name)


# ------------------------------------------------------------------------------------------------
# Evaluation and prediction.


# Eleven examples in batches of four: length buckets reorder them and the last batch is partial.
PREDICT_LENGTHS = [27, 3, 11, 1, 17, 8, 30, 5, 2, 19, 9]


@pytest.mark.parametrize("make_task, make_features", [
    (classifier_task, lambda: classifier_features(PREDICT_LENGTHS, seed=8)),
    (tagger_task, lambda: tagger_features(PREDICT_LENGTHS, seed=9)),
    (multiple_choice_task, lambda: padded_features(
        [[9, 14, 6], [3, 20, 11], [25, 4, 7], [12, 5, 0], [2, 3, 30]], seed=10, num_choices=3)),
], ids=["classifier", "tagger", "multiple_choice"])
def test_packed_predictions_equal_padded_predictions_in_input_order(make_task, make_features,
                                                                    tmp_path, monkeypatch):
  """`Task.predict_dataset`, the one path of every task's evaluation and prediction, with and
  without `pack_sequences`: every example's outputs, in input order (per-position outputs at the
  sequence's own positions)."""
  features = make_features()
  dataset = tf.data.Dataset.from_tensor_slices(features)
  task = make_task(str(tmp_path))
  tf.keras.utils.set_random_seed(6)
  model = task.build_model()
  strategy = tf.distribute.get_strategy()
  padded = task.predict_dataset(strategy, model, dataset, batch_size=4)
  packed_batches = []
  pack_batch = packing.pack_batch
  monkeypatch.setattr(packing, "pack_batch", lambda *args: packed_batches.append(1) or
                      pack_batch(*args))
  task.pack_sequences = True
  packed = task.predict_dataset(strategy, model, dataset, batch_size=4)
  assert packed_batches  # The pipeline packed its batches.
  assert sorted(packed) == sorted(padded)
  lengths = packing.sequence_lengths(features["input_mask"])
  for name, value in padded.items():
    assert packed[name].shape[0] == value.shape[0] == len(lengths), name
    if name == "tag_ids":  # Per position.
      for index, length in enumerate(lengths):
        np.testing.assert_allclose(packed[name][index, :length], value[index, :length],
                                   atol=1e-5, err_msg=name)
    else:
      np.testing.assert_allclose(packed[name], value, atol=1e-5, err_msg=name)


# ------------------------------------------------------------------------------------------------
# The training loop.


def training_rows(count=24, seed=7):
  rng = np.random.default_rng(seed)
  features = classifier_features(rng.integers(2, MAX_SEQ_LENGTH + 1, size=count), seed)
  return tf.data.Dataset.from_tensor_slices(features), count


def train_classifier(output_dir, strategy=None, **config_values):
  """Three steps of the classifier on the loop (the real pipeline, bucketed), a checkpoint and so
  a loop each; the last step's loss and the weights."""
  task = classifier_task(output_dir)
  rows, count = training_rows()
  config = training_loop.TrainConfig(output_dir=output_dir, num_train_steps=3,
                                     num_warmup_steps=1, save_checkpoints_steps=1,
                                     train_batch_size=8, learning_rate=1e-3,
                                     **config_values)
  result = training_loop.train(
      strategy or tf.distribute.get_strategy(),
      lambda: without_head_dropout(task.build_model()), task.loss,
      fine_tuning.training_dataset_fn(rows, count, True, False), config)
  return result.metrics["loss"], {v.path: v.numpy() for v in result.model.trainable_variables}


@pytest.fixture(scope="module")
def padded_training(tmp_path_factory):
  """The padded run (a checkpoint every step): loss, weights, output_dir."""
  output_dir = str(tmp_path_factory.mktemp("padded"))
  return train_classifier(output_dir) + (output_dir,)


def assert_same_training(actual, expected):
  assert actual[0] == pytest.approx(expected[0], abs=1e-5)
  for name, value in expected[1].items():
    np.testing.assert_allclose(actual[1][name], value, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("accumulation", [1, 2])
def test_packed_training_loop_steps_equal_padded(padded_training, accumulation, tmp_path, caplog):
  caplog.set_level("INFO", logger="absl")  # Another test of the process may have quieted absl.
  packed = train_classifier(str(tmp_path), pack_sequences=True,
                            gradient_accumulation_steps=accumulation)
  assert "Training on packed rows" in caplog.text
  assert_same_training(packed, padded_training)


def test_packed_training_resumes_exactly(padded_training, tmp_path):
  """A packed run resumed from step 1 (the padded run's checkpoint) skips the first batch and ends
  with the weights of three uninterrupted steps."""
  for path in tf.io.gfile.glob(os.path.join(padded_training[2], "model.ckpt-1.*")):
    tf.io.gfile.copy(path, str(tmp_path / os.path.basename(path)))
  # pylint: disable=protected-access
  checkpoints._write_state_file(str(tmp_path), [str(tmp_path / "model.ckpt-1")])
  assert_same_training(train_classifier(str(tmp_path), pack_sequences=True), padded_training)


def test_packed_training_on_two_mirrored_cpus_equals_padded(padded_training, tmp_path):
  run = subprocess.run([sys.executable, os.path.abspath(__file__), str(tmp_path)],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
  assert run.returncode == 0, run.stderr[-3000:]
  with np.load(os.path.join(str(tmp_path), "weights.npz")) as weights:
    loss = json.loads(open(os.path.join(str(tmp_path), "loss.json")).read())
    assert_same_training((loss, dict(weights)), padded_training)


def test_the_flag_defaults_to_true_and_the_three_scripts_define_it():
  """The flag's definition; the three scripts call it (run_ner's run below uses it)."""
  import cli  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  cli.define_packing_flag(flag_values)
  flag_values(["run_classifier.py"])
  assert flag_values.pack_sequences is True
  flag_values(["run_classifier.py", "--pack_sequences=false"])
  assert flag_values.pack_sequences is False
  for script in ("run_classifier.py", "run_ner.py", "run_multiple_choice.py"):
    with open(os.path.join(os.path.dirname(__file__), "..", script)) as source:
      assert "cli.define_packing_flag()" in source.read()


def test_run_ner_learns_on_packed_rows_by_default(tmp_path):
  """The CLI trains on packed rows without the flag: names tagged B-PER among filler words are
  learned."""
  filler = ["w%d" % i for i in range(12)]
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "alice", "bob"] + filler
  rng = np.random.default_rng(0)
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  for split, count in (("train", 160), ("dev", 40)):
    lines = []
    for _ in range(count):
      for _ in range(rng.integers(1, 12)):
        name = rng.random() < 0.3
        word = rng.choice(["Alice", "Bob"]) if name else rng.choice(filler)
        lines.append("%s NN O %s\n" % (word, "B-PER" if name else "O"))
      lines.append("\n")
    (data_dir / (split + ".txt")).write_text("".join(lines))
  config = modeling.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=16)
  config_file, vocab_file = conftest.write_model_files(str(tmp_path), config, vocab)
  output_dir = str(tmp_path / "out")
  run = subprocess.run(
      [sys.executable, "run_ner.py", "--do_train", "--do_eval",
       "--data_dir", str(data_dir), "--output_dir", output_dir, "--vocab_file", vocab_file,
       "--bert_config_file", config_file, "--max_seq_length=16", "--train_batch_size=16",
       "--learning_rate=2e-3", "--num_train_epochs=4", "--iterations_per_loop=40",
       "--eval_batch_size=40"],
      cwd=ROOT, capture_output=True, text=True, timeout=150)
  assert run.returncode == 0, run.stderr[-3000:]
  assert "Training on packed rows" in run.stderr
  with open(os.path.join(output_dir, "eval_results.txt")) as reader:
    results = dict(line.strip().split(" = ") for line in reader)
  assert results["global_step"] == "40"
  assert float(results["eval_f1"]) > 0.9, results


def _mirrored_worker(output_dir):
  """Trains packed on two logical CPUs under MirroredStrategy; writes weights and loss."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  loss, weights = train_classifier(os.path.join(output_dir, "run"), strategy,
                                   pack_sequences=True)
  np.savez(os.path.join(output_dir, "weights.npz"), **weights)
  with open(os.path.join(output_dir, "loss.json"), "w") as writer:
    writer.write(json.dumps(loss))


if __name__ == "__main__":
  _mirrored_worker(sys.argv[1])
