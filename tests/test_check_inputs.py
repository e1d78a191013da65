"""Everything a fine-tuning run will read or write after training is checked before training.

Each case runs a script in its own process (the scripts define clashing flags) with --do_train and
a later phase whose input is at fault: the run must end with one line naming the file and what is
wrong, without a traceback, before the first checkpoint (no `checkpoint` file in output_dir), and
without creating the export directory or the output directory.
"""

import glob
import json
import logging
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO_ROOT, small_tmpfs, write_model_files
import atomic_files
import checkpoints
import cli
import cli_setup
import errors
import export
import feature_extraction
import modeling
import text_pairs
import tokenization

pytestmark = pytest.mark.slow

WORDS = ["good", "bad", "film", "day", "alice", "paris", "visited", "the", "a", "sat"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
CONFIG = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=32)


def _write(path, text: str) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def _run(tmp_path, script: str, *arguments: str) -> tuple:
  """(exit status, last stderr line, whether stderr has a traceback, output_dir)."""
  config_file, vocab_file = write_model_files(str(tmp_path), CONFIG, VOCAB)
  output_dir = str(tmp_path / "runs" / "out")
  run = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, script), "--vocab_file=" + vocab_file,
       "--bert_config_file=" + config_file, "--output_dir=" + output_dir, "--do_train=true",
       "--max_seq_length=16", "--train_batch_size=2", "--num_train_epochs=1",
       "--data_dir=%s" % (tmp_path / "data")] + list(arguments),
      capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert not os.path.exists(os.path.join(output_dir, "checkpoint")), "it trained first"
  if run.returncode == 1:  # A refusal creates nothing: not output_dir, nor its missing parent.
    assert not os.path.exists(tmp_path / "runs"), os.listdir(output_dir)
  return run.returncode, run.stderr.strip().splitlines()[-1], "Traceback" in run.stderr


def _classifier_data(tmp_path, dev_label: str = "bad", test: bool = True) -> str:
  data = tmp_path / "data"
  rows = "text_a\tlabel\n" + "good film\tgood\nbad day\tbad\n" * 2
  _write(data / "train.tsv", rows)
  _write(data / "dev.tsv", "text_a\tlabel\ngood film\tgood\nbad day\t%s\n" % dev_label)
  if test:
    _write(data / "test.tsv", "text_a\ngood film\n")
  return str(data)


def test_a_dev_label_outside_the_training_labels(tmp_path):
  data = _classifier_data(tmp_path, dev_label="neutral")
  status, line, traceback = _run(tmp_path, "run_classifier.py", "--task_name=generic",
                                 "--do_eval=true")
  assert (status, traceback) == (1, False)
  assert line.startswith("run_classifier.py: error: %s/dev.tsv:3: unknown label 'neutral'" % data)


def test_a_missing_test_file(tmp_path):
  data = _classifier_data(tmp_path, test=False)
  status, line, traceback = _run(tmp_path, "run_classifier.py", "--task_name=generic",
                                 "--do_predict=true")
  assert (status, traceback) == (1, False)
  assert line == ("run_classifier.py: error: %s: expected exactly one of test.tsv, test.csv, "
                  "test.jsonl, found none" % data)


def _conll(sentences) -> str:
  return "-DOCSTART- -X- -X- O\n\n" + "\n\n".join(
      "\n".join("%s NN O %s" % pair for pair in sentence) for sentence in sentences) + "\n"


def test_a_tag_only_in_the_ner_test_file(tmp_path):
  data = tmp_path / "data"
  sentence = [("alice", "B-PER"), ("visited", "O"), ("paris", "B-LOC")]
  _write(data / "train.txt", _conll([sentence] * 4))
  _write(data / "dev.txt", _conll([sentence]))
  _write(data / "test.txt", _conll([[("alice", "B-PER"), ("visited", "O"), ("paris", "B-GPE")]]))
  status, line, traceback = _run(tmp_path, "run_ner.py", "--do_eval=true", "--do_predict=true")
  assert (status, traceback) == (1, False)
  assert line.startswith("run_ner.py: error: ")
  # Line 5 of test.txt (after -DOCSTART- and a blank line) holds the word.
  assert ("%s:5: 'paris' has tag 'B-GPE', which is not in the training tag list"
          % (data / "test.txt")) in line


