"""Real run_pretraining processes killed with SIGKILL at chosen moments, then run again.

The moments are caught with inotify on the output directory, and the process is frozen with
SIGSTOP before it is killed, so the test knows what was on disk at the kill: a checkpoint's data
file still under TensorFlow's temporary name, a checkpoint complete but not yet in the state
file, a job holding the directory's lock before it restored anything. Every rerun must resume
from the newest complete checkpoint, and the last one must end with exactly (bit for bit) the
weights and optimizer slots of an uninterrupted run, dropout included.
"""
import ctypes
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from test_run_pretraining import CONFIG, MAX_PREDICTIONS, REPO_ROOT, SEQ_LENGTH
from test_run_pretraining import write_records
import modeling

pytestmark = pytest.mark.slow

NUM_STEPS = 40
IN_MODIFY, IN_CREATE, IN_MOVED_TO = 0x2, 0x100, 0x80


def cli(tmp_path, output_dir, *extra):
  return [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"), "--do_train",
          "--input_file=%s" % (tmp_path / "data*.tfrecord"),
          "--bert_config_file=%s" % (tmp_path / "bert_config.json"),
          "--output_dir=%s" % output_dir, "--max_seq_length=%d" % SEQ_LENGTH,
          "--max_predictions_per_seq=%d" % MAX_PREDICTIONS, "--train_batch_size=8",
          "--num_train_steps=%d" % NUM_STEPS, "--num_warmup_steps=5", "--learning_rate=1e-3",
          "--save_checkpoints_steps=1", "--iterations_per_loop=1", "--keep_checkpoint_max=3"
          ] + list(extra)


@pytest.fixture
def data(tmp_path):
  """Two small TFRecord files and a tiny config with dropout on.

  The vocabulary is large (the records use only its first words) so that a checkpoint's data file
  is about 12 MB and stays under its temporary name for ~10 ms: with the tiny vocabulary it is
  there for ~1 ms, shorter than the watcher's wake-up on a busy machine.
  """
  write_records(tmp_path / "data-0.tfrecord", 64, seed=3)
  write_records(tmp_path / "data-1.tfrecord", 48, seed=4)
  config = dict(CONFIG, vocab_size=30000, hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1)
  (tmp_path / "bert_config.json").write_text(
      modeling.BertConfig.from_dict(config).to_json_string())
  return tmp_path


class DirectoryWatch:
  """Names created, written or renamed into a directory, from Linux inotify."""

  def __init__(self, path):
    libc = ctypes.CDLL(None, use_errno=True)
    self.fd = libc.inotify_init1(os.O_NONBLOCK)
    events = IN_MODIFY | IN_CREATE | IN_MOVED_TO
    if self.fd < 0 or libc.inotify_add_watch(self.fd, path.encode(), events) < 0:
      pytest.skip("inotify is not available")
    self.path = path

  def names(self, timeout):
    if not select.select([self.fd], [], [], timeout)[0]:
      return []
    buffer, names, offset = os.read(self.fd, 65536), [], 0
    while offset < len(buffer):
      _, mask, _, length = struct.unpack_from("iIII", buffer, offset)
      name = buffer[offset + 16:offset + 16 + length].rstrip(b"\0").decode()
      names.append((mask, name))
      offset += 16 + length
    return names

  def close(self):
    os.close(self.fd)


def wait_until_stopped(pid):
  """Waits until every thread of a process that was sent SIGSTOP is stopped."""
  while True:
    states = []
    for task in os.listdir("/proc/%d/task" % pid):
      try:
        with open("/proc/%d/task/%s/stat" % (pid, task)) as f:
          states.append(f.read().rsplit(")", 1)[1].split()[0])
      except FileNotFoundError:
        pass
    if all(state in "tT" for state in states):
      return
    time.sleep(0.001)


def stop_when(process, watch, moment, still=None, timeout=180):
  """Freezes `process` (SIGSTOP) at the first event for which `moment(mask, name)` is true and,
  once it is frozen, `still(name)` (default: the name still exists) holds; returns the name.
  Fails if the process ends first."""
  still = still or (lambda name: os.path.exists(os.path.join(watch.path, name)))
  deadline = time.time() + timeout
  while time.time() < deadline:
    for mask, name in watch.names(0.2):
      if moment(mask, name):
        process.send_signal(signal.SIGSTOP)
        wait_until_stopped(process.pid)
        if still(name):
          return name
        process.send_signal(signal.SIGCONT)
    assert process.poll() is None, "ended before the moment:\n" + process.log()[-3000:]
  pytest.fail("the moment did not come within %d s" % timeout)


class Run(subprocess.Popen):
  """A CLI process whose stderr goes to a file (a pipe could fill up and block it)."""

  def __init__(self, command, log_path):
    self.log_path = log_path
    with open(log_path, "w") as log:
      super().__init__(command, stdout=subprocess.DEVNULL, stderr=log, text=True)

  def log(self):
    with open(self.log_path) as f:
      return f.read()

  def kill_now(self):
    self.send_signal(signal.SIGKILL)
    self.wait()


