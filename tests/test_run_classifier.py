"""End-to-end tests of run_classifier.py on tiny configs and generated data (in process)."""

import json
import os
import random
import re

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from conftest import write_model_files
import checkpoints
import classifier
import classifier_data
import errors
import fine_tuning
import modeling
import run_classifier
import task_files

pytestmark = pytest.mark.slow

FLAGS = flags.FLAGS
run_classifier.define_flags()

WORDS = "the a cat dog sat ran big small red blue happy sad day night".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", ",", "."] + WORDS


def tiny_model_files(directory) -> dict:
  """Writes a vocab and a 2-layer, hidden-32 config; returns their flags."""
  config = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=64, type_vocab_size=2)
  config_file, vocab_file = write_model_files(directory, config, VOCAB)
  return {"vocab_file": vocab_file, "bert_config_file": config_file}


def sentence(rng: random.Random, marker: str) -> str:
  """A few random filler words with `marker` somewhere among them."""
  words = [rng.choice(WORDS) for _ in range(rng.randint(2, 7))]
  words.insert(rng.randint(0, len(words)), marker)
  return " ".join(words)


def generated_rows(rng: random.Random, count: int) -> list:
  """(text, label): the label is "pos" when the text contains "good", "neg" when it has "bad"."""
  rows = []
  for _ in range(count):
    positive = rng.random() < 0.5
    rows.append((sentence(rng, "good" if positive else "bad"), "pos" if positive else "neg"))
  return rows


def write_tsv(path, header, rows):
  with open(path, "w") as f:
    f.write("\t".join(header) + "\n")
    f.writelines("\t".join(row) + "\n" for row in rows)


def run(**flag_values) -> None:
  """Runs run_classifier's main in this process with the given flags (others at defaults)."""
  FLAGS.unparse_flags()
  FLAGS(["run_classifier.py"] + ["--%s=%s" % item for item in flag_values.items()])
  run_classifier.main([])


def read_eval_results(output_dir) -> dict:
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return {k: float(v) for k, v in (line.strip().split(" = ") for line in f)}


def read_test_results(output_dir) -> np.ndarray:
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    return np.array([[float(x) for x in line.rstrip("\n").split("\t")] for line in f])


@pytest.fixture
def generic_task(tmp_path):
  """A generated single-sentence task in generic TSV files: 400 train, 100 dev, 13 test rows."""
  rng = random.Random(1)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  for split, count in (("train", 400), ("dev", 100)):
    write_tsv(data_dir / (split + ".tsv"), ["id", "sentence", "label"],
              [(str(i), text, label) for i, (text, label) in enumerate(generated_rows(rng, count))])
  test_rows = generated_rows(rng, 13)
  write_tsv(data_dir / "test.tsv", ["id", "sentence"],
            [(str(i), text) for i, (text, _) in enumerate(test_rows)])
  return dict(tiny_model_files(str(tmp_path)), task_name="generic", data_dir=str(data_dir),
              text_a_column="sentence", output_dir=str(tmp_path / "out"), max_seq_length=16,
              learning_rate=1e-3, train_batch_size=32, num_train_epochs=3.0,
              save_checkpoints_steps=20, iterations_per_loop=10), test_rows