def test_a_multiple_choice_test_file_that_is_missing(tmp_path):
  data = tmp_path / "data"
  header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3"
  rows = "".join("%d,v,1,s,the film,a,g,good day,bad day,,,0\n" % i for i in range(4))
  _write(data / "train.csv", header + ",label\n" + rows)
  status, line, traceback = _run(tmp_path, "run_multiple_choice.py", "--do_predict=true")
  assert (status, traceback) == (1, False)
  assert line == "run_multiple_choice.py: error: %s/test.csv: no such file (the test file)" % data


def test_an_export_dir_that_is_a_file(tmp_path):
  _classifier_data(tmp_path)
  export_dir = _write(tmp_path / "export", "")
  status, line, traceback = _run(tmp_path, "run_classifier.py", "--task_name=generic",
                                 "--export_dir=" + os.path.join(export_dir, "model"))
  assert (status, traceback) == (1, False)
  assert line == ("run_classifier.py: error: --export_dir=%s/model: %s is a file, not a "
                  "directory" % (export_dir, export_dir))


def test_pretraining_records_of_another_vocab_than_vocab_file_are_refused(tmp_path):
  # Records made with a vocab whose [CLS] is 2, trained with --vocab_file of another vocab of the
  # same size ([CLS] at 6) for its fill-mask export: before, the run exited 0, recorded the other
  # vocab as its model's and exported with its ids (probe 22 case 29). Only --dynamic_masking
  # checked the records against the vocab.
  config_file, vocab_file = write_model_files(str(tmp_path), CONFIG, VOCAB)
  corpus = _write(tmp_path / "corpus.txt", "\n\n".join(
      "\n".join(" ".join(WORDS[(d + s + w) % len(WORDS)] for w in range(8)) for s in range(5))
      for d in range(6)) + "\n")
  records = str(tmp_path / "records.tfrecord")
  made = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "create_pretraining_data.py"),
                         "--input_file=" + corpus, "--output_file=" + records,
                         "--vocab_file=" + vocab_file, "--max_seq_length=16",
                         "--max_predictions_per_seq=3", "--dupe_factor=2"],
                        capture_output=True, text=True, timeout=300)
  assert made.returncode == 0, made.stderr[-2000:]
  other_vocab = _write(tmp_path / "other" / "vocab.txt", "\n".join(WORDS[:4] + VOCAB[:5] +
                                                                    WORDS[4:]) + "\n")
  flags = ["--input_file=" + records, "--bert_config_file=" + config_file,
           "--max_seq_length=16", "--max_predictions_per_seq=3", "--train_batch_size=4",
           "--num_train_steps=1", "--num_warmup_steps=0"]

  def run_pretraining(vocab: str, output_dir: str, *action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"), *action, *flags,
         "--vocab_file=" + vocab, "--output_dir=" + output_dir],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))

  def assert_refused(run: subprocess.CompletedProcess, output_dir: str) -> None:
    lines = [line for line in run.stderr.splitlines() if "error:" in line]
    assert (run.returncode, len(lines), "Traceback" in run.stderr) == (1, 1, False), run.stderr
    assert lines[0] == ("run_pretraining.py: error: %s: record 1 starts with id 2, not the [CLS] "
                        "id 6 of --vocab_file %s: the records were made with another vocab" %
                        (records, other_vocab))
    assert not os.path.exists(output_dir)

  export = "--export_dir=%s" % (tmp_path / "fill_mask")
  assert_refused(run_pretraining(other_vocab, str(tmp_path / "out"), "--do_train", export),
                 str(tmp_path / "out"))
  assert not os.path.exists(tmp_path / "fill_mask")
  # The records' own vocab trains and exports.
  run = run_pretraining(vocab_file, str(tmp_path / "pretrained"), "--do_train", export)
  assert run.returncode == 0, run.stderr[-3000:]
  assert os.path.exists(tmp_path / "fill_mask" / "1" / "saved_model.pb")
  # Evaluating a model (its checkpoint alone, as released) on them with the other vocab.
  os.mkdir(tmp_path / "released")
  for path in glob.glob(str(tmp_path / "pretrained" / "model.ckpt-1.*")):
    shutil.copy(path, str(tmp_path / "released" / os.path.basename(path)).replace(
        "model.ckpt-1", "bert_model.ckpt"))
  assert_refused(run_pretraining(other_vocab, str(tmp_path / "eval"), "--do_eval",
                                 "--init_checkpoint=%s" % (tmp_path / "released" /
                                                           "bert_model.ckpt")),
                 str(tmp_path / "eval"))


