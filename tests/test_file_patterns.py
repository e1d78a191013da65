"""Tests of file_patterns.py: the one rule by which every --input_file names its files."""
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
import errors
import file_patterns


def touch(path):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("x")
  return str(path)


def test_sorted_per_pattern_in_pattern_order_repeats_kept_and_named(tmp_path, caplog):
  b, a, c = touch(tmp_path / "b.txt"), touch(tmp_path / "a.txt"), touch(tmp_path / "c.log")
  value = " %s , ,%s/*.txt,%s" % (c, tmp_path, b)
  assert file_patterns.expand(value) == [c, a, b, b]
  assert caplog.messages == ["`input_file` names %s 2 times: it is read 2 times per pass" % b]
  # One file under two spellings is named twice too (probe 25 case 74: a corpus read twice).
  caplog.clear()
  other_spelling = os.path.join(str(tmp_path), "..", tmp_path.name, "b.txt")
  assert file_patterns.expand("%s,%s" % (b, other_spelling)) == [b, other_spelling]
  assert caplog.messages == ["`input_file` names %s 2 times (as %s, %s): it is read 2 times per "
                             "pass" % (b, b, other_spelling)]


def test_directories_and_hidden_files_are_skipped_unless_named(tmp_path):
  visible = touch(tmp_path / "part-0.txt")
  hidden = touch(tmp_path / ".part-1.txt.tmp-host-123")  # An output still being written.
  (tmp_path / "part-dir.txt").mkdir()
  assert file_patterns.expand(str(tmp_path / "part*")) == [visible]
  assert file_patterns.expand(str(tmp_path / ".part*")) == [hidden]
  with pytest.raises(ValueError, match=r"^`input_file`: '.*part-dir\.txt' matches no files$"):
    file_patterns.expand(str(tmp_path / "part-dir.txt"))


def test_errors_name_the_flag_and_the_pattern(tmp_path):
  touch(tmp_path / "a.txt")
  with pytest.raises(ValueError, match=r"^--train_files: '.*missing\*\.txt' matches no files$"):
    file_patterns.expand("%s/a.txt,%s/missing*.txt" % (tmp_path, tmp_path), "--train_files")
  for empty in ("", " , ", None):
    with pytest.raises(ValueError, match="^`input_file` is required"):
      file_patterns.expand(empty)


def test_remote_patterns_go_through_gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  root = "ram://file_patterns_test"
  tf.io.gfile.makedirs(root + "/shard-dir")
  for name in ("shard-1", "shard-0", ".shard-2"):
    with tf.io.gfile.GFile("%s/%s" % (root, name), "w") as f:
      f.write("x")
  assert file_patterns.expand(root + "/shard*") == [root + "/shard-0", root + "/shard-1"]
  with pytest.raises(ValueError, match="ram://file_patterns_test/none' matches no files"):
    file_patterns.expand(root + "/none")


def test_local_patterns_do_not_import_tensorflow(tmp_path):
  touch(tmp_path / "a.txt")
  code = ("import sys, file_patterns; assert file_patterns.expand(sys.argv[1]); "
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
  subprocess.run([sys.executable, "-c", code, str(tmp_path / "*.txt")], cwd=REPO_ROOT, check=True)


def test_remote_pattern_that_cannot_be_listed_names_flag_and_pattern():
  with pytest.raises(errors.InputError,
                     match=r"^`input_file`: 'nosuchfs://bucket/\*\.tfrecord' cannot be listed "
                     r"\(UnimplementedError: .*nosuchfs"):
    file_patterns.expand("nosuchfs://bucket/*.tfrecord")
