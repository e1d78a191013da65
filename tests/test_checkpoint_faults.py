"""Damaged checkpoints, full disks, the output_dir lock and partial init checkpoints: training and
evaluation fall back to the newest intact checkpoint, never start afresh over a damaged history,
leave no temporaries, and refuse what cannot work in one line.
"""
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

from conftest import small_tmpfs  # pylint: disable=g-import-not-at-top
import atomic_files  # pylint: disable=g-import-not-at-top
import checkpoints  # pylint: disable=g-import-not-at-top
import errors  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top
from training_scenario import (  # pylint: disable=g-import-not-at-top
    checkpoint_values, copy_checkpoints, dataset_fn_of, examples, loss_fn, model_fn, train_config,
    warnings_text)

pytestmark = pytest.mark.slow


def damage(output_dir, how):
  """Damages model.ckpt-6 (or the state file) of a directory holding model.ckpt-4 and -6."""
  prefix = os.path.join(output_dir, "model.ckpt-6")
  if how == "index_deleted":
    os.remove(prefix + ".index")
  elif how == "data_truncated":
    data = prefix + ".data-00000-of-00001"
    os.truncate(data, os.path.getsize(data) // 2)
  elif how == "data_corrupted":
    data = prefix + ".data-00000-of-00001"
    with open(data, "r+b") as f:
      f.seek(os.path.getsize(data) // 2)
      f.write(b"\xff" * 64)
  elif how == "state_names_missing_step":
    for path in tf.io.gfile.glob(prefix + ".*"):
      os.remove(path)
    checkpoints._write_state_file(output_dir, [os.path.join(output_dir, "model.ckpt-%d" % step)
                                            for step in (4, 6)])
  return "model.ckpt-6"


@pytest.mark.parametrize("how", ["index_deleted", "data_truncated", "data_corrupted",
                                 "state_names_missing_step"])
def test_damaged_latest_checkpoint_falls_back_to_the_previous_intact_one(reference, tmp_path, how,
                                                                         caplog):
  output_dir, straight, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4, 6])
  damage(str(tmp_path), how)
  step_4 = {p: open(p, "rb").read() for p in tf.io.gfile.glob(str(tmp_path / "model.ckpt-4.*"))}
  with caplog.at_level("INFO", logger="absl"):
    resumed = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                             dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert "Checkpoint %s is damaged" % (tmp_path / "model.ckpt-6") in warnings_text(caplog)
  assert "Resuming from %s (step 4)" % (tmp_path / "model.ckpt-4") in caplog.text
  # Steps 5-6 were trained again from step 4 (the same batches) and equal the straight run.
  assert resumed.global_step == 6
  expected, actual = checkpoint_values(straight.checkpoint), checkpoint_values(resumed.checkpoint)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)
  # The intact older checkpoint was not overwritten; the state file lists the new step 6.
  for path, content in step_4.items():
    assert open(path, "rb").read() == content
  assert checkpoints.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-6")


def test_all_checkpoints_unreadable_is_an_error_not_a_fresh_start(reference, tmp_path):
  output_dir, _, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4, 6])
  damage(str(tmp_path), "index_deleted")
  os.truncate(str(tmp_path / "model.ckpt-4.data-00000-of-00001"), 100)
  before = sorted(os.listdir(tmp_path))
  expected = (r"no readable checkpoint in %s: model\.ckpt-6 \(its \.index file is missing\); "
              r"model\.ckpt-4 \(cannot be read \(.*\)\)\. Remove these files" % tmp_path)
  with pytest.raises(errors.TrainingError, match=expected):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   train_config(str(tmp_path)))
  assert sorted(os.listdir(tmp_path)) == before  # Nothing written, nothing removed.
  # Evaluation and prediction refuse too, instead of using a random model.
  with pytest.raises(errors.TrainingError, match=r"model\.ckpt-6, the newest .* is damaged"):
    checkpoints.restore_model(tf.distribute.get_strategy(), model_fn, str(tmp_path))


def test_evaluation_refuses_a_damaged_newest_checkpoint(reference, tmp_path):
  # An older checkpoint would answer for another model than the run's last: an error naming it.
  output_dir, _, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4, 6])
  damage(str(tmp_path), "data_truncated")
  with pytest.raises(errors.TrainingError,
                     match=r"checkpoint %s, the newest of its directory, is damaged: cannot be "
                     r"read" % re.escape(str(tmp_path / "model.ckpt-6"))):
    checkpoints.restore_model(tf.distribute.get_strategy(), model_fn, str(tmp_path))


def test_relative_output_dir_keeps_the_checkpoint_history(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                 train_config("out", keep_checkpoint_max=2))
  state = tf.train.get_checkpoint_state("out")
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      "model.ckpt-4", "model.ckpt-6"]
  assert not tf.io.gfile.glob("out/model.ckpt-2.*")