def test_a_pair_task_with_a_config_of_one_segment_is_refused_before_any_work(tmp_path):
  # type_vocab_size 1: the second text's segment id 1 has no embedding. Before, the run wrote
  # its label list, cache and settings, then failed at the first step with a 130-line traceback
  # from an embedding lookup (probe 22 case 54).
  data = tmp_path / "data"
  _write(data / "train.tsv", "text_a\ttext_b\tlabel\n" + "good film\tbad day\tgood\n" * 4)
  config_file = _write(tmp_path / "one_segment" / "bert_config.json", modeling.BertConfig(
      **dict(CONFIG.to_dict(), type_vocab_size=1)).to_json_string())
  status, line, traceback = _run(tmp_path, "run_classifier.py", "--task_name=generic",
                                 "--text_b_column=text_b", "--bert_config_file=" + config_file)
  assert (status, traceback) == (1, False)
  assert line == ("run_classifier.py: error: --bert_config_file has type_vocab_size 1, but a "
                  "sentence-pair task gives its second text segment id 1: use the model's own "
                  "config (BERT's have type_vocab_size 2)")
  assert sorted(os.listdir(data)) == ["train.tsv"]
  text_pairs.check_model_takes_pairs(1, is_pair=False)  # One text: segment 0 only.
  text_pairs.check_model_takes_pairs(2, is_pair=True)


def test_an_export_dir_holds_one_model_and_not_the_runs_best_checkpoint(tmp_path):
  # Before, --export_dir=<output_dir>/best put version 1 beside the best checkpoint, and a TF Hub
  # pair and a served model's versions shared a directory in either order (probe 22 cases 47, 57).
  _classifier_data(tmp_path)
  status, line, traceback = _run(tmp_path, "run_classifier.py", "--task_name=generic",
                                 "--export_dir=%s" % (tmp_path / "runs" / "out" / "best"),
                                 "--keep_best_checkpoint", "--do_eval=true")
  assert (status, traceback) == (1, False)
  assert line == ("run_classifier.py: error: --export_dir=%s is where --output_dir=%s keeps its "
                  "best checkpoint: give the exports a directory of their own" %
                  (tmp_path / "runs" / "out" / "best", tmp_path / "runs" / "out"))
  served, pair = tmp_path / "served", tmp_path / "pair"
  _write(served / "1" / "saved_model.pb", "")
  _write(pair / "encoder" / "1" / "saved_model.pb", "")
  _write(pair / "preprocessor" / "1" / "saved_model.pb", "")
  with pytest.raises(errors.FlagError, match=r"^`export_dir`=%s holds versions of a served model "
                     r"\(1/\): give TF Hub's pair a directory of its own$" % served):
    export.check_export_dir(str(served), tf_hub_pair=True)
  with pytest.raises(errors.FlagError, match=r"^`export_dir`=%s holds TF Hub's BERT pair "
                     r"\(encoder/\): give this model's versions a directory of their own$" % pair):
    export.check_export_dir(str(pair))
  export.check_export_dir(str(served))  # Each takes another version of its own kind.
  export.check_export_dir(str(pair), tf_hub_pair=True)
  # Nor do versions go beside a release's files (probe 25 case 1: rel/1/ beside bert_model.ckpt).
  release = tmp_path / "release"
  _write(release / "bert_model.ckpt.data-00000-of-00001", "")
  with pytest.raises(errors.FlagError, match=r"^`export_dir`=%s holds a model's files "
                     r"\(bert_model.ckpt.data-00000-of-00001: a release or a conversion\)" %
                     release):
    export.check_export_dir(str(release))