def test_learns_a_generated_rule_and_writes_the_original_outputs(generic_task, caplog):
  flag_values, test_rows = generic_task
  with caplog.at_level("WARNING"):
    run(do_train=True, do_eval=True, do_predict=True, **flag_values)
  # The default optimizer (the original's) at 1e-3 warns once, naming the alternative.
  assert len([r for r in caplog.records if "`optimizer`=adamw" in r.getMessage()]) == 1
  output_dir = flag_values["output_dir"]
  results = read_eval_results(output_dir)
  assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
  assert results["eval_accuracy"] > 0.9  # Chance is 0.5.
  assert results["global_step"] == int(400 / 32 * 3)
  with open(os.path.join(output_dir, classifier_data.LABEL_LIST_FILE)) as f:
    assert f.read().split() == ["neg", "pos"]
  probabilities = read_test_results(output_dir)
  assert probabilities.shape == (13, 2)  # One line per test example: no padding rows.
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
  predicted = np.array(["neg", "pos"])[probabilities.argmax(axis=1)]
  assert np.mean(predicted == [label for _, label in test_rows]) > 0.8
  shapes = dict(tf.train.list_variables(os.path.join(output_dir, "model.ckpt-37")))
  assert shapes["output_weights"] == [2, 32] and shapes["output_bias"] == [2]
  assert "bert/encoder/layer_1/output/dense/kernel" in shapes

  # A second run with more epochs reuses the cached features and resumes from step 37.
  train_file = os.path.join(output_dir, "train.tf_record")
  modified = os.path.getmtime(train_file)
  step_20 = os.path.getmtime(os.path.join(output_dir, "model.ckpt-20.index"))
  run(do_train=True, **dict(flag_values, num_train_epochs=4.0, allow_changed_settings=True))
  assert os.path.getmtime(train_file) == modified
  # Had it started over, step 20's checkpoint would have been written again.
  assert os.path.getmtime(os.path.join(output_dir, "model.ckpt-20.index")) == step_20
  assert tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-50")).get_tensor(
      "global_step") == 50


def test_sts_b_regression_reports_correlations(tmp_path):
  rng = random.Random(2)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  header = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
            "sentence2", "score"]
  meta = ["main-captions", "MSRvid", "2012test", "0001", "none", "none"]
  for split, count in (("train", 64), ("dev", 20), ("test", 7)):
    rows = []
    for i in range(count):
      score = rng.choice(["0.0", "2.5", "5.0"])
      row = [str(i)] + meta + [sentence(rng, "good"), sentence(rng, "bad"), score]
      rows.append(row[:-1] if split == "test" else row)
    write_tsv(data_dir / (split + ".tsv"), header[:9] if split == "test" else header, rows)
  output_dir = str(tmp_path / "out")
  run(task_name="sts-b", data_dir=str(data_dir), output_dir=output_dir, do_train=True,
      do_eval=True, do_predict=True, max_seq_length=24, train_batch_size=16, num_train_epochs=1.0,
      **tiny_model_files(str(tmp_path)))
  results = read_eval_results(output_dir)
  assert set(results) == {"eval_pearson", "eval_spearman", "eval_loss", "global_step", "loss"}
  assert -1.0 <= results["eval_pearson"] <= 1.0 and results["eval_loss"] > 0
  assert read_test_results(output_dir).shape == (7, 1)


def test_bad_flags_and_data_give_clear_errors(tmp_path):
  files = dict(tiny_model_files(str(tmp_path)), max_seq_length=16)
  output_dir = str(tmp_path / "out")
  with pytest.raises(ValueError, match="`do_lower_case`=True.*cased"):
    run(task_name="mrpc", data_dir=str(tmp_path), output_dir=output_dir, do_train=True,
        init_checkpoint="/models/cased_L-12_H-768_A-12/bert_model.ckpt", **files)
  with pytest.raises(ValueError, match="At least one of"):
    run(task_name="mrpc", data_dir=str(tmp_path), output_dir=output_dir, **files)
  with pytest.raises(task_files.BadInputError, match="no such directory"):
    run(task_name="mrpc", data_dir=str(tmp_path / "absent"), output_dir=output_dir, do_train=True,
        **files)
  with pytest.raises(ValueError, match="`max_seq_length`=128 exceeds .*max_position_embeddings=64"):
    run(task_name="mrpc", data_dir=str(tmp_path), output_dir=output_dir, do_train=True,
        **dict(files, max_seq_length=128))