@pytest.fixture
def small_filesystem(tmp_path):
  """A directory on a 256 KB tmpfs (skips where mounting is not allowed)."""
  with small_tmpfs(tmp_path / "small", "256k") as mount_point:
    yield str(mount_point)


def test_full_disk_while_writing_a_checkpoint_leaves_no_temporaries(reference, small_filesystem):
  output_dir = os.path.join(small_filesystem, "out")
  config = train_config(output_dir, keep_checkpoint_max=5)
  page = 4096
  size = sum(-(-os.path.getsize(p) // page) * page
             for p in tf.io.gfile.glob(reference[1].checkpoint + ".*"))
  # Fill the disk so that one checkpoint (and the small files) fit but not two.
  os.makedirs(output_dir)
  with open(os.path.join(small_filesystem, "ballast"), "wb") as f:
    f.write(b"\0" * (256 * 1024 - size - size // 2 - 4 * page))
  with pytest.raises(errors.TrainingError,
                     match=r"^cannot write checkpoint .*model\.ckpt-(\d+) \("
                     r"ResourceExhaustedError: "
                     r".*No space left on device\); the latest complete checkpoint is "
                     r".*model\.ckpt-\d+$") as error:
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   config)
  failed_step = int(str(error.value).split("model.ckpt-")[1].split(" ")[0])
  names = os.listdir(output_dir)
  assert not [n for n in names if "tempstate" in n or ".tmp-" in n], names
  assert not [n for n in names if n.startswith("model.ckpt-%d." % failed_step)], names
  latest = checkpoints.latest_checkpoint(output_dir)
  assert checkpoints.checkpoint_step(latest) == failed_step - 2
  # With room again, the same command resumes from the last complete checkpoint.
  os.remove(os.path.join(small_filesystem, "ballast"))
  result = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                          dataset_fn_of(examples(64)), config)
  assert result.global_step == 6
  expected = checkpoint_values(reference[1].checkpoint)
  actual = checkpoint_values(result.checkpoint)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)


def test_a_new_run_removes_temporaries_left_by_a_killed_one(reference, tmp_path, caplog):
  output_dir, _, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4])
  leftovers = [tmp_path / "model.ckpt-6.data-00000-of-00001.tempstate8372", tmp_path /
               "model.ckpt-6.index.tempstate1234",
               tmp_path / (".checkpoint.tmp-%s-4242" % socket.gethostname())]
  for path in leftovers:
    path.write_bytes(b"x" * 1000)
  with caplog.at_level("INFO", logger="absl"):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   train_config(str(tmp_path)))
  for path in leftovers:
    assert not path.exists()
    assert "Removing %s" % path in warnings_text(caplog)


def test_a_second_writer_is_refused_and_a_dead_holder_is_taken_over(tmp_path, caplog):
  output_dir = str(tmp_path / "out")
  with atomic_files.OutputDirLock(output_dir):
    holder = open(os.path.join(output_dir, ".lock")).read().split()
    assert holder[:2] == [str(os.getpid()), socket.gethostname()]
    with pytest.raises(errors.TrainingError,
                       match=r"`output_dir`=%s is in use by pid %d on host %s since "
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(lock file %s/\.lock\)" % (
                           output_dir, os.getpid(), socket.gethostname(), output_dir)):
      training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                     dataset_fn_of(examples(64)), train_config(output_dir))
  assert not os.path.exists(os.path.join(output_dir, ".lock"))  # Released.
  assert not tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-*"))
  # A lock file left by a process that is gone (killed: no one holds it) is taken over.
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  with open(os.path.join(output_dir, ".lock"), "w") as f:
    f.write("%s %s 1700000000\n" % (dead, socket.gethostname()))
  with caplog.at_level("INFO", logger="absl"):
    result = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                            dataset_fn_of(examples(64)), train_config(output_dir))
  assert result.global_step == 6
  assert "Taking over the lock of pid %s on host %s" % (dead, socket.gethostname()) in (
      warnings_text(caplog))
  assert not os.path.exists(os.path.join(output_dir, ".lock"))


def test_unwritable_output_dir_is_a_one_line_error(tmp_path):
  (tmp_path / "file.txt").write_text("not a directory")
  output_dir = str(tmp_path / "file.txt" / "out")
  with pytest.raises(errors.TrainingError,
                     match=r"^`output_dir`=%s cannot be written \(\w+: .+\)$" % output_dir):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   train_config(output_dir))