def test_an_output_dir_where_nothing_can_be_created_is_one_line(tmp_path):
  # /proc takes no new directory, though its permissions say it would (root may write anywhere):
  # before, TensorFlow's NotFoundError from creating it ended the run with a 20-line traceback
  # (probe 22 case 44).
  _classifier_data(tmp_path)
  config_file, vocab_file = write_model_files(str(tmp_path), CONFIG, VOCAB)
  run = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "run_classifier.py"), "--task_name=generic",
       "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file, "--do_train=true",
       "--max_seq_length=16", "--data_dir=%s" % (tmp_path / "data"),
       "--output_dir=/proc/bert_output_of_a_test"],
      capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert (run.returncode, "Traceback" in run.stderr) == (1, False), run.stderr
  line = run.stderr.strip().splitlines()[-1]
  assert line.startswith("run_classifier.py: error: ") and "/proc" in line, line  # Not as root:
  # the validation pass finds /proc read-only for this user first.
  # What TensorFlow raises for a refused path is the user's to fix; its other errors are bugs.
  assert cli._is_users_to_fix(tf.errors.PermissionDeniedError(None, None, "/x; Permission denied"))
  assert not cli._is_users_to_fix(tf.errors.InvalidArgumentError(None, None, "indices[0] = 3"))
  assert not cli._is_users_to_fix(OSError("no file named"))


def test_a_vocab_other_than_the_one_beside_the_model_is_refused(tmp_path):
  # A release (checkpoint, bert_config.json, vocab.txt) read with a permuted vocab of the same
  # size: before, extract_features computed every feature from other tokens' embeddings, exit 0,
  # while another config beside the release was refused (probe 22 case 12).
  release = tmp_path / "release"
  release.mkdir()
  config_file, _ = write_model_files(str(release), CONFIG, VOCAB)
  checkpoints.save_checkpoint(feature_extraction.build_bert(CONFIG),
                              str(release / "bert_model.ckpt"))
  permuted = _write(tmp_path / "permuted.txt", "\n".join(VOCAB[:5] + VOCAB[6:] + VOCAB[5:6]))
  input_file = _write(tmp_path / "input.txt", "good film\n")
  run = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "extract_features.py"),
       "--init_checkpoint=%s" % (release / "bert_model.ckpt"), "--bert_config_file=" + config_file,
       "--vocab_file=" + permuted, "--input_file=" + input_file, "--max_seq_length=16",
       "--output_file=%s" % (tmp_path / "features.jsonl")],
      capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert (run.returncode, "Traceback" in run.stderr) == (1, False), run.stderr
  assert run.stderr.strip().splitlines()[-1] == (
      "extract_features.py: error: --vocab_file=%s has 'bad' at id 5 where the model in "
      "--init_checkpoint=%s has 'good' (%s, 10 ids differ, not counting [unusedN] placeholders): "
      "pass that vocab" % (permuted, release, release / "vocab.txt"))
  assert not os.path.exists(tmp_path / "features.jsonl")
  # Words in place of its placeholders, a copy with other line ends, the file itself: its vocab.
  _write(release / "vocab.txt", "\n".join(VOCAB[:5] + ["[unused0]", "[unused1]"] + VOCAB[7:]))
  domain = _write(tmp_path / "domain.txt", "\n".join(VOCAB[:5] + ["london", "bob"] + VOCAB[7:]))
  crlf = _write(tmp_path / "crlf.txt", "\r\n".join(VOCAB[:5] + ["[unused0]", "[unused1]"] +
                                                     VOCAB[7:]) + "\r\n")
  for vocab in (domain, crlf, str(release / "vocab.txt")):
    tokenization.check_vocab_of_model_directory(vocab, str(release), "--init_checkpoint")
  with pytest.raises(tokenization.VocabError, match="'day' at id 7 where .* 8 ids differ"):
    tokenization.check_vocab_of_model_directory(permuted, str(release), "--init_checkpoint")


