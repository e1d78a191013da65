"""Tests for training_loop.py: checkpoints and exact resume, optimizers and schedules, NaN losses,
loop length, TensorBoard summaries, evaluation during training and early stopping, the settings
record a resume is checked against. The scenario (a tiny classifier, its data and config) is
training_scenario.py's; `reference` (conftest) is its run on one device.
"""
import dataclasses
import json
import os
import sys
import warnings

from absl import flags
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.util import event_pb2  # pylint: disable=g-import-not-at-top

import checkpoints  # pylint: disable=g-import-not-at-top
import cli  # pylint: disable=g-import-not-at-top
import errors  # pylint: disable=g-import-not-at-top
import optimization  # pylint: disable=g-import-not-at-top
import pretraining  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top
from training_scenario import (  # pylint: disable=g-import-not-at-top
    CONFIG, MODEL_SETTINGS, TinyClassifier, checkpoint_values, copy_checkpoints, dataset_fn_of,
    examples, loss_fn, model_fn, train_config, warnings_text)

pytestmark = pytest.mark.slow


def test_checkpoints_hold_google_names_slots_and_step(reference):
  output_dir, result, _ = reference
  assert result.global_step == 6
  assert result.checkpoint == os.path.join(output_dir, "model.ckpt-6")
  # keep_checkpoint_max=2: model.ckpt-2 was pruned, the state file lists 4 and 6.
  assert not tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-2.*"))
  state = tf.train.get_checkpoint_state(output_dir)
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      "model.ckpt-4", "model.ckpt-6"]
  values = checkpoint_values(result.checkpoint)
  assert int(values["global_step"]) == 6
  model_names = set(checkpoints.checkpoint_variables(result.model))
  assert "bert/encoder/layer_0/attention/self/query/kernel" in model_names
  assert "output_weights" in model_names
  for name, variable in checkpoints.checkpoint_variables(result.model).items():
    np.testing.assert_array_equal(values[name], variable.numpy())
    assert values[name + "/adam_m"].shape == tuple(variable.shape)
    assert np.any(values[name + "/adam_v"] != 0)
  assert set(values) == model_names | {"global_step"} | {
      n + s for n in model_names for s in ("/adam_m", "/adam_v")}
  # The checkpoint is a valid init_checkpoint for a fresh model.
  report = checkpoints.init_from_checkpoint(model_fn(), result.checkpoint)
  assert not report.missing and not report.unused


def test_resume_continues_exactly_and_stops_at_num_train_steps(reference, tmp_path, caplog):
  output_dir, straight, _ = reference
  # A run that crashed after step 4: only model.ckpt-4 and a state file naming it (no settings
  # record: an output_dir of an older version).
  for path in tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-4.*")):
    tf.io.gfile.copy(path, str(tmp_path / os.path.basename(path)))
  checkpoints._write_state_file(str(tmp_path), [str(tmp_path / "model.ckpt-4")])
  with caplog.at_level("INFO", logger="absl"):
    resumed = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                                  dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert resumed.global_step == 6
  assert "(it was started by an older version): recording these" in caplog.text
  assert recorded_settings(str(tmp_path)) == recorded_settings(output_dir)
  expected = checkpoint_values(straight.checkpoint)
  actual = checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
  # Already finished: a rerun trains nothing and keeps the step.
  again = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                         dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert again.global_step == 6 and again.examples_per_second == 0.0


def resume_from_step_4(straight_dir: str, resumed_dir: str, **config_values):
  """Trains in resumed_dir from a copy of straight_dir's step-4 checkpoint (a crash after step 4),
  with the config `train_config(resumed_dir, **config_values)`; returns the TrainResult."""
  tf.io.gfile.makedirs(resumed_dir)
  for path in tf.io.gfile.glob(os.path.join(straight_dir, "model.ckpt-4.*")):
    tf.io.gfile.copy(path, os.path.join(resumed_dir, os.path.basename(path)))
  checkpoints._write_state_file(resumed_dir, [os.path.join(resumed_dir, "model.ckpt-4")])
  return training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                             dataset_fn_of(examples(64)), train_config(resumed_dir, **config_values))