def test_init_checkpoint_missing_encoder_variables_is_an_error(reference, tmp_path, caplog):
  # Every name under an extra `model/` scope: nothing matches.
  values = checkpoint_values(reference[1].checkpoint)
  prefixed = str(tmp_path / "prefixed" / "model.ckpt")
  checkpoints.write_checkpoint({"model/" + name: value for name, value in values.items()
                             if not checkpoints.is_training_state_name(name)}, prefixed)
  output_dir = str(tmp_path / "out")
  config = train_config(output_dir, init_checkpoint=prefixed)
  with pytest.raises(errors.TrainingError,
                     match=r"`init_checkpoint`=.*prefixed/model\.ckpt fills only 0 of the "
                     r"encoder's 23 variables: 23 missing, e\.g\. bert/embeddings/LayerNorm/beta, "
                     r".*; its unused names are e\.g\. model/bert/.*"
                     r"`allow_partial_init_checkpoint`"):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   config)
  assert not tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-*"))
  with pytest.raises(errors.TrainingError, match="fills only 0 of the encoder's 23"):
    checkpoints.restore_model(tf.distribute.get_strategy(), model_fn, None, prefixed)
  # Allowed explicitly: it trains, and the load report is a warning.
  with caplog.at_level("INFO", logger="absl"):
    result = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                            dataset_fn_of(examples(64)),
                            train_config(output_dir, init_checkpoint=prefixed,
                                         allow_partial_init_checkpoint=True))
  assert result.global_step == 6
  assert re.search(r"Loaded 0 of the model's 25 variables from .*; 25 model variables not in the "
                   r"checkpoint .*; 25 checkpoint variables unused: model/bert/",
                   warnings_text(caplog))


def test_init_checkpoint_without_the_task_head_is_fine(reference, tmp_path, caplog):
  values = checkpoint_values(reference[1].checkpoint)
  encoder_only = str(tmp_path / "encoder" / "bert_model.ckpt")
  checkpoints.write_checkpoint({name: value for name, value in values.items()
                             if name.startswith("bert/") and
                             not checkpoints.is_training_state_name(name)}, encoder_only)
  with caplog.at_level("INFO", logger="absl"):
    report = checkpoints.load_init_checkpoint(model_fn(), encoder_only)
  assert sorted(report.missing) == ["output_bias", "output_weights"]
  assert "2 model variables not in the checkpoint (left at their initial values): output_bias, " \
         "output_weights" in warnings_text(caplog)


@pytest.mark.parametrize("marker, what, flag", [
    ("model.safetensors", "a Hugging Face model", "--hf_model_path"),
    ("pytorch_model.bin", "a Hugging Face model", "--hf_model_path"),
    ("model.weights.h5", "a KerasHub preset", "--keras_hub_preset"),
    ("saved_model.pb", "a SavedModel", "--tf_hub_model_path")])
def test_init_checkpoint_of_another_library_s_model_says_how_to_convert_it(tmp_path, marker, what,
                                                                            flag):
  (tmp_path / "config.json").write_text("{}")
  (tmp_path / marker).write_bytes(b"weights")
  with pytest.raises(checkpoints.CheckpointError, match=re.escape(
      "directory %s holds %s, not a checkpoint of Google's format: convert it with "
      "convert_checkpoint.py %s=%s" % (tmp_path, what, flag, tmp_path))):
    checkpoints.resolve_checkpoint_path(str(tmp_path))


def test_an_object_based_init_checkpoint_is_refused_before_anything_is_written(tmp_path):
  """tf.train.Checkpoint's keys are object paths (Model Garden's checkpoints): no variable would
  load. Refused in the validation pass; before, after the label list and the training cache were
  written into the new output_dir."""
  import modeling  # pylint: disable=g-import-not-at-top
  from conftest import write_model_files  # pylint: disable=g-import-not-at-top
  config_file, vocab_file = write_model_files(str(tmp_path), modeling.BertConfig(
      vocab_size=6, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
      intermediate_size=16), ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
  prefix = tf.train.Checkpoint(kernel=tf.Variable([1.0])).write(str(tmp_path / "garden" / "ckpt"))
  (tmp_path / "data").mkdir()
  (tmp_path / "data" / "train.tsv").write_text("text_a\tlabel\na\tx\na\ty\n")
  run = subprocess.run(
      [sys.executable, "run_classifier.py", "--task_name=generic", "--do_train",
       "--data_dir=%s" % (tmp_path / "data"), "--vocab_file=" + vocab_file,
       "--bert_config_file=" + config_file, "--init_checkpoint=" + prefix,
       "--output_dir=%s" % (tmp_path / "out")], cwd=os.path.dirname(os.path.dirname(
           os.path.abspath(__file__))), capture_output=True, text=True, timeout=300)
  assert run.returncode == 1, run.stderr[-2000:]
  assert run.stderr.strip().splitlines()[-1].startswith(
      "run_classifier.py: error: checkpoint %s is object-based" % prefix)
  assert not (tmp_path / "out").exists()