def test_a_sentencepiece_model_other_than_the_model_s_vocab_is_refused(tmp_path):
  # A WordPiece release read with an unrelated SentencePiece model of as many pieces: before, only
  # the sizes were compared, and the pieces tokenized (into ids of other words) even with the
  # release's own --vocab_file beside them (probe 24 cases 79, 80, 80b).
  from test_tokenization import train_sentencepiece  # pylint: disable=g-import-not-at-top
  spm_file = train_sentencepiece(str(tmp_path))
  pieces = tokenization.vocab_tokens(None, spm_file)
  release = tmp_path / "release"
  release.mkdir()
  config = modeling.BertConfig.from_dict(dict(CONFIG.to_dict(), vocab_size=len(pieces)))
  wordpieces = VOCAB + ["w%d" % index for index in range(len(pieces) - len(VOCAB))]
  config_file, vocab_file = write_model_files(str(release), config, wordpieces)
  checkpoints.save_checkpoint(feature_extraction.build_bert(config),
                              str(release / "bert_model.ckpt"))
  run = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "extract_features.py"),
       "--init_checkpoint=%s" % (release / "bert_model.ckpt"), "--bert_config_file=" + config_file,
       "--spm_model_file=" + spm_file, "--vocab_file=" + vocab_file, "--max_seq_length=16",
       "--input_file=" + _write(tmp_path / "input.txt", "good film\n"),
       "--output_file=%s" % (tmp_path / "features.jsonl")],
      capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  differing = sum(piece != token for piece, token in zip(pieces, wordpieces))
  assert (run.returncode, run.stderr.strip().splitlines()[-1]) == (
      1, "extract_features.py: error: --spm_model_file=%s has %r at id 0 where the model in "
      "--init_checkpoint=%s has '[PAD]' (%s, %d ids differ, not counting [unusedN] "
      "placeholders): pass the model's own SentencePiece model" % (
          spm_file, pieces[0], release, vocab_file, differing)), run.stderr
  assert not os.path.exists(tmp_path / "features.jsonl")
  # A vocab.txt that lists the model's own pieces (as a SentencePiece model's .vocab file does).
  _write(release / "vocab.txt", "\n".join(pieces) + "\n")
  tokenization.check_vocab_of_model_directory(None, str(release), "--init_checkpoint", spm_file)
  assert (tokenization.tokens_fingerprint(None, spm_file) ==
          tokenization.tokens_fingerprint(str(release / "vocab.txt")))


def test_task_files_that_are_no_regular_text_are_named_as_such(tmp_path):
  # Before, a FIFO train.tsv was "no such file" and a UTF-16 one failed at line 2 with "unknown
  # label '\x000\x00'" (probe 25 cases 80, 81). Every task's reader checks its file first.
  import classifier_data  # pylint: disable=g-import-not-at-top
  import multiple_choice  # pylint: disable=g-import-not-at-top
  import tagging  # pylint: disable=g-import-not-at-top
  import squad_data  # pylint: disable=g-import-not-at-top
  os.mkfifo(tmp_path / "train.tsv")
  with pytest.raises(errors.InputError, match=r"train\.tsv is not a regular file \(a FIFO"):
    classifier_data.get_processor("sst-2").get_train_examples(str(tmp_path))
  os.mkfifo(tmp_path / "dev.json")  # Before, run_squad waited on it for ever (probe 26 case 26).
  with pytest.raises(errors.InputError, match=r"dev\.json is not a regular file \(a FIFO"):
    squad_data.load_squad_json(str(tmp_path / "dev.json"))
  utf16 = tmp_path / "utf16"
  utf16.mkdir()
  (utf16 / "train.tsv").write_bytes("sentence\tlabel\nit is good\t1\n".encode("utf-16"))
  (utf16 / "train.txt").write_bytes("EU NNP B-NP B-ORG\n".encode("utf-16"))
  (utf16 / "train.jsonl").write_bytes('{"context": "a", "endings": ["b"]}\n'.encode("utf-16"))
  for read in (lambda: classifier_data.get_processor("sst-2").get_train_examples(str(utf16)),
               lambda: tagging.read_conll(str(utf16 / "train.txt")),
               lambda: multiple_choice.read_examples(str(utf16 / "train.jsonl"), "train")):
    with pytest.raises(errors.InputError, match=r"utf16/train\.\w+ is not UTF-8 text \(it holds "
                       r"NUL bytes"):
      read()