def test_lamb_checkpoints_its_moments_as_adam_slots_and_resumes_exactly(reference, tmp_path):
  """LAMB (and AdamW, which shares its slots: see test_run_classifier) in the Google format."""
  optimizer_name = "lamb"
  straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
  straight = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                            dataset_fn_of(examples(64)),
                            train_config(straight_dir, optimizer=optimizer_name))
  # The config's optimizer was used: the weights differ from the original optimizer's.
  assert not np.allclose(checkpoints.checkpoint_variables(straight.model)["output_weights"].numpy(),
                         reference[2]["output_weights"], rtol=1e-3)
  expected = checkpoint_values(straight.checkpoint)
  assert set(expected) == set(checkpoint_values(reference[1].checkpoint))  # the same names
  report = checkpoints.init_from_checkpoint(model_fn(), straight.checkpoint)
  assert not report.missing and not report.unused
  # A fresh optimizer of the same kind restores its moments from the adam_m/adam_v entries.
  model = model_fn()
  optimizer = optimization.create_optimizer(1e-2, 6, 1, optimizer_name=optimizer_name)
  checkpoints.restore_variables(checkpoints.training_state_variables(model, optimizer),
                             straight.checkpoint)
  slots = checkpoints.named_slot_variables(optimizer, checkpoints.checkpoint_variables(model))
  assert len(slots) == 2 * len(model.trainable_variables)
  for name, slot in slots.items():
    np.testing.assert_array_equal(slot.numpy(), expected[name], err_msg=name)
  assert np.any(expected["output_weights/adam_m"] != 0)
  assert int(optimizer.iterations) == 6
  # Crash after step 4, resume: the moments come back and the run ends where the straight one did.
  resumed = resume_from_step_4(straight_dir, resumed_dir, optimizer=optimizer_name)
  actual = checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_linear_schedule_reaches_the_optimizer_and_resumes_exactly(reference, tmp_path):
  """--lr_schedule=linear over 6 steps with 1 of warmup: after step s the next update uses
  1e-2 * (6 - s) / (6 - 1) (the original's 1e-2 * (1 - s / 6): test_summaries_are_written...)."""
  straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
  straight = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                                 dataset_fn_of(examples(64)),
                                 train_config(straight_dir, lr_schedule="linear"))
  rates = written_scalars(straight_dir)["learning_rate"]
  assert sorted(rates) == [2, 4, 6]
  for step, rate in rates.items():
    np.testing.assert_allclose(rate, 1e-2 * (6 - step) / 5, rtol=1e-5, atol=1e-9)
  assert not np.allclose(checkpoints.checkpoint_variables(straight.model)["output_weights"].numpy(),
                         reference[2]["output_weights"], rtol=1e-3)
  # Crash after step 4, resume: the rates are a function of the step, so the run ends the same.
  resumed = resume_from_step_4(straight_dir, resumed_dir, lr_schedule="linear")
  expected, actual = checkpoint_values(straight.checkpoint), checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_non_finite_loss_stops_with_clear_error_and_keeps_last_good_checkpoint(tmp_path):
  data = examples(48, bad_after=40)  # Batches 1-5 are finite, batch 6 is not.
  with pytest.raises(errors.TrainingError, match=r"steps 5-6.*model\.ckpt-4"):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(data),
                   train_config(str(tmp_path), num_train_steps=8, keep_checkpoint_max=5))
  assert checkpoints.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-4")
  assert not tf.io.gfile.glob(str(tmp_path / "model.ckpt-6.*"))
  assert np.all(np.isfinite(checkpoint_values(str(tmp_path / "model.ckpt-4"))["output_bias"]))


class TinyTokenClassifier(TinyClassifier):
  """The head reads the first token of the sequence output: the pooler gets no gradient."""

  def call(self, features, training=False):
    first_token = self.bert(features["input_ids"], training=training)["sequence_output"][:, 0]
    return tf.matmul(first_token, self.output_weights, transpose_b=True) + self.output_bias