def newest_complete_checkpoint(output_dir):
  """The step of the newest checkpoint whose index and data files are both in place."""
  steps = [int(name[len("model.ckpt-"):-len(".index")]) for name in os.listdir(output_dir)
           if name.startswith("model.ckpt-") and name.endswith(".index")]
  return max(s for s in steps
             if os.path.exists(os.path.join(output_dir, "model.ckpt-%d.data-00000-of-00001" % s)))


def checkpoint_values(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def lock_holder(output_dir):
  """The pid in output_dir/.lock (None while it is empty or absent)."""
  try:
    fields = (output_dir / ".lock").read_text().split()
  except FileNotFoundError:
    return None
  return int(fields[0]) if fields else None


def index_step(name):
  return int(name[len("model.ckpt-"):-len(".index")])


def test_killed_runs_resume_from_the_last_complete_checkpoint_and_end_bit_identical(data):
  reference_dir, output_dir = data / "reference", data / "out"
  reference = Run(cli(data, reference_dir), data / "reference.log")
  output_dir.mkdir()
  watch = DirectoryWatch(str(output_dir))
  try:
    # 1. While a checkpoint's data file is being written (under its temporary name), once three
    #    checkpoints are complete.
    first = Run(cli(data, output_dir), data / "first.log")
    leftover = stop_when(first, watch, lambda mask, name: ".data-" in name and "tempstate" in name
                         and sum(n.endswith(".index") for n in os.listdir(output_dir)) >= 3)
    first.kill_now()
    first_resume = newest_complete_checkpoint(str(output_dir))
    assert (output_dir / leftover).exists()

    # 2. Just after a checkpoint's files are complete, before the state file names it. While
    #    this job holds the directory's lock (running, then frozen), a second job on the directory
    #    is refused and names it. The killed holder leaves its lock file behind.
    second = Run(cli(data, output_dir), data / "second.log")
    holds_lock = lambda mask, name: name == ".lock" and lock_holder(output_dir) == second.pid
    stop_when(second, watch, holds_lock)
    second.send_signal(signal.SIGCONT)
    competitor = Run(cli(data, output_dir), data / "competitor.log")
    stop_when(second, watch, lambda mask, name: mask & IN_MOVED_TO and name.endswith(".index")
              and index_step(name) > first_resume + 2,
              still=lambda name: '%s"' % name[:-len(".index")] not in
              (output_dir / "checkpoint").read_text())
    state_file = (output_dir / "checkpoint").read_text()
    assert competitor.wait(timeout=180) == 1, competitor.log()[-3000:]
    second.kill_now()
    second_resume = newest_complete_checkpoint(str(output_dir))

    # 4. Runs to the end.
    last = subprocess.run(cli(data, output_dir), capture_output=True, text=True, timeout=180)
  finally:
    watch.close()
    reference.wait(timeout=300)
  assert reference.returncode == 0, reference.log()[-3000:]

  second_log = second.log()
  assert "Removing %s, left by a run that was killed" % (output_dir / leftover) in second_log
  assert not (output_dir / leftover).exists()
  assert "Resuming from %s/model.ckpt-%d (step %d)" % (output_dir, first_resume,
                                                       first_resume) in second_log
  assert '"model.ckpt-%d"' % second_resume not in state_file  # Complete, not yet named.
  competitor_log = competitor.log()
  assert competitor_log.strip().splitlines()[-1] == (
      "run_pretraining.py: error: --output_dir=%s is in use by pid %d on host %s since %s "
      "(lock file %s/.lock): only one job may write to a directory. If that job is gone, remove "
      "the lock file" % (output_dir, second.pid, socket.gethostname(),
                         competitor_log.split(" since ")[-1][:19], output_dir))
  assert last.returncode == 0, last.stderr[-3000:]
  assert "Taking over the lock of pid %d" % second.pid in last.stderr
  assert "Resuming from %s/model.ckpt-%d (step %d)" % (output_dir, second_resume,
                                                       second_resume) in last.stderr
  assert not [n for n in os.listdir(output_dir)
              if "tempstate" in n or ".tmp-" in n or n == ".lock"]
  expected = checkpoint_values(str(reference_dir / ("model.ckpt-%d" % NUM_STEPS)))
  actual = checkpoint_values(str(output_dir / ("model.ckpt-%d" % NUM_STEPS)))
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)


def test_unwritable_output_dir_is_a_one_line_error(data):
  """(test_training_loop.py and test_checkpoint_faults.py check the other TrainingErrors; they
  reach the user the same way.)"""
  (data / "file.txt").write_text("a file, not a directory")
  unwritable = data / "file.txt" / "out"
  run = subprocess.run(cli(data, unwritable), capture_output=True, text=True, timeout=180)
  assert run.returncode == 1
  assert run.stderr.strip().splitlines()[-1] == (
      "run_pretraining.py: error: --output_dir=%s: %s is a file, not a directory" %
      (unwritable, data / "file.txt"))
  assert "Traceback" not in run.stderr