def test_training_from_a_run_of_another_task_says_its_head_starts_this_one(tmp_path, caplog):
  # Fine-tuning MRPC from an SST-2 run loads SST-2's head (two labels each), as the original
  # does; before, the log said only "Loaded 41 of the model's 41 variables" (probe 22 case 43).
  run_dir = tmp_path / "sst2_run"
  _write(run_dir / "training_settings.json", json.dumps({"phases": {"0": {"task_name": "sst-2"}}}))
  with caplog.at_level(logging.WARNING):
    cli_setup._warn_of_a_head_of_another_task(str(run_dir), {"task_name": "mrpc"})
    cli_setup._warn_of_a_head_of_another_task(str(run_dir), {"task_name": "sst-2"})
    cli_setup._warn_of_a_head_of_another_task(str(tmp_path / "release"), {"task_name": "mrpc"})
  assert [record.getMessage() for record in caplog.records] == [
      "--init_checkpoint=%s is a model fine-tuned for --task_name=sst-2: where its head's shapes "
      "fit this task's, it starts this mrpc run's head (as in the original), its outputs first "
      "meaning sst-2's labels" % run_dir]


def _check_outputs(**paths) -> None:
  """The validation pass's check of outputs named `--<flag>=<path>` (directories written into)."""
  atomic_files.check_run_paths({}, {"--" + flag: (atomic_files.OUTPUT_CONTAINER, [path])
                                    for flag, path in paths.items()}, exports=["--export_dir"])


def test_output_directories_are_checked_without_creating_them(tmp_path, monkeypatch):
  _check_outputs(export_dir=str(tmp_path / "new" / "models"),
                 output_dir=str(tmp_path / "other" / "out"))
  assert os.listdir(tmp_path) == []
  with pytest.raises(errors.FlagError, match="is a file, not a directory"):
    _check_outputs(export_dir=os.path.join(_write(tmp_path / "file", ""), "models"))
  # The system resolves `..` only after an existing directory (os.path.abspath would not tell).
  monkeypatch.chdir(tmp_path)
  with pytest.raises(errors.FlagError, match=r"^--output_dir=\./rel/\.\./out/: \./rel does not "
                     r"exist, so \./rel/\.\. leads nowhere"):
    _check_outputs(output_dir="./rel/../out/")
  os.mkdir(tmp_path / "existing")
  _check_outputs(output_dir="existing/../out", export_dir="../%s/models" % tmp_path.name)
  # A SavedModel's directory (a TF Serving version) is not one to write a run into.
  _write(tmp_path / "export" / "1" / "saved_model.pb", "")
  with pytest.raises(errors.FlagError, match=r"--output_dir=%s is in the SavedModel in %s" %
                     (tmp_path / "export" / "1", tmp_path / "export" / "1")):
    _check_outputs(output_dir=str(tmp_path / "export" / "1"))
  with pytest.raises(errors.FlagError, match=r"holds exported versions \(1/saved_model.pb\)"):
    _check_outputs(output_dir=str(tmp_path / "export"))
  _check_outputs(output_dir=str(tmp_path / "existing"), export_dir=str(tmp_path / "export"))