def test_variables_without_gradient_are_left_alone(tmp_path):
  initial = {}

  def token_model_fn():
    model = TinyTokenClassifier()
    model.build()
    initial.update({name: variable.numpy() for name, variable in
                    checkpoints.checkpoint_variables(model).items()})
    return model

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = training_loop.train(tf.distribute.get_strategy(), token_model_fn, loss_fn,
                            dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
  trained = checkpoints.checkpoint_variables(result.model)
  # As the original's optimizer skips a None gradient: no update and no weight decay.
  np.testing.assert_array_equal(trained["bert/pooler/dense/kernel"].numpy(),
                                initial["bert/pooler/dense/kernel"])
  assert not np.array_equal(trained["output_weights"].numpy(), initial["output_weights"])


def test_loop_length_follows_loops_checkpoints_and_progress_time(tmp_path):
  strategy = tf.distribute.get_strategy()
  config = train_config(str(tmp_path), num_train_steps=2500, iterations_per_loop=1000,
                        save_checkpoints_steps=700, progress_seconds=60.0)
  # Unknown speed: a short first call. Fast steps: to the next checkpoint or loop end.
  assert training_loop._loop_steps(strategy, config, 0, None) == 10
  assert training_loop._loop_steps(strategy, config, 10, 0.001) == 690
  assert training_loop._loop_steps(strategy, config, 700, 0.001) == 300
  assert training_loop._loop_steps(strategy, config, 2100, 0.001) == 400
  assert training_loop._loop_steps(strategy, config, 2400, 0.001) == 100
  # 2.5 s per step: 24 steps make a minute; a step slower than a minute still runs.
  assert training_loop._loop_steps(strategy, config, 10, 2.5) == 24
  assert training_loop._loop_steps(strategy, config, 10, 120.0) == 1


def written_scalars(output_dir):
  """{tag: {step: value}} from the TensorBoard event files the loop wrote in `output_dir`."""
  scalars = {}
  for event_file in tf.io.gfile.glob(os.path.join(output_dir, "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(event_file):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        scalar = tf.make_ndarray(value.tensor)
        scalars.setdefault(value.tag, {})[event.step] = float(scalar)
  return scalars


def test_summaries_are_written_for_tensorboard(reference):
  scalars = written_scalars(reference[0])
  assert {"loss", "scaled_mean", "learning_rate", "examples_per_second"} <= set(scalars)
  assert sorted(scalars["loss"]) == [2, 4, 6]
  # After step s the next update uses the original's schedule at s: 1e-2 * (1 - s / 6).
  for step, rate in scalars["learning_rate"].items():
    np.testing.assert_allclose(rate, 1e-2 * (1 - step / 6), rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(scalars["loss"][6], reference[1].metrics["loss"], rtol=1e-6)


def test_eval_results_file_format(tmp_path):
  path = str(tmp_path / "eval_results.txt")
  training_loop.write_eval_results(path, {"loss": 1.5, "global_step": 7, "accuracy": 0.25})
  assert open(path).read() == "accuracy = 0.25\nglobal_step = 7\nloss = 1.5\n"


def test_shared_flags_have_the_original_defaults():
  flag_values = flags.FlagValues()
  cli.define_fine_tuning_flags(max_seq_length=384, flag_values=flag_values)
  cli.define_fine_tuning_flags(max_seq_length=384, flag_values=flag_values)  # Idempotent.
  cli.define_eval_flags(flag_values)
  cli.define_predict_flags(flag_values)
  expected = {"train_batch_size": 32, "learning_rate": 5e-5, "num_train_epochs": 3.0,
              "warmup_proportion": 0.1, "save_checkpoints_steps": 1000,
              "iterations_per_loop": 1000, "max_seq_length": 384, "use_tpu": False,
              "num_tpu_cores": 8, "tpu_name": None, "eval_batch_size": 8,
              "predict_batch_size": 8, "do_train": False, "distribution_strategy": "auto",
              "optimizer": "bert_adam", "lr_schedule": "original"}
  assert {name: flag_values[name].default for name in expected} == expected
  schedule = training_loop.TrainConfig("out", train_batch_size=32, num_train_epochs=3.0,
                                       warmup_proportion=0.1).with_schedule(3668)
  assert (schedule.num_train_steps, schedule.num_warmup_steps) == (343, 34)


def test_a_schedule_in_epochs_logs_how_its_steps_were_counted(caplog):
  """The line names what the task counted (SQuAD's original counts questions, Hugging Face their
  windows) and the kind of decay."""
  config = training_loop.TrainConfig("out", train_batch_size=32, num_train_epochs=3.0,
                                     warmup_proportion=0.1)
  with caplog.at_level("INFO", logger="absl"):
    config.with_schedule(3668)
    config = dataclasses.replace(config, num_train_epochs=2.0, lr_schedule="linear")
    assert config.with_schedule(3668, "questions").num_train_steps == 229
  assert ("num_train_steps = int(3668 training examples / batch 32 * 3 epochs) = 343; warmup 34 "
          "steps (0.1 of them); schedule: original (decay from step 0)") in caplog.text
  assert ("num_train_steps = int(3668 questions / batch 32 * 2 epochs) = 229; warmup 22 steps "
          "(0.1 of them); schedule: linear (decay from the end of warmup)") in caplog.text


def scripted_evaluations(values):
  """An evaluate_fn returning the next of `values` as {"m": value, "eval_loss": value}."""
  values = iter(values)

  def evaluate_fn(model):
    del model
    value = next(values)
    return {"m": value, "eval_loss": value}

  return evaluate_fn


def test_early_stopping_state_survives_a_resume(tmp_path):
  def train(output_dir, values, **overrides):
    return training_loop.train(
        tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
        train_config(str(output_dir), **dict(
            dict(num_train_steps=20, save_checkpoints_steps=4, keep_checkpoint_max=5,
                 eval_every_steps=2, early_stopping_patience=2, early_stopping_metric="m"),
            **overrides)),
        evaluate_fn=scripted_evaluations(values))

  whole = train(tmp_path / "whole", [0.1, 0.5, 0.4, 0.3, 0.9])
  assert whole.global_step == 8  # 0.5 at step 4, then two evaluations without improvement.
  assert [(e["step"], e["metrics"]["m"]) for e in whole.evaluations] == [
      (2, 0.1), (4, 0.5), (6, 0.4), (8, 0.3)]
  assert checkpoints.latest_checkpoint(str(tmp_path / "whole")).endswith("model.ckpt-8")
  # Killed after evaluating step 8 but before its checkpoint: resumes from step 4 with the
  # evaluations up to 4 (those after it are evaluated again), and stops at 8 again.
  resumed_dir = tmp_path / "resumed"
  resumed_dir.mkdir()
  copy_checkpoints(str(tmp_path / "whole"), str(resumed_dir), [4])
  tf.io.gfile.copy(str(tmp_path / "whole" / training_loop.EVAL_HISTORY_FILE),
                   str(resumed_dir / training_loop.EVAL_HISTORY_FILE))
  resumed = train(resumed_dir, [0.4, 0.3, 0.9])
  assert resumed.global_step == 8
  assert resumed.evaluations == whole.evaluations
  with open(resumed_dir / training_loop.EVAL_HISTORY_FILE) as f:
    assert json.load(f)["evaluations"] == whole.evaluations
  # A rerun after the early stop trains and evaluates no further.
  again = train(resumed_dir, [])
  assert again.global_step == 8 and again.examples_per_second == 0.0
  # Lower is better for a loss: 0.1 at step 2, then two evaluations without improvement.
  by_loss = train(tmp_path / "loss", [0.1, 0.5, 0.4, 0.3], early_stopping_metric="eval_loss",
                  keep_best_checkpoint=True)
  assert by_loss.global_step == 6
  assert by_loss.best_checkpoint == str(tmp_path / "loss" / "best" / "model.ckpt-2")


def test_an_unknown_early_stopping_metric_names_the_flag_and_the_metrics(tmp_path):
  with pytest.raises(errors.TrainingError, match=r"`early_stopping_metric`=f1 is not one of "
                     r"the evaluation's metrics: eval_loss, m"):
    training_loop.train(
        tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
        train_config(str(tmp_path), eval_every_steps=2, early_stopping_patience=1,
                     early_stopping_metric="f1"),
        evaluate_fn=scripted_evaluations([0.1]))


def killed_after_step_4(reference, output_dir):
  """output_dir as the reference run leaves it when killed after writing model.ckpt-4."""
  os.makedirs(output_dir)
  copy_checkpoints(reference[0], output_dir, [4])
  tf.io.gfile.copy(os.path.join(reference[0], training_loop.SETTINGS_FILE),
                   os.path.join(output_dir, training_loop.SETTINGS_FILE))
  return output_dir


def resume(output_dir, **overrides):
  return training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                             dataset_fn_of(examples(64)), train_config(output_dir, **overrides))


def recorded_settings(output_dir):
  with open(os.path.join(output_dir, training_loop.SETTINGS_FILE)) as f:
    return json.load(f)["phases"]


def test_a_resume_with_changed_settings_is_an_error_naming_each_unless_allowed(reference, tmp_path,
                                                                               caplog):
  assert recorded_settings(reference[0]) == {"0": dict(
      train_batch_size=8, learning_rate=1e-2, optimizer="bert_adam", lr_schedule="original",
      num_train_steps=6, num_warmup_steps=1, random_seed=12345, gradient_accumulation_steps=1,
      pack_sequences=False, mixed_precision="float32", **MODEL_SETTINGS)}
  output_dir = killed_after_step_4(reference, str(tmp_path / "changed"))
  # Another compute precision rounds every activation otherwise (probe 19: a bfloat16 run resumed
  # in float32 trained on without a word).
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    with pytest.raises(errors.TrainingError, match="`mixed_precision`: recorded float32, "
                                                   "now bfloat16"):
      resume(output_dir)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  # Accumulation and packing too: with dropout on, they draw other masks than the run did.
  changes = dict(learning_rate=2e-2, train_batch_size=4, gradient_accumulation_steps=2,
                 pack_sequences=True,
                 model_settings=dict(MODEL_SETTINGS, bert_config=dict(CONFIG, hidden_size=32)))
  with pytest.raises(errors.TrainingError) as error:
    resume(output_dir, **changes)
  message = str(error.value)
  for difference in ("`learning_rate`: recorded 0.01, now 0.02",
                     "`train_batch_size`: recorded 8, now 4",
                     "`gradient_accumulation_steps`: recorded 1, now 2",
                     "`pack_sequences`: recorded False, now True",
                     "`bert_config_file` (hidden_size): recorded 16, now 32",
                     "pass `allow_changed_settings`"):
    assert difference in message
  assert "\n" not in message and "max_seq_length" not in message
  assert checkpoints.latest_checkpoint(output_dir) == os.path.join(output_dir, "model.ckpt-4")
  # The same settings resume.
  assert resume(killed_after_step_4(reference, str(tmp_path / "same"))).global_step == 6
  # Accepted: a WARNING lists the differences, the run trains on with them and records them, so
  # that the old values are now the change.
  with caplog.at_level("INFO", logger="absl"):
    changed = resume(output_dir, learning_rate=2e-2, train_batch_size=4,
                     allow_changed_settings=True)
  assert changed.global_step == 6
  assert "`learning_rate`: recorded 0.01, now 0.02" in warnings_text(caplog)
  assert recorded_settings(output_dir)["0"]["learning_rate"] == 2e-2
  with pytest.raises(errors.TrainingError, match="`learning_rate`: recorded 0.02, now 0.01"):
    resume(output_dir)
  # Finished, the run trains no step with an allowed change, so its record still describes its
  # model (before, the record took the new values and then refused the model's own).
  finished = resume(output_dir, learning_rate=3e-2, train_batch_size=4,
                    allow_changed_settings=True)
  assert finished.global_step == 6
  assert recorded_settings(output_dir)["0"]["learning_rate"] == 2e-2


def test_a_resume_with_another_lr_schedule_is_refused_and_an_older_record_means_original(
    reference, tmp_path):
  output_dir = killed_after_step_4(reference, str(tmp_path / "out"))
  refused = "`lr_schedule`: recorded original, now linear"
  with pytest.raises(errors.TrainingError, match=refused):
    resume(output_dir, lr_schedule="linear")
  # A record written before --lr_schedule existed has none: that run had the original's schedule.
  path = os.path.join(output_dir, training_loop.SETTINGS_FILE)
  phases = recorded_settings(output_dir)
  del phases["0"]["lr_schedule"]
  with open(path, "w") as f:
    json.dump({"phases": phases}, f)
  with pytest.raises(errors.TrainingError, match=refused):
    resume(output_dir, lr_schedule="linear")
  assert resume(output_dir).global_step == 6
  assert recorded_settings(output_dir)["0"]["lr_schedule"] == "original"


def test_pretraining_phase2_keeps_the_schedule_kind():
  phase1 = train_config("out", lr_schedule="linear")
  phase2 = pretraining.phase2_config(phase1, 4, learning_rate=5e-3, num_warmup_steps=1,
                                     train_batch_size=4)
  assert (phase2.lr_schedule, phase2.phase_start_step, phase2.num_train_steps) == ("linear", 6, 10)