def test_optimizer_adamw_trains_saves_adam_slots_and_resumes(generic_task, caplog):
  flag_values, _ = generic_task
  # Bias-corrected steps are smaller early on than the original's (6.6x the rate near step 12), so
  # this 37-step run needs a larger rate than the original optimizer's 1e-3 (3e-3 barely learns).
  flag_values = dict(flag_values, optimizer="adamw", learning_rate=5e-3)
  with caplog.at_level("WARNING"):
    run(do_train=True, **flag_values)
  assert not [r for r in caplog.records if "`optimizer`=adamw" in r.getMessage()]
  output_dir = flag_values["output_dir"]
  reader = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-37"))
  shapes = reader.get_variable_to_shape_map()
  for name in ("output_weights", "bert/encoder/layer_1/output/LayerNorm/gamma"):
    assert shapes[name + "/adam_m"] == shapes[name + "/adam_v"] == shapes[name]
    assert np.any(reader.get_tensor(name + "/adam_v") != 0)
  # One more epoch resumes from step 37 with the moments, reaches step 50, and has learned the rule.
  caplog.clear()
  with caplog.at_level("INFO"):
    run(do_train=True, do_eval=True, verbosity=0,
        **dict(flag_values, num_train_epochs=4.0, allow_changed_settings=True))
  assert "Resuming from %s (step 37)" % os.path.join(output_dir, "model.ckpt-37") in caplog.text
  results = read_eval_results(output_dir)
  assert results["global_step"] == 50 and results["eval_accuracy"] > 0.9


def test_lr_schedule_linear_reaches_the_optimizer_and_a_resume_with_another_is_refused(
    generic_task, caplog):
  """400 examples, batch 32, one epoch: 12 steps, 1 of warmup. After step s the next update uses
  --lr_schedule=linear's 1e-3 * (12 - s) / (12 - 1), not the original's 1e-3 * (1 - s / 12)."""
  flag_values, _ = generic_task
  flag_values = dict(flag_values, num_train_epochs=1.0, iterations_per_loop=4,
                     lr_schedule="linear", optimizer="adamw")
  with caplog.at_level("INFO"):
    run(do_train=True, verbosity=0, **flag_values)
  assert ("num_train_steps = int(400 examples / batch 32 * 1 epochs) = 12; warmup 1 "
          "steps (0.1 of them); schedule: linear (decay from the end of warmup)") in caplog.text
  rates = scalars_in(flag_values["output_dir"])["learning_rate"]
  assert {4, 8, 12} <= set(rates)
  for step, rate in rates.items():
    assert rate == pytest.approx(1e-3 * (12 - step) / 11, rel=1e-5, abs=1e-10), step
  with pytest.raises(errors.TrainingError,
                     match="`lr_schedule`: recorded linear, now original"):
    run(do_train=True, **dict(flag_values, lr_schedule="original"))


def test_a_crashed_run_resumes_to_the_uninterrupted_weights_bit_for_bit(generic_task, monkeypatch,
                                                                        tmp_path, caplog):
  """Dropout on (the config's 0.1): the resumed steps see the same batches and masks. The run
  trains on padded rows (--pack_sequences=false) and resumes from a command line without the
  flag, as one written before packing became the default: it goes on with padded rows."""
  flag_values, _ = generic_task
  flag_values = dict(flag_values, num_train_epochs=1.0, save_checkpoints_steps=5)  # 12 steps.
  straight_dir = str(tmp_path / "straight")
  run(do_train=True, pack_sequences=False, **dict(flag_values, output_dir=straight_dir))
  # The same run, but its input ends after 8 batches: it fails after writing model.ckpt-5.
  training_dataset_fn = fine_tuning.training_dataset_fn

  def crashing_training_dataset_fn(*args, **kwargs):
    dataset_fn = training_dataset_fn(*args, **kwargs)
    return lambda batch_size, seed: dataset_fn(batch_size, seed).take(8)

  monkeypatch.setattr(fine_tuning, "training_dataset_fn", crashing_training_dataset_fn)
  with pytest.raises(tf.errors.OutOfRangeError):
    run(do_train=True, pack_sequences=False, **flag_values)
  monkeypatch.undo()
  output_dir = flag_values["output_dir"]
  assert tf.train.latest_checkpoint(output_dir) == os.path.join(output_dir, "model.ckpt-5")
  # Resumed on an edited train file, the run would end trained on two datasets: refused.
  train_file = os.path.join(flag_values["data_dir"], "train.tsv")
  with open(train_file, encoding="utf-8") as f:
    rows = f.read()
  with open(train_file, "w", encoding="utf-8") as f:
    f.write(rows.replace("\tpos\n", "\tneg\n", 1))
  with pytest.raises(errors.TrainingError,
                     match=r"the training data \(the train file's features\): recorded sha256:"):
    run(do_train=True, verbosity=0, **flag_values)
  with open(train_file, "w", encoding="utf-8") as f:
    f.write(rows)
  with caplog.at_level("INFO"):
    run(do_train=True, verbosity=0, **flag_values)
  assert "holds a run trained without packing: going on without it" in caplog.text
  assert "Training on packed rows" not in caplog.text
  expected = tf.train.load_checkpoint(os.path.join(straight_dir, "model.ckpt-12"))
  actual = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-12"))
  names = expected.get_variable_to_shape_map()
  assert set(names) == set(actual.get_variable_to_shape_map())
  for name in names:
    np.testing.assert_array_equal(actual.get_tensor(name), expected.get_tensor(name), err_msg=name)