def test_no_output_but_an_export_is_written_into_an_export_directory(tmp_path):
  # TF Serving serves the highest version number of an export directory: before, a training run,
  # a conversion or a vocab written as export/3 became the served "model", and one written into
  # a version (or a TF Hub module's directory, as encoder/2) sat inside it (probe 24 cases 5,
  # 112-115).
  export_dir = tmp_path / "export"
  _write(export_dir / "1" / "saved_model.pb", "")
  _write(tmp_path / "hub" / "encoder" / "1" / "saved_model.pb", "")
  kinds = {"--output_dir": atomic_files.OUTPUT_CONTAINER, "--output_file": atomic_files.OUTPUT_FILE,
           "--converted": atomic_files.OUTPUT_DIRECTORY}
  for what, kind in kinds.items():
    for path, refusal in (
        (export_dir / "1" / "run", "is in the SavedModel in %s " % (export_dir / "1")),
        (export_dir / "1" / "assets" / "vocab.txt", "is in the SavedModel in %s " % (
            export_dir / "1")),
        (export_dir / "3", "would be version 3 of the export directory %s (beside "
                           "1/saved_model.pb), which TF Serving would serve" % export_dir),
        (tmp_path / "hub" / "encoder" / "2", "would be version 2 of the export directory %s" %
         (tmp_path / "hub" / "encoder"))):
      with pytest.raises(errors.FlagError) as refused:
        atomic_files.check_run_paths({}, {what: (kind, [str(path)])})
      assert str(refused.value).startswith("%s=%s %s" % (what, path, refusal)), refused.value
    # Beside the versions, under a name TF Serving passes over, and in numbered directories that
    # are no export, outputs are written as anywhere.
    for path in (export_dir / "notes", tmp_path / "runs" / "2", tmp_path / "hub" / "3"):
      atomic_files.check_run_paths({}, {what: (kind, [str(path)])})
  # The export itself adds versions there.
  atomic_files.check_run_paths({}, {"--export_dir": (atomic_files.OUTPUT_CONTAINER,
                                                     [str(export_dir)])},
                               exports=["--export_dir"])
  made = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "create_vocab.py"), "--vocab_size=200",
       "--input_file=" + _write(tmp_path / "corpus.txt", "a good film\n"),
       "--output_file=%s" % (export_dir / "4")], capture_output=True, text=True, timeout=120)
  assert (made.returncode, made.stderr.strip().splitlines()[-1]) == (
      1, "create_vocab.py: error: --output_file=%s would be version 4 of the export directory "
      "%s (beside 1/saved_model.pb), which TF Serving would serve: choose another" % (
          export_dir / "4", export_dir)), made.stderr
  assert sorted(os.listdir(export_dir)) == ["1"]


def test_a_refusal_removes_only_empty_directories_it_would_have_created(tmp_path):
  existing = tmp_path / "existing"
  existing.mkdir()
  new = cli._missing_directories([str(existing / "a" / "b"), str(existing), "gs://bucket/out"])
  assert new == [str(existing / "a" / "b"), str(existing / "a")]
  os.makedirs(existing / "a" / "b")
  _write(existing / "a" / "notes.txt", "the user's")
  cli._remove_if_empty(new)
  assert sorted(os.listdir(existing)) == ["a"] and os.listdir(existing / "a") == ["notes.txt"]


def test_outputs_on_a_read_only_file_system_stop_before_any_work(tmp_path):
  with small_tmpfs(tmp_path / "read_only", "64k", read_only=True) as mount_point:
    with pytest.raises(errors.FlagError, match=r"cannot write in %s \(read-only file system\)"
                       % mount_point):
      _check_outputs(export_dir=str(mount_point / "models"))
    data = _classifier_data(tmp_path)
    config_file, vocab_file = write_model_files(str(tmp_path), CONFIG, VOCAB)
    run = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "run_classifier.py"), "--task_name=generic",
         "--data_dir=" + data, "--do_train=true", "--vocab_file=" + vocab_file,
         "--bert_config_file=" + config_file, "--max_seq_length=16",
         "--output_dir=%s" % (mount_point / "out")],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
  assert run.stderr.strip().splitlines()[-1] == (
      "run_classifier.py: error: --output_dir=%s/out: cannot write in %s (read-only file system)"
      % (mount_point, mount_point))
