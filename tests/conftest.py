"""Shared test setup: import path, the scripts' TensorFlow settings (`tf_defaults`), quiet
TensorFlow logs, and access to ../shared fixtures.

Tests that need `../shared` (real vocabs, checkpoint index, corpora) must go through
`shared_path`, which skips the test with a clear reason when the directory is absent
(users clone the repository without it; CI always has it).
"""
import contextlib
import logging
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared")

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)
import tf_defaults  # pylint: disable=unused-import,wrong-import-position  (the scripts' TF settings)


def pytest_configure(config) -> None:
  """Registers the markers the tests use (each file says its own with `pytestmark`)."""
  config.addinivalue_line("markers", "readme: runs the README's shell commands "
                          "(tests/test_readme_commands.py)")
  config.addinivalue_line("markers", "slow: a file that takes over about 20 s of one worker "
                          "(scripts in fresh processes, exports, several trainings); "
                          "`-m 'not slow'` is the fast subset")
  config.addinivalue_line("markers", "serving: exports answered by TF's C++ SavedModel loader "
                          "(tests/cpp_serving_client.py)")
  config.addinivalue_line("markers", "reference: another library's own code is the referee "
                          "(PyTorch and transformers, keras-hub, tensorflow_hub)")


# The level of absl's logger before any script ran in this process.
_ABSL_LOGGER_LEVEL = logging.getLogger("absl").level


@pytest.fixture(autouse=True)
def absl_logger_level():
  """Every test starts and ends with absl's logger at the level it had before any script ran: a
  script run in-process (absl's `app.run`) sets it to WARNING, which would hide INFO lines from
  `caplog` in the tests after it in the same worker, whichever file they are in; one run by a
  module fixture does so before this fixture starts, so restoring the level found then is not
  enough."""
  logger = logging.getLogger("absl")
  logger.setLevel(_ABSL_LOGGER_LEVEL)
  yield
  logger.setLevel(_ABSL_LOGGER_LEVEL)


def shared_path(*parts: str) -> str:
  """Returns the path of a file under ../shared, or skips the calling test if it is absent."""
  path = os.path.join(SHARED_DIR, *parts)
  if not os.path.exists(path):
    pytest.skip("needs ../shared/%s (clone the shared fixtures beside the repository)" %
                "/".join(parts))
  return path


@pytest.fixture
def uncased_vocab_file() -> str:
  """Google's 30522-token uncased English WordPiece vocab."""
  return shared_path("fixtures", "uncased_vocab", "vocab.txt")


@pytest.fixture
def chinese_bert_dir() -> str:
  """Directory with the chinese_L-12_H-768_A-12 index, config and vocab."""
  return shared_path("fixtures", "google_bert_chinese")


def write_model_files(directory: str, config, vocab: list) -> tuple:
  """Writes `bert_config.json` (from a modeling.BertConfig) and `vocab.txt` (one token a line) into
  directory, as a released model ships them; returns their paths (config, vocab)."""
  config_file = os.path.join(directory, "bert_config.json")
  vocab_file = os.path.join(directory, "vocab.txt")
  with open(config_file, "w", encoding="utf-8") as writer:
    writer.write(config.to_json_string())
  with open(vocab_file, "w", encoding="utf-8") as writer:
    writer.write("\n".join(vocab) + "\n")
  return config_file, vocab_file


@contextlib.contextmanager
def small_tmpfs(mount_point, size: str, read_only: bool = False):
  """Mounts a tmpfs of `size` (e.g. "1m", "256k"; read-only if asked) at the new directory
  mount_point for the block, so a test can fill a real disk or meet a read-only one (root writes
  through permission bits, not through a read-only mount); skips the test where mounting is not
  allowed (needs root)."""
  os.makedirs(mount_point)
  options = "size=" + size + (",ro" if read_only else "")
  command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)]
  mounted = subprocess.run(command, capture_output=True, text=True)
  if mounted.returncode:
    pytest.skip("cannot mount a small tmpfs (needs root): %s" % mounted.stderr.strip())
  try:
    yield mount_point
  finally:
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
  """(output_dir, TrainResult, summary) of training_scenario's run on one device, in this
  process: what the training tests compare strategies, resumes and damaged runs with. Read only."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import training_scenario  # pylint: disable=g-import-not-at-top
  output_dir = str(tmp_path_factory.mktemp("one_device"))
  result, summary = training_scenario.train_and_predict(tf.distribute.get_strategy(), output_dir)
  return output_dir, result, summary