def test_eval_on_unreadable_checkpoints_is_an_error_not_a_random_model(generic_task):
  flag_values, _ = generic_task
  output_dir = flag_values["output_dir"]
  os.makedirs(output_dir)
  # The state file names model.ckpt-20, whose files are gone; model.ckpt-10 is truncated.
  with open(os.path.join(output_dir, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "model.ckpt-20"\nall_model_checkpoint_paths: "model.ckpt-10"\n'
            'all_model_checkpoint_paths: "model.ckpt-20"\n')
  checkpoints.write_checkpoint({"bert/embeddings/word_embeddings": np.ones([len(VOCAB), 32])},
                            os.path.join(output_dir, "model.ckpt-10"))
  os.truncate(os.path.join(output_dir, "model.ckpt-10.data-00000-of-00001"), 10)
  with pytest.raises(errors.TrainingError,
                     match=r"checkpoint .*model\.ckpt-20, the newest of its directory, is "
                     r"damaged: its files are missing"):
    run(do_eval=True, **flag_values)
  assert not os.path.exists(os.path.join(output_dir, "eval_results.txt"))


def eval_scalars(output_dir) -> dict:
  """{tag: {step: value}} from the TensorBoard event files of `output_dir/eval`."""
  return scalars_in(os.path.join(output_dir, "eval"))


def scalars_in(directory) -> dict:
  """{tag: {step: value}} from the TensorBoard event files in `directory`."""
  scalars = {}
  for event_file in tf.io.gfile.glob(os.path.join(directory, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(event_file):
      for value in event.summary.value:
        scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
  return scalars


def test_evaluates_during_training_stops_early_and_exports_the_best(generic_task, tmp_path,
                                                                    caplog):
  flag_values, _ = generic_task
  flag_values.update(num_train_epochs=10.0, eval_every_steps=10, early_stopping_patience=2,
                     keep_best_checkpoint=True, export_dir=str(tmp_path / "export"))
  output_dir = flag_values["output_dir"]
  run(do_train=True, do_eval=True, **flag_values)
  with open(os.path.join(output_dir, "eval_history.json")) as f:
    history = json.load(f)["evaluations"]
  steps = [entry["step"] for entry in history]
  accuracies = [entry["metrics"]["eval_accuracy"] for entry in history]
  # Every 10 steps and at each epoch end (12.5 steps per epoch: 12, 25, 37, ...), until the
  # accuracy had not improved in 2 evaluations; well before the last step (125).
  expected_steps = sorted({s for s in range(1, 126) if s % 10 == 0} |
                          {int(epoch * 12.5) for epoch in range(1, 11)})
  assert steps == expected_steps[:len(steps)] and steps[-1] < 125
  best = int(np.argmax(accuracies))  # The first of the best.
  assert best == len(history) - 3 and max(accuracies[-2:]) <= accuracies[best]
  assert accuracies[best] > 0.9
  assert checkpoints.latest_checkpoint(output_dir).endswith("model.ckpt-%d" % steps[-1])
  # TensorBoard: the eval scalars at the evaluation steps.
  scalars = eval_scalars(output_dir)
  assert sorted(scalars["eval_accuracy"]) == steps and "eval_loss" in scalars
  np.testing.assert_allclose([scalars["eval_accuracy"][s] for s in steps], accuracies, rtol=1e-6)
  # best/ holds the best step's model and its metrics; eval_results.txt and the export use it.
  best_step = steps[best]
  best_dir = os.path.join(output_dir, "best")
  assert sorted(os.listdir(best_dir)) == ["eval_results.txt", "model.ckpt-%d.data-00000-of-00001"
                                          % best_step, "model.ckpt-%d.index" % best_step]
  best_results = read_eval_results(best_dir)
  assert best_results == dict(history[best]["metrics"], global_step=best_step)
  assert read_eval_results(output_dir) == best_results
  best_weights = tf.train.load_checkpoint(os.path.join(best_dir, "model.ckpt-%d" % best_step))
  last_weights = tf.train.load_checkpoint(checkpoints.latest_checkpoint(output_dir))
  exported = tf.train.load_checkpoint(
      os.path.join(tmp_path / "export", os.listdir(tmp_path / "export")[0], "variables",
                   "variables"))
  exported_values = [exported.get_tensor(name) for name, shape in
                     exported.get_variable_to_shape_map().items() if shape == [2, 32]]
  assert any(np.array_equal(v, best_weights.get_tensor("output_weights"))
             for v in exported_values)
  assert not any(np.array_equal(v, last_weights.get_tensor("output_weights"))
                 for v in exported_values)
  # A rerun keeps the early-stopping state: it trains no further.
  run(do_train=True, **dict(flag_values, export_dir=""))
  assert checkpoints.latest_checkpoint(output_dir).endswith("model.ckpt-%d" % steps[-1])
  # Trained again, the run goes on keeping its best (an older best would answer for it), also
  # from a command line without the flag; --keep_best_checkpoint=false is refused.
  with pytest.raises(errors.FlagError, match="keeps its best checkpoint"):
    run(do_train=True, **dict(flag_values, export_dir="", keep_best_checkpoint=False))
  without_the_flag = {name: value for name, value in flag_values.items()
                      if name not in ("keep_best_checkpoint", "export_dir")}
  with caplog.at_level("INFO"):
    run(do_train=True, verbosity=0, **without_the_flag)
  assert "keeps its best checkpoint: training goes on keeping it" in caplog.text
  # A later evaluation without the flag evaluates the run's model: the best it kept.
  os.remove(os.path.join(output_dir, "eval_results.txt"))
  run(do_eval=True, **dict(flag_values, export_dir="", keep_best_checkpoint=False))
  assert read_eval_results(output_dir) == best_results


def long_document(rng: random.Random, marker: str) -> str:
  """14 filler words, then 8-16 words of which about half are `marker`: the marker is never in
  the first window of a 16-token input, so truncation (the default) could only guess."""
  tail = [marker if rng.random() < 0.5 else rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
  return " ".join([rng.choice(WORDS) for _ in range(14)] + tail)


def test_doc_stride_learns_from_windows_past_the_truncation(tmp_path):
  rng = random.Random(3)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  labels = {}
  for split, count in (("train", 300), ("dev", 60), ("test", 9)):
    rows = []
    for i in range(count):
      label = rng.choice(["pos", "neg"])
      rows.append((str(i), long_document(rng, "good" if label == "pos" else "bad"), label))
    labels[split] = [label for _, _, label in rows]
    write_tsv(data_dir / (split + ".tsv"), ["id", "sentence", "label"], rows)
  output_dir = str(tmp_path / "out")
  run(do_train=True, do_eval=True, do_predict=True, task_name="generic", data_dir=str(data_dir),
      text_a_column="sentence", output_dir=output_dir, max_seq_length=16, doc_stride=7,
      window_aggregation="max", learning_rate=1e-3, train_batch_size=32, num_train_epochs=3.0,
      **tiny_model_files(str(tmp_path)))
  results = read_eval_results(output_dir)
  assert results["eval_accuracy"] > 0.85  # Chance 0.5; the marker is in a later window.
  assert results["global_step"] == int(300 / 32 * 3)  # The schedule counts documents.
  probabilities = read_test_results(output_dir)
  assert probabilities.shape == (9, 2)  # One line per document, in order.
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
  predicted = np.array(["neg", "pos"])[probabilities.argmax(axis=1)]
  assert np.mean(predicted == labels["test"]) > 0.6
  # 22-30 tokens in windows of 14 every 7: 2 to 4 windows per document, each a training record.
  num_records = sum(1 for _ in tf.data.TFRecordDataset(os.path.join(output_dir,
                                                                    "train.tf_record")))
  assert 2 * 300 < num_records <= 4 * 300


def test_multi_label_learns_a_two_label_rule(tmp_path):
  rng = random.Random(4)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  gold = {}
  for split, count in (("train", 400), ("dev", 80), ("test", 11)):
    rows = []
    for i in range(count):
      names = [name for name, marker in (("happy", "good"), ("colour", "red"))
               if rng.random() < 0.5]
      words = [rng.choice(WORDS[:8]) for _ in range(rng.randint(1, 4))]
      for name in names:
        words.insert(rng.randint(0, len(words)), {"happy": "good", "colour": "red"}[name])
      rows.append((str(i), " ".join(words), "|".join(names)))
    gold[split] = [[int("colour" in r[2]), int("happy" in r[2])] for r in rows]
    write_tsv(data_dir / (split + ".tsv"), ["id", "sentence", "tags"], rows)
  output_dir = str(tmp_path / "out")
  run(do_train=True, do_eval=True, do_predict=True, task_name="generic", data_dir=str(data_dir),
      text_a_column="sentence", label_column="tags", multi_label=True, label_delimiter="|",
      output_dir=output_dir, max_seq_length=16, learning_rate=1e-3, optimizer="adamw",
      train_batch_size=16, num_train_epochs=6.0, **tiny_model_files(str(tmp_path)))
  with open(os.path.join(output_dir, classifier_data.LABEL_LIST_FILE)) as f:
    assert f.read().split() == ["colour", "happy"]
  results = read_eval_results(output_dir)
  assert {"eval_micro_f1", "eval_macro_f1", "eval_colour_precision", "eval_colour_recall",
          "eval_happy_precision", "eval_happy_recall"} <= set(results)
  # Predicting every label gives micro F1 2/3, coin flips 1/2; an uninformed sigmoid has loss
  # ln 2 = 0.693 per label. (This tiny model learns one label in a few dozen steps, both slower.)
  assert results["eval_micro_f1"] > 0.75 and results["eval_loss"] < 0.5
  probabilities = read_test_results(output_dir)
  assert probabilities.shape == (11, 2)  # Per-label sigmoid probabilities, one line per example.
  assert np.mean((probabilities > 0.5) == np.array(gold["test"])) > 0.7


def test_class_weights_auto_weighs_by_inverse_frequency(tmp_path, monkeypatch):
  rng = random.Random(5)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  for split, count in (("train", 200), ("dev", 40)):
    rows = [(str(i), sentence(rng, "bad" if i % 4 == 0 else "good"),
             "neg" if i % 4 == 0 else "pos") for i in range(count)]
    write_tsv(data_dir / (split + ".tsv"), ["id", "sentence", "label"], rows)
  flag_values = dict(task_name="generic", data_dir=str(data_dir), text_a_column="sentence",
                     output_dir=str(tmp_path / "out"), max_seq_length=16, learning_rate=1e-3,
                     train_batch_size=32, num_train_epochs=1.0, **tiny_model_files(str(tmp_path)))
  tasks = []
  train_data = classifier.ClassifierTask.train_data
  monkeypatch.setattr(classifier.ClassifierTask, "train_data",
                      lambda task: tasks.append(task) or train_data(task))
  run(do_train=True, do_eval=True, class_weights="auto", **flag_values)
  # 50 neg and 150 pos: w = 200 / (2 * n) = 2 and 2/3 (the loss with them: test_classifier).
  np.testing.assert_allclose(tasks[0].class_weight_values, [2, 2 / 3], rtol=1e-6)
  assert set(read_eval_results(flag_values["output_dir"])) == {
      "eval_accuracy", "eval_loss", "global_step", "loss"}
  with pytest.raises(ValueError, match=r"`class_weights`=1,2,3: expected 'auto' or 2 positive"):
    run(do_eval=True, class_weights="1,2,3", **flag_values)
  with pytest.raises(ValueError, match="--multi_label needs --task_name=generic"):
    run(do_eval=True, multi_label=True, **dict(flag_values, task_name="sst-2"))


def test_no_row_disappears_and_a_label_list_that_does_not_fit_is_named(tmp_path):
  """An empty label cell stops training at its line before anything is written, or is skipped
  with --skip_bad_rows; every test row is predicted, in order, a blank line as an empty text; a
  label list that does not fit output_dir's checkpoints is named, not a shape mismatch."""
  rng = random.Random(3)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  rows = generated_rows(rng, 24)
  rows[5] = (rows[5][0], "")  # Line 7 of train.tsv.
  write_tsv(data_dir / "train.tsv", ["sentence", "label"], rows)
  texts = ["good day", "", "bad night", "good day", ""]
  (data_dir / "test.tsv").write_text("sentence\n" + "\n".join(texts) + "\n")
  output_dir = tmp_path / "out"
  label_list = output_dir / classifier_data.LABEL_LIST_FILE
  flag_values = dict(tiny_model_files(str(tmp_path)), task_name="generic", data_dir=str(data_dir),
                     text_a_column="sentence", output_dir=str(output_dir), max_seq_length=16,
                     train_batch_size=8, num_train_epochs=1.0)
  with pytest.raises(task_files.BadInputError,
                     match=r"train\.tsv:7: empty label: .*`skip_bad_rows`"):
    run(do_train=True, **flag_values)
  assert not label_list.exists()
  run(do_train=True, do_predict=True, skip_bad_rows=True, **flag_values)
  assert label_list.read_text() == "neg\npos\n"
  probabilities = read_test_results(output_dir)
  assert len(probabilities) == len(texts)  # One line per test row.
  # Rows 0 and 3, 1 and 4 are the same texts: each line holds its own row's prediction.
  np.testing.assert_allclose(probabilities[[3, 4]], probabilities[[0, 1]], rtol=1e-5)
  assert not np.allclose(probabilities[0], probabilities[1])
  # A label list of other labels than output_dir's checkpoints (here: another number of them):
  # named against the list the run recorded.
  label_list.write_text("neg\npos\nzzz\n")
  with pytest.raises(errors.TrainingError, match=re.escape(
      "the label list (label_list.txt or tag_list.txt): recorded [neg, pos], now [neg, pos, zzz]")):
    run(do_predict=True, **flag_values)
  # The label list an earlier version wrote from the empty cell: "" first, then the others.
  label_list.write_text("\nneg\npos\n")
  with pytest.raises(task_files.BadInputError, match=r"label_list\.txt:1: empty label"):
    run(do_predict=True, **flag_values)


def test_a_run_refused_before_training_leaves_no_label_list(tmp_path):
  """The labels learned from the training file are written when training starts: a run refused
  before (here: --class_weights for 2 labels of 3) leaves output_dir free for another data set."""
  rng = random.Random(5)
  output_dir = tmp_path / "out"
  three = tmp_path / "three"
  os.makedirs(three)
  write_tsv(three / "train.tsv", ["sentence", "label"],
            [(text, "mid" if index % 3 == 0 else label)
             for index, (text, label) in enumerate(generated_rows(rng, 12))])
  flag_values = dict(tiny_model_files(str(tmp_path)), task_name="generic",
                     text_a_column="sentence", output_dir=str(output_dir), max_seq_length=16,
                     train_batch_size=4, num_train_epochs=1.0, do_train=True)
  with pytest.raises(errors.FlagError, match="`class_weights`=1,2"):
    run(data_dir=str(three), class_weights="1,2", **flag_values)
  assert not (output_dir / classifier_data.LABEL_LIST_FILE).exists()
  two = tmp_path / "two"
  os.makedirs(two)
  write_tsv(two / "train.tsv", ["sentence", "label"], generated_rows(rng, 12))
  run(data_dir=str(two), **flag_values)
  assert (output_dir / classifier_data.LABEL_LIST_FILE).read_text() == "neg\npos\n"
