"""Artifacts check their companions before any work: the vocab against the model's config, the
records against the vocab (dynamic masking), a task head against evaluation, prediction and
export without training, label and tag names against each other and the head.

Each case is what a user would run (fresh processes where the script is the user's entry point,
tiny models); the expectations come from the files themselves (lines counted here, ids read
from the records here), not from the code under test.
"""

import json
import os
import random
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from conftest import REPO_ROOT, shared_path, write_model_files
import checkpoints
import classifier
import classifier_data
import conversion
import conversion_hf
import errors
import heads
import model_conversion
import modeling
import pretraining
import pretraining_data
import pretraining_instances
import tagging
import task_files
import tokenization

pytestmark = pytest.mark.slow

WORDS = "the a cat dog sat ran big small red blue happy sad day night good bad".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", "."] + WORDS


def tiny_config(vocab_size: int = len(VOCAB)) -> modeling.BertConfig:
  return modeling.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=64, type_vocab_size=2)


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
  """Runs a script of the repository in a fresh process, as a user would."""
  return subprocess.run([sys.executable, os.path.join(REPO_ROOT, script)] + list(args),
                        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)


def assert_one_line_error(result: subprocess.CompletedProcess, script: str, *fragments: str):
  """Exit status 1 and one line `<script>: error: ...` holding every fragment."""
  assert result.returncode == 1, result.stderr[-3000:]
  lines = [line for line in result.stderr.splitlines() if line.startswith(script + ": error:")]
  assert len(lines) == 1, result.stderr[-3000:]
  for fragment in fragments:
    assert fragment in lines[0], lines[0]
  return lines[0]


def count_lines(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for _ in f)


# ------------------------------------------------------------------------------------------------
# The config's own values.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_initializer_range_is_refused(tmp_path, value):
  config_file = tmp_path / "bert_config.json"
  text = tiny_config().to_json_string().replace('"initializer_range": 0.02',
                                                '"initializer_range": %s' % value)
  assert value in text
  config_file.write_text(text)
  with pytest.raises(modeling.ConfigError, match="initializer_range must be a finite number"):
    modeling.BertConfig.from_json_file(str(config_file))


def test_non_finite_extra_float_is_refused(tmp_path):
  config = dict(tiny_config().to_dict(), layer_norm_eps=float("nan"))
  with pytest.raises(modeling.ConfigError, match="layer_norm_eps must be a finite number"):
    modeling.BertConfig.from_dict(config)


# ------------------------------------------------------------------------------------------------
# The vocab against the model.
# ------------------------------------------------------------------------------------------------


def test_google_vocabs_fit_their_configs(chinese_bert_dir, uncased_vocab_file):
  chinese_config = modeling.BertConfig.from_json_file(
      os.path.join(chinese_bert_dir, "bert_config.json"))
  chinese_vocab = os.path.join(chinese_bert_dir, "vocab.txt")
  assert count_lines(chinese_vocab) == chinese_config.vocab_size == 21128
  tokenization.check_vocab_fits_model(chinese_vocab, chinese_config.vocab_size)
  assert count_lines(uncased_vocab_file) == 30522
  tokenization.check_vocab_fits_model(uncased_vocab_file, 30522)
  # NVIDIA's configs pad the uncased vocab's 30522 rows to a multiple of 8.
  tokenization.check_vocab_fits_model(uncased_vocab_file, 30528)
  # Another model's vocab: the English vocab with the Chinese config, and the other way round.
  with pytest.raises(tokenization.VocabError, match=r"has 30522 tokens but the model's vocab_size "
                     r"is 21128"):
    tokenization.check_vocab_fits_model(uncased_vocab_file, chinese_config.vocab_size)
  with pytest.raises(tokenization.VocabError, match=r"has 21128 tokens but .* is 30522"):
    tokenization.check_vocab_fits_model(chinese_vocab, 30522)


def test_vocab_without_a_special_token_is_refused(tmp_path):
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(token for token in VOCAB if token != "[SEP]") + "\n")
  with pytest.raises(tokenization.VocabError, match=r"has no \[SEP\] token"):
    tokenization.check_vocab_fits_model(str(vocab_file), len(VOCAB) - 1)
  with pytest.raises(tokenization.VocabError, match=r"has no \[SEP\] or \[MASK\] token"):
    vocab_file.write_text("\n".join(t for t in VOCAB if t not in ("[SEP]", "[MASK]")) + "\n")
    tokenization.check_vocab_fits_model(str(vocab_file), len(VOCAB) - 2,
                                        special_tokens=("[CLS]", "[SEP]", "[MASK]"))


def test_conversion_refuses_a_vocab_of_another_size(tmp_path, uncased_vocab_file):
  # A Hugging Face model written with another model's vocab serves every id as another token.
  config_file, _ = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  encoder = modeling.BertModel(tiny_config())
  encoder.build()
  checkpoint = checkpoints.save_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
  output_dir = tmp_path / "hf"
  with pytest.raises(errors.InputError, match=r"has 30522 tokens but the model's vocab_size is "
                     r"%d" % len(VOCAB)):
    model_conversion.convert_google_to_hf(checkpoint, str(output_dir), config_file,
                                            vocab_file=uncased_vocab_file)
  assert not output_dir.exists()


def test_fill_mask_export_refuses_a_short_vocab(tmp_path, uncased_vocab_file):
  # The first 200 lines of the 30522-token vocab for a model of 30522 tokens: before, every
  # served token id above 199 came back as "".
  with open(uncased_vocab_file, encoding="utf-8") as f:
    head = [next(f) for _ in range(200)]
  short_vocab = tmp_path / "vocab_200.txt"
  short_vocab.write_text("".join(head))
  config_file, _ = write_model_files(str(tmp_path), tiny_config(30522), VOCAB)
  checkpoint = checkpoints.save_checkpoint(pretraining.build_model(tiny_config(30522)),
                                           str(tmp_path / "bert_model.ckpt"))
  export_dir = tmp_path / "export"
  result = run_script("run_pretraining.py", "--do_train=false", "--init_checkpoint=" + checkpoint,
                      "--bert_config_file=%s" % config_file, "--vocab_file=%s" % short_vocab,
                      "--export_dir=%s" % export_dir, "--max_seq_length=32")
  assert_one_line_error(result, "run_pretraining.py", "--vocab_file", str(short_vocab),
                        "has 200 tokens but the model's vocab_size is 30522")
  assert not export_dir.exists()


# ------------------------------------------------------------------------------------------------
# A head for evaluation, prediction and export without training.
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def classifier_files(tmp_path):
  """A tiny model's files and a generic single-sentence task: its flags for run_classifier."""
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  (data_dir / "train.tsv").write_text("sentence\tlabel\nthe cat sat\tneg\na good dog\tpos\n")
  (data_dir / "test.tsv").write_text("sentence\nthe dog ran\nsad cat\n")
  return ["--task_name=generic", "--data_dir=%s" % data_dir, "--text_a_column=sentence",
          "--bert_config_file=" + config_file, "--vocab_file=" + vocab_file,
          "--max_seq_length=16", "--output_dir=%s" % (tmp_path / "out")]


def built_classifier() -> classifier.BertClassifier:
  """run_classifier's model of two labels on `tiny_config`, its variables created."""
  model = classifier.BertClassifier(tiny_config(), 2)
  model.build()
  return model


def test_a_label_list_left_without_a_trained_model_must_name_the_training_labels(
    tmp_path, classifier_files):
  # Before, a label list that a run left when it stopped before training (neg, neutral, pos)
  # became the classes of the next run, on data of neg and pos only: a 3-way head, exit 0
  # (probe 21).
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "label_list.txt").write_text("neg\nneutral\npos\n")
  result = run_script("run_classifier.py", "--do_train", "--num_train_epochs=1",
                      *classifier_files)
  assert_one_line_error(result, "run_classifier.py", "%s names neutral, which no row of the "
                        "training file has" % (tmp_path / "out" / "label_list.txt"))
  assert sorted(os.listdir(tmp_path / "out")) == ["label_list.txt"]
  # The training labels in another order are the user's order: kept.
  (tmp_path / "out" / "label_list.txt").write_text("pos\nneg\n")
  result = run_script("run_classifier.py", "--do_train", "--num_train_epochs=1",
                      "--train_batch_size=2", *classifier_files)
  assert result.returncode == 0, result.stderr[-3000:]
  assert (tmp_path / "out" / "label_list.txt").read_text() == "pos\nneg\n"


def test_a_run_refused_before_its_first_step_leaves_no_label_or_tag_list(tmp_path,
                                                                       classifier_files):
  # Before, a schedule of no step was refused only after the run had written its label list,
  # which then refused the corrected rerun on data of other labels (probe 25 cases 10, 69).
  result = run_script("run_classifier.py", "--do_train", "--train_batch_size=8",
                      "--num_train_epochs=1", *classifier_files)
  assert_one_line_error(result, "run_classifier.py", "--num_train_epochs=1 of 2 training examples "
                        "at --train_batch_size=8 is less than one step")
  assert "label_list.txt" not in os.listdir(tmp_path / "out")
  (tmp_path / "conll").mkdir()
  (tmp_path / "conll" / "train.txt").write_text("the NN O O\ncat NN O B-PER\n\n")
  flags = [flag for flag in classifier_files if flag.startswith(("--vocab_file",
                                                                  "--bert_config_file"))]
  result = run_script("run_ner.py", "--do_train", "--train_batch_size=8", *flags,
                      "--data_dir=%s" % (tmp_path / "conll"), "--max_seq_length=16",
                      "--output_dir=%s" % (tmp_path / "ner"))
  assert_one_line_error(result, "run_ner.py", "is less than one step")
  assert "tag_list.txt" not in os.listdir(tmp_path / "ner")


def test_an_export_dir_of_other_label_names_is_refused_before_training(tmp_path,
                                                                      classifier_files):
  # Before, training ran to the end and only the export was refused (probe 26 cases 2, 37, 41).
  version = tmp_path / "export" / "1"
  (version / "assets.extra").mkdir(parents=True)
  (version / "saved_model.pb").write_bytes(b"")
  (version / "assets.extra" / "output_names.txt").write_text("0\n1\n")
  result = run_script("run_classifier.py", "--do_train", "--train_batch_size=2",
                      "--num_train_epochs=1", "--export_dir=%s" % (tmp_path / "export"),
                      *classifier_files)
  assert_one_line_error(result, "run_classifier.py", "--export_dir=%s: version 1 names its "
                        "outputs 0, 1, this model neg, pos: it is another model's directory" %
                        (tmp_path / "export"))
  assert not (tmp_path / "out" / "checkpoint").exists()


def test_predict_from_a_checkpoint_without_the_head_is_an_error(tmp_path, classifier_files):
  # A pretrained (or converted, head-less) encoder: before, a random head predicted after a
  # warning and the run ended with status 0.
  encoder = modeling.BertModel(tiny_config())
  encoder.build()
  checkpoint = checkpoints.save_checkpoint(encoder, str(tmp_path / "encoder" / "bert_model.ckpt"))
  result = run_script("run_classifier.py", "--do_predict", "--init_checkpoint=" + checkpoint,
                      *classifier_files)
  assert_one_line_error(result, "run_classifier.py", "--init_checkpoint=" + checkpoint,
                        "has no task head (output_bias, output_weights)")
  assert not (tmp_path / "out" / "test_results.tsv").exists()


def test_predict_with_a_damaged_newest_checkpoint_is_an_error(tmp_path, classifier_files):
  # Two checkpoints of a fine-tuned model, the newest cut short: before, the older one predicted.
  model = built_classifier()
  output_dir = str(tmp_path / "out")
  os.makedirs(output_dir)
  (tmp_path / "out" / classifier_data.LABEL_LIST_FILE).write_text("neg\npos\n")
  for step in (1, 2):
    newest = checkpoints.save_training_checkpoint(checkpoints.checkpoint_variables(model),
                                                  output_dir, step, 5)
  data_file = newest + ".data-00000-of-00001"
  os.truncate(data_file, os.path.getsize(data_file) // 2)
  result = run_script("run_classifier.py", "--do_predict", *classifier_files)
  assert_one_line_error(result, "run_classifier.py", "checkpoint %s, the newest" % newest,
                        "is damaged")
  assert not (tmp_path / "out" / "test_results.tsv").exists()


def test_an_older_checkpoint_of_the_run_named_as_init_checkpoint_is_an_error(tmp_path,
                                                                              classifier_files):
  # A run of checkpoints 3 and 6, predicting "from model.ckpt-3" into the run's own output_dir:
  # before, the run's newest (model.ckpt-6) predicted, exit 0.
  model = built_classifier()
  output_dir = str(tmp_path / "out")
  os.makedirs(output_dir)
  (tmp_path / "out" / classifier_data.LABEL_LIST_FILE).write_text("neg\npos\n")
  older, newest = (checkpoints.save_training_checkpoint(
      checkpoints.checkpoint_variables(model), output_dir, step, 5) for step in (3, 6))
  result = run_script("run_classifier.py", "--do_predict", "--init_checkpoint=" + older,
                      *classifier_files)
  assert_one_line_error(result, "run_classifier.py", "--init_checkpoint=" + older,
                        "--output_dir=" + output_dir, newest, "pass another --output_dir")
  assert not (tmp_path / "out" / "test_results.tsv").exists()
  result = run_script("run_classifier.py", "--do_predict", "--init_checkpoint=" + newest,
                      *classifier_files)  # The one the run answers with is used, as named.
  assert result.returncode == 0, result.stderr[-2000:]
  assert "is not read" not in result.stderr
  assert count_lines(str(tmp_path / "out" / "test_results.tsv")) == 2
  # A checkpoint from elsewhere (the training command's, say): the run's own model predicts, as
  # the original's did, and the log says that the named one is not read.
  elsewhere = checkpoints.save_checkpoint(model, str(tmp_path / "elsewhere" / "model.ckpt"))
  result = run_script("run_classifier.py", "--do_predict", "--init_checkpoint=" + elsewhere,
                      *classifier_files)
  assert result.returncode == 0, result.stderr[-2000:]
  assert ("--init_checkpoint=%s is not read: --output_dir=%s holds a trained model, %s, which is "
          "used" % (elsewhere, output_dir, newest)) in result.stderr


def test_a_model_whose_label_file_names_other_outputs_than_the_task_is_refused(tmp_path,
                                                                             classifier_files):
  # A model converted from Hugging Face with id2label {0: "1", 1: "0"}: its label_list.txt lists
  # 1, 0, and no run record is beside it. Before, --task_name=SST-2 (labels 0, 1) predicted with
  # every label swapped, exit 0.
  converted = tmp_path / "converted"
  checkpoint = checkpoints.save_checkpoint(built_classifier(), str(converted / "bert_model.ckpt"))
  (converted / classifier_data.LABEL_LIST_FILE).write_text("1\n0\n")
  (tmp_path / "sst").mkdir()
  (tmp_path / "sst" / "test.tsv").write_text("index\tsentence\n0\tthe dog ran\n")
  flags = ["--do_predict", "--task_name=SST-2", "--data_dir=%s" % (tmp_path / "sst"),
           "--init_checkpoint=" + checkpoint] + [
               flag for flag in classifier_files if not flag.startswith(("--task_name",
                                                                         "--data_dir"))]
  result = run_script("run_classifier.py", *flags)
  assert_one_line_error(result, "run_classifier.py",
                        "%s names the model's outputs [1, 0], but the task's are [0, 1]" %
                        (converted / classifier_data.LABEL_LIST_FILE))
  assert not (tmp_path / "out" / "test_results.tsv").exists()
  config_and_vocab = [flag for flag in classifier_files
                      if flag.startswith(("--bert_config_file", "--vocab_file"))]
  result = run_script("convert_checkpoint.py", "--init_checkpoint=" + checkpoint,
                      "--task_name=SST-2", "--output_dir=%s" % (tmp_path / "hf"),
                      *config_and_vocab)  # Its id2label would swap them too.
  assert_one_line_error(result, "convert_checkpoint.py", "names the model's outputs [1, 0]")
  assert not (tmp_path / "hf").exists()
  (converted / classifier_data.LABEL_LIST_FILE).write_text("0\n1\n")  # The task's order.
  result = run_script("run_classifier.py", *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  assert count_lines(str(tmp_path / "out" / "test_results.tsv")) == 1


def _predict_into_a_new_output_dir(script: str, model_dir, names_file: str, flags: list,
                                   predictions_file: str) -> tuple:
  """Predicts from `model_dir`'s checkpoint into a fresh output_dir that has no list of names,
  then the same into one holding a copy of the model's list (the way that always worked):
  returns the two predictions files' bytes."""
  predictions = []
  for copied in (False, True):
    output_dir = model_dir.parent / ("copied" if copied else "fresh")
    output_dir.mkdir()
    if copied:
      (output_dir / names_file).write_bytes((model_dir / names_file).read_bytes())
    result = run_script(script, "--do_predict", "--output_dir=%s" % output_dir,
                        "--init_checkpoint=%s" % (model_dir / "bert_model.ckpt"), *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    predictions.append((output_dir / predictions_file).read_bytes())
  return tuple(predictions)


def test_predicting_from_another_run_reads_the_label_list_beside_its_checkpoint(tmp_path,
                                                                               classifier_files):
  # A generic classifier whose label_list.txt says pos, neg (the training file's sorted labels
  # would be neg, pos), predicted into a new output_dir: before, its labels were learned from the
  # training file (refused as another order) or, without one, the run stopped for lack of it.
  model_dir = tmp_path / "model"
  checkpoints.save_checkpoint(built_classifier(), str(model_dir / "bert_model.ckpt"))
  (model_dir / classifier_data.LABEL_LIST_FILE).write_text("pos\nneg\n")
  flags = [flag for flag in classifier_files if not flag.startswith("--output_dir")]
  fresh, copied = _predict_into_a_new_output_dir(
      "run_classifier.py", model_dir, classifier_data.LABEL_LIST_FILE, flags, "test_results.tsv")
  assert fresh == copied and len(fresh.splitlines()) == 2
  os.remove(tmp_path / "data" / "train.tsv")  # Only the file to predict.
  result = run_script("run_classifier.py", "--do_predict", "--output_dir=%s" % (tmp_path / "new"),
                      "--init_checkpoint=%s" % (model_dir / "bert_model.ckpt"), *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  assert (tmp_path / "new" / "test_results.tsv").read_bytes() == fresh


def test_tagging_from_another_run_reads_the_tag_list_beside_its_checkpoint(tmp_path):
  # Before, run_ner without --do_train stopped: "<output_dir>/tag_list.txt not found".
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  model_dir = tmp_path / "model"
  tagger = tagging.BertTagger(tiny_config(), 3)
  tagger.build()
  checkpoints.save_checkpoint(tagger, str(model_dir / "bert_model.ckpt"))
  (model_dir / tagging.TAG_LIST_FILE).write_text("O\nB-PER\nI-PER\n")
  (tmp_path / "data").mkdir()
  (tmp_path / "data" / "test.txt").write_text("the NN O\ncat NN B-PER\n\nsad JJ O\n")
  fresh, copied = _predict_into_a_new_output_dir(
      "run_ner.py", model_dir, tagging.TAG_LIST_FILE,
      ["--data_dir=%s" % (tmp_path / "data"), "--bert_config_file=" + config_file,
       "--vocab_file=" + vocab_file, "--max_seq_length=16"], "test_predictions.txt")
  assert fresh == copied
  assert [line.split()[0] for line in fresh.decode().split("\n") if line.strip()] == [
      "the", "cat", "sad"]


def test_a_converted_multi_label_model_is_read_as_one(tmp_path, classifier_files):
  # A multi-label classifier through Hugging Face and back (problem_type
  # multi_label_classification): before, --do_predict without --multi_label read its logits
  # with a softmax, exit 0.
  source = tmp_path / "source"
  checkpoints.save_checkpoint(built_classifier(), str(source / "bert_model.ckpt"))
  config_file, vocab_file = write_model_files(str(source), tiny_config(), VOCAB)
  (source / classifier_data.LABEL_LIST_FILE).write_text("neg\npos\n")
  model_conversion.convert_google_to_hf(str(source / "bert_model.ckpt"), str(tmp_path / "hf"),
                                        config_file, vocab_file=vocab_file, multi_label=True)
  converted = tmp_path / "converted"
  model_conversion.convert_hf_to_google(str(tmp_path / "hf"), str(converted))
  flags = ["--do_predict", "--init_checkpoint=%s" % (converted / "bert_model.ckpt"),
           "--output_dir=%s" % converted] + [
               flag for flag in classifier_files if not flag.startswith("--output_dir")]
  result = run_script("run_classifier.py", *flags)
  assert_one_line_error(result, "run_classifier.py", "--multi_label=false, but convert_checkpoint "
                        "recorded the model in --init_checkpoint=%s as a multi-label" % converted,
                        "pass --multi_label=true")
  assert not (converted / "test_results.tsv").exists()
  result = run_script("run_classifier.py", "--multi_label", *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  assert count_lines(str(converted / "test_results.tsv")) == 2


def test_a_converted_model_s_config_edited_in_place_is_refused(tmp_path, classifier_files):
  # A conversion's bert_config.json edited from gelu to relu (every shape kept): before, the
  # model predicted with relu, exit 0, though it was made with gelu.
  source = tmp_path / "source"
  checkpoints.save_checkpoint(built_classifier(), str(source / "bert_model.ckpt"))
  config_file, vocab_file = write_model_files(str(source), tiny_config(), VOCAB)
  (source / classifier_data.LABEL_LIST_FILE).write_text("neg\npos\n")
  model_conversion.convert_google_to_hf(str(source / "bert_model.ckpt"), str(tmp_path / "hf"),
                                        config_file, vocab_file=vocab_file)
  converted = tmp_path / "converted"
  model_conversion.convert_hf_to_google(str(tmp_path / "hf"), str(converted))
  converted_config = converted / "bert_config.json"
  written = converted_config.read_text()
  fields = json.loads(written)
  assert fields["hidden_act"] == "gelu"
  converted_config.write_text(json.dumps(dict(fields, hidden_act="relu")))
  model_flags = ["--init_checkpoint=%s" % (converted / "bert_model.ckpt"),
                 "--bert_config_file=%s" % converted_config]
  flags = ["--do_predict", "--output_dir=%s" % (tmp_path / "out")] + model_flags + [
      flag for flag in classifier_files if not flag.startswith(("--output_dir",
                                                                "--bert_config_file"))]
  result = run_script("run_classifier.py", *flags)
  assert_one_line_error(result, "run_classifier.py", "--bert_config_file=%s has hidden_act relu, "
                        "not gelu: convert_checkpoint recorded the model in --init_checkpoint=%s"
                        % (converted_config, converted))
  assert not (tmp_path / "out").exists()
  result = run_script("convert_checkpoint.py", "--output_dir=%s" % (tmp_path / "hf2"),
                      "--vocab_file=" + vocab_file, *model_flags)
  assert_one_line_error(result, "convert_checkpoint.py", "has hidden_act relu, not gelu")
  assert not (tmp_path / "hf2").exists()
  converted_config.write_text(written)
  result = run_script("run_classifier.py", *flags)
  assert result.returncode == 0, result.stderr[-2000:]
  assert count_lines(str(tmp_path / "out" / "test_results.tsv")) == 2


def test_predict_with_other_model_settings_than_training_s_is_an_error(tmp_path,
                                                                       classifier_files):
  """What the run recorded is what its model computes with. A vocab of the same size and special
  tokens, two words swapped: every id of theirs would be read as the other word; another casing:
  other tokens; another activation in the config: another network from the same weights; a
  label list in another order: every output named after another label; another task: other
  inputs and labels. Prediction names each difference; dropout may differ (it is off)."""
  trained = run_script("run_classifier.py", "--do_train", "--train_batch_size=2",
                       "--num_train_epochs=1", *classifier_files)
  assert trained.returncode == 0, trained.stderr[-2000:]
  output_dir = "--output_dir=%s" % (tmp_path / "out")
  swapped = list(VOCAB)
  cat, dog = swapped.index("cat"), swapped.index("dog")
  swapped[cat], swapped[dog] = swapped[dog], swapped[cat]
  (tmp_path / "swapped.txt").write_text("".join(token + "\n" for token in swapped))
  config = json.loads(tiny_config().to_json_string())
  (tmp_path / "relu.json").write_text(json.dumps(dict(config, hidden_act="relu")))
  (tmp_path / "dropout.json").write_text(json.dumps(dict(config, hidden_dropout_prob=0.5)))
  flags = [flag for flag in classifier_files
           if not flag.startswith(("--vocab_file=", "--bert_config_file="))]
  vocab_file = [flag for flag in classifier_files if flag.startswith("--vocab_file=")][0]
  # The settings a command line gives, all changed in one command: its one line names each (a
  # sigmoid per label, --multi_label, is another head's reading of the same logits).
  (tmp_path / "sst").mkdir()
  (tmp_path / "sst" / "test.tsv").write_text("index\tsentence\n0\tthe dog ran\n")
  result = run_script("run_classifier.py", "--do_predict", "--do_lower_case=false",
                      "--vocab_file=%s" % (tmp_path / "swapped.txt"),
                      "--bert_config_file=%s" % (tmp_path / "relu.json"), "--multi_label",
                      "--task_name=SST-2", "--data_dir=%s" % (tmp_path / "sst"),
                      *[flag for flag in flags if not flag.startswith(("--task_name",
                                                                       "--data_dir"))])
  assert_one_line_error(
      result, "run_classifier.py", "the model in %s was trained with other settings" % output_dir,
      "--bert_config_file (hidden_act): recorded gelu, now relu",
      "--do_lower_case: recorded True, now False", "--vocab_file: recorded sha256:",
      "--task_name: recorded generic, now sst-2", "--multi_label: recorded False, now True")
  assert not (tmp_path / "out" / "test_results.tsv").exists()
  predicted = run_script("run_classifier.py", "--do_predict", vocab_file,
                         "--bert_config_file=%s" % (tmp_path / "dropout.json"), *flags)
  assert predicted.returncode == 0, predicted.stderr[-2000:]
  label_list = tmp_path / "out" / classifier_data.LABEL_LIST_FILE
  assert label_list.read_text() == "neg\npos\n"
  label_list.write_text("pos\nneg\n")
  (tmp_path / "out" / "test_results.tsv").unlink()
  result = run_script("run_classifier.py", "--do_predict", *classifier_files)
  assert_one_line_error(result, "run_classifier.py",
                        "the label list (label_list.txt or tag_list.txt): recorded [neg, pos], "
                        "now [pos, neg]")
  assert not (tmp_path / "out" / "test_results.tsv").exists()
  label_list.write_text("neg\npos\nmid\n")  # A label more: named as well, not as a head's shape.
  result = run_script("run_classifier.py", "--do_predict", *classifier_files)
  assert_one_line_error(result, "run_classifier.py",
                        "the label list (label_list.txt or tag_list.txt): recorded [neg, pos], "
                        "now [neg, pos, mid]")
  assert not (tmp_path / "out" / "test_results.tsv").exists()
  label_list.write_text("neg\npos\n")
  # The other scripts that read a run's model: from its checkpoint, as it is.
  init_checkpoint = "--init_checkpoint=%s" % (tmp_path / "out")
  relu = "--bert_config_file=%s" % (tmp_path / "relu.json")
  converted = tmp_path / "converted"
  result = run_script("convert_checkpoint.py", init_checkpoint, relu, "--task_name=MRPC",
                      "--do_lower_case=false", "--output_dir=%s" % converted)
  assert_one_line_error(result, "convert_checkpoint.py",
                        "the model in %s was trained with other settings" % init_checkpoint,
                        "recorded gelu, now relu", "--do_lower_case: recorded True, now False",
                        "--task_name: recorded generic, now mrpc")
  assert not converted.exists()
  (tmp_path / "input.txt").write_text("the dog ran\n")
  features = tmp_path / "features.jsonl"
  result = run_script("extract_features.py", init_checkpoint, relu, vocab_file,
                      "--input_file=%s" % (tmp_path / "input.txt"), "--layers=-1",
                      "--max_seq_length=16", "--output_file=%s" % features)
  assert_one_line_error(result, "extract_features.py", "recorded gelu, now relu")
  assert not features.exists()
  # Its label list, edited since, would name the converted model's outputs after other labels.
  label_list.write_text("pos\nneg\n")
  config_file = [flag for flag in classifier_files if flag.startswith("--bert_config_file=")][0]
  result = run_script("convert_checkpoint.py", init_checkpoint, config_file, vocab_file,
                      "--output_dir=%s" % converted)
  assert_one_line_error(result, "convert_checkpoint.py",
                        "the model in %s was trained with other settings" % init_checkpoint,
                        "recorded [neg, pos], now [pos, neg]")
  assert not converted.exists()
  # Its model read as it is for a task whose labels are other names: every output renamed.
  label_list.write_text("neg\npos\n")
  relabeled = tmp_path / "relabeled"
  relabeled.mkdir()
  (relabeled / "train.tsv").write_text("sentence\tlabel\nthe cat sat\tbad\na good dog\tgood\n")
  (relabeled / "dev.tsv").write_text("sentence\tlabel\nthe cat sat\tbad\n")
  flags = [flag for flag in classifier_files if not flag.startswith(("--data_dir", "--output_dir"))]
  result = run_script("run_classifier.py", "--do_eval", init_checkpoint, *flags,
                      "--data_dir=%s" % relabeled, "--output_dir=%s" % (tmp_path / "eval"))
  assert_one_line_error(result, "run_classifier.py",  # The model's labels are its label list's.
                        "dev.tsv:2: unknown label 'bad'; expected one of 2 labels (neg, pos) from "
                        "%s, the labels of the model used" % label_list)
  assert not (tmp_path / "eval" / "eval_results.txt").exists()
  # Another task's script trains nothing into the run: its label list, cache and checkpoints
  # stay as they are (before, run_ner wrote tag_list.txt and its train cache there first).
  run_dir = tmp_path / "out"
  phases = json.loads((run_dir / "training_settings.json").read_text())["phases"]
  assert [phase["task"] for phase in phases.values()] == ["classifier"]
  listing = {path: (path.stat().st_size, path.stat().st_mtime_ns) for path in run_dir.rglob("*")}
  (tmp_path / "conll").mkdir()
  (tmp_path / "conll" / "train.txt").write_text("the NN O O\ncat NN O B-PER\n\n")
  result = run_script("run_ner.py", "--do_train", vocab_file, config_file,
                      "--data_dir=%s" % (tmp_path / "conll"), "--max_seq_length=16", output_dir)
  assert_one_line_error(result, "run_ner.py", "%s holds a classifier run (recorded in "
                        "training_settings.json), not a tagger run" % output_dir)
  result = run_script("run_pretraining.py", "--do_eval", config_file, output_dir,
                      "--input_file=%s" % (tmp_path / "conll" / "train.txt"),
                      "--max_seq_length=16", "--max_predictions_per_seq=2")
  assert_one_line_error(result, "run_pretraining.py", "%s holds a classifier run (recorded in "
                        "training_settings.json), not a pretraining run" % output_dir)
  assert {path: (path.stat().st_size, path.stat().st_mtime_ns)
          for path in run_dir.rglob("*")} == listing


def test_a_run_records_the_sentencepiece_model_it_tokenized_with(tmp_path, classifier_files):
  """With both --spm_model_file and --vocab_file the SentencePiece model tokenizes (the flag's
  help: instead of --vocab_file), so the run records it: predicting with the vocab alone, which
  would tokenize into other ids, is refused. Before, the run recorded the vocab it never read."""
  import sentencepiece  # pylint: disable=g-import-not-at-top
  from test_tokenization import train_sentencepiece  # pylint: disable=g-import-not-at-top
  spm_file = train_sentencepiece(str(tmp_path))
  pieces = sentencepiece.SentencePieceProcessor(model_file=spm_file).get_piece_size()
  config_file = tmp_path / "spm_config.json"
  config_file.write_text(tiny_config(pieces).to_json_string())
  vocab_file = tmp_path / "other_vocab.txt"  # As many WordPiece tokens: the sizes agree.
  vocab_file.write_text("".join(token + "\n" for token in
                                VOCAB + ["w%d" % i for i in range(pieces - len(VOCAB))]))
  flags = [flag for flag in classifier_files
           if not flag.startswith(("--vocab_file=", "--bert_config_file="))]
  flags += ["--bert_config_file=%s" % config_file]
  trained = run_script("run_classifier.py", "--do_train", "--train_batch_size=2",
                       "--num_train_epochs=1", "--spm_model_file=" + spm_file,
                       "--vocab_file=%s" % vocab_file, *flags)
  assert trained.returncode == 0, trained.stderr[-2000:]
  assert "--vocab_file=%s is not read: --spm_model_file=%s tokenizes instead" % (
      vocab_file, spm_file) in trained.stderr
  phases = json.loads((tmp_path / "out" / "training_settings.json").read_text())["phases"]
  assert [phase["vocab"] for phase in phases.values()] == [tokenization.vocab_fingerprint(spm_file)]
  result = run_script("run_classifier.py", "--do_predict", "--vocab_file=%s" % vocab_file, *flags)
  assert_one_line_error(result, "run_classifier.py", "trained with other settings",
                        "--vocab_file: recorded %s, now %s" % (
                            tokenization.vocab_fingerprint(spm_file),
                            tokenization.vocab_fingerprint(str(vocab_file))))
  assert not (tmp_path / "out" / "test_results.tsv").exists()


def test_a_run_s_model_is_its_best_checkpoint_with_the_run_s_companions(tmp_path):
  """A directory read as a checkpoint is the run's model: the best checkpoint it kept
  (`--keep_best_checkpoint`), not its last; that checkpoint's companions (config, label list,
  record) are the run's, in the directory above `best/`."""
  run_dir = tmp_path / "run"
  model = built_classifier()
  for step in (3, 6):
    checkpoints.save_checkpoint(model, checkpoints.checkpoint_prefix(str(run_dir), step))
  (run_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-6"\n')
  best = checkpoints.checkpoint_prefix(str(run_dir / checkpoints.BEST_DIR), 3)
  assert checkpoints.resolve_checkpoint_path(str(run_dir)) == str(run_dir / "model.ckpt-6")
  checkpoints.save_checkpoint(model, best)
  assert checkpoints.resolve_checkpoint_path(str(run_dir)) == str(run_dir / "best" / "model.ckpt-3")
  assert checkpoints.checkpoint_directory(best) == str(run_dir)
  assert checkpoints.checkpoint_directory(str(run_dir / "best")) == str(run_dir)  # Its directory.
  assert checkpoints.checkpoint_directory(str(run_dir / "model.ckpt-6")) == str(run_dir)
  # A directory named best of the user's own, with no run above it, is its checkpoint's.
  elsewhere = tmp_path / "models" / "best"
  checkpoints.save_checkpoint(model, str(elsewhere / "model.ckpt-1"))
  assert checkpoints.checkpoint_directory(str(elsewhere / "model.ckpt-1")) == str(elsewhere)
  assert checkpoints.checkpoint_directory(str(elsewhere)) == str(elsewhere)


def test_a_converted_model_is_used_with_its_source_s_casing(tmp_path, classifier_files):
  # A cased Hugging Face model converted to Google's format: before, fine-tuning or predicting
  # with the default --do_lower_case=true lowercased every text for a cased vocab, exit 0.
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  encoder = modeling.BertModel(tiny_config())
  encoder.build()
  checkpoint = checkpoints.save_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
  model_conversion.convert_google_to_hf(checkpoint, str(tmp_path / "hf"), config_file,
                                          vocab_file=vocab_file, do_lower_case=False)
  model_conversion.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "google"))
  converted = str(tmp_path / "google" / "bert_model.ckpt")
  result = run_script("run_classifier.py", "--do_train", "--init_checkpoint=" + converted,
                      *classifier_files)
  assert_one_line_error(
      result, "run_classifier.py", "--do_lower_case=true, but convert_checkpoint recorded the "
      "model in --init_checkpoint=%s as cased" % (tmp_path / "google"),
      "pass --do_lower_case=false")
  assert not (tmp_path / "out").exists()
  # Another vocab of the same size (two words swapped) would read every id as another token.
  swapped = list(VOCAB)
  swapped[-1], swapped[-2] = swapped[-2], swapped[-1]
  (tmp_path / "swapped.txt").write_text("".join(token + "\n" for token in swapped))
  flags = [flag for flag in classifier_files if not flag.startswith("--vocab_file=")]
  result = run_script("run_classifier.py", "--do_train", "--init_checkpoint=" + converted,
                      "--do_lower_case=false", "--vocab_file=%s" % (tmp_path / "swapped.txt"),
                      *flags)
  assert_one_line_error(
      result, "run_classifier.py", "--vocab_file=%s is not the vocab convert_checkpoint wrote "
      "with the model in --init_checkpoint=%s" % (tmp_path / "swapped.txt", tmp_path / "google"))
  assert not (tmp_path / "out").exists()


def test_a_config_other_than_the_model_s_own_is_refused_where_shapes_would_not_tell(tmp_path):
  # Before, a converted model read with a config of 4 heads instead of 2, or relu instead of
  # gelu (every variable the same shape), computed another model's features, exit 0.
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  encoder = modeling.BertModel(tiny_config())
  encoder.build()
  release = checkpoints.save_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
  model_conversion.convert_google_to_hf(release, str(tmp_path / "hf"), config_file,
                                          vocab_file=vocab_file)
  model_conversion.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "google"))
  converted = str(tmp_path / "google" / "bert_model.ckpt")
  (tmp_path / "other").mkdir()
  heads_file = tmp_path / "other" / "heads.json"
  heads_file.write_text(json.dumps(dict(tiny_config().to_dict(), num_attention_heads=4)))
  (tmp_path / "input.txt").write_text("the cat sat\n")
  features = tmp_path / "features.jsonl"
  result = run_script("extract_features.py", "--init_checkpoint=" + converted,
                      "--bert_config_file=%s" % heads_file, "--vocab_file=" + vocab_file,
                      "--input_file=%s" % (tmp_path / "input.txt"), "--max_seq_length=16",
                      "--output_file=%s" % features)
  assert_one_line_error(
      result, "extract_features.py", "--bert_config_file=%s has num_attention_heads 4, not 2: the "
      "model in --init_checkpoint=%s was made with %s" % (
          heads_file, tmp_path / "google", tmp_path / "google" / "bert_config.json"))
  assert not features.exists()
  # The converter reads a Google release (or a conversion) with the config beside it alike.
  relu_file = tmp_path / "other" / "relu.json"
  relu_file.write_text(json.dumps(dict(tiny_config().to_dict(), hidden_act="relu")))
  for checkpoint in (release, converted):
    with pytest.raises(modeling.ConfigError, match="has hidden_act relu, not gelu"):
      model_conversion.convert_google_to_hf(checkpoint, str(tmp_path / "hf2"), str(relu_file),
                                              vocab_file=vocab_file)
  assert not (tmp_path / "hf2").exists()
  # Dropout and the initializer are the user's to change; the config itself passes.
  free = tmp_path / "other" / "free.json"
  free.write_text(json.dumps(dict(tiny_config().to_dict(), hidden_dropout_prob=0.0,
                                  initializer_range=0.5, hidden_act="GELU")))
  for checked in (free, tmp_path / "bert_config.json"):
    modeling.check_config_of_model_directory(modeling.BertConfig.from_json_file(str(checked)),
                                             str(checked), str(tmp_path), "`init_checkpoint`")


def test_a_model_garden_conversion_is_converted_back_only_with_its_own_companions(tmp_path):
  # Before, --model_garden_checkpoint of our own Model Garden conversion took another vocab of
  # the same size or a relu config, and wrote them as the converted model's, exit 0 (probe 19).
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  encoder = modeling.BertModel(tiny_config())
  encoder.build()
  release = checkpoints.save_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
  garden = model_conversion.convert_google_to_model_garden(
      release, str(tmp_path / "garden"), config_file, vocab_file=vocab_file)
  swapped = list(VOCAB)
  swapped[-1], swapped[-2] = swapped[-2], swapped[-1]
  (tmp_path / "other").mkdir()
  swapped_file = tmp_path / "other" / "vocab.txt"
  swapped_file.write_text("".join(token + "\n" for token in swapped))
  relu_file = tmp_path / "other" / "relu.json"
  relu_file.write_text(json.dumps(dict(tiny_config().to_dict(), hidden_act="relu")))
  result = run_script("convert_checkpoint.py", "--model_garden_checkpoint=" + garden,
                      "--vocab_file=%s" % swapped_file, "--output_dir=%s" % (tmp_path / "back"))
  assert_one_line_error(
      result, "convert_checkpoint.py", "--vocab_file=%s is not the vocab convert_checkpoint wrote "
      "with the model in --model_garden_checkpoint=%s" % (swapped_file, tmp_path / "garden"))
  result = run_script("convert_checkpoint.py", "--model_garden_checkpoint=" + garden,
                      "--bert_config_file=%s" % relu_file, "--output_dir=%s" % (tmp_path / "back"))
  assert_one_line_error(
      result, "convert_checkpoint.py", "--bert_config_file=%s has hidden_act relu" % relu_file,
      "the model in --model_garden_checkpoint=%s" % (tmp_path / "garden"))
  assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("output_format, source_flag, edited_file", [
    ("hugging_face", "--hf_model_path=%s", "vocab.txt"),
    ("model_garden", "--model_garden_checkpoint=%s/bert_model.ckpt", "bert_config.json"),
    ("keras_hub", "--keras_hub_preset=%s", "assets/tokenizer/vocabulary.txt"),
])
def test_a_conversion_edited_in_place_is_not_converted_on(tmp_path, output_format, source_flag,
                                                          edited_file):
  # Before, convert_checkpoint read a conversion whose vocab had two tokens swapped in place, or
  # whose config said relu for gelu, and wrote them on as the new model's, exit 0 (probe 19).
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  encoder = modeling.BertModel(tiny_config())
  encoder.build()
  release = checkpoints.save_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
  converted = tmp_path / "converted"
  # The conversions to edit are made in process, by what convert_checkpoint.py's --output_format
  # calls with these flags: only the refusal at the end is the command under test.
  convert = {"hugging_face": model_conversion.convert_google_to_hf,
             "keras_hub": model_conversion.convert_google_to_keras_hub,
             "model_garden": model_conversion.convert_google_to_model_garden}[output_format]
  convert(release, str(converted), config_file, vocab_file=vocab_file)
  if output_format == "hugging_face":  # And once more to Google's format, edited there.
    model_conversion.convert_hf_to_google(str(converted), str(tmp_path / "google"))
    converted, source_flag = tmp_path / "google", "--init_checkpoint=%s/bert_model.ckpt"
  target = converted / edited_file
  text = target.read_text()
  if edited_file.endswith(".json"):
    text = text.replace('"gelu"', '"relu"')
  else:
    lines = text.splitlines(keepends=True)
    lines[-1], lines[-2] = lines[-2], lines[-1]
    text = "".join(lines)
  assert text != target.read_text()
  target.write_text(text)
  result = run_script("convert_checkpoint.py", source_flag % converted,
                      "--output_dir=%s" % (tmp_path / "again"))
  assert_one_line_error(result, "convert_checkpoint.py", "%s changed since convert_checkpoint "
                        "wrote it" % edited_file, str(converted / ".convert_checkpoint.json"))
  assert not (tmp_path / "again").exists()


def test_a_checkpoint_with_more_encoder_layers_than_the_config_is_refused(tmp_path):
  # Before, a 1-layer config predicted from a 2-layer run's checkpoint after a warning naming
  # the unused variables: a cut-down network of the trained one answered, exit 0.
  output_dir = str(tmp_path / "out")
  checkpoints.save_training_checkpoint(checkpoints.checkpoint_variables(built_classifier()),
                                       output_dir, 1, 5)
  one_layer = dict(tiny_config().to_dict(), num_hidden_layers=1)

  def build_one_layer():
    model = classifier.BertClassifier(modeling.BertConfig(**one_layer), 2)
    model.build()
    return model

  strategy = tf.distribute.get_strategy()
  with pytest.raises(checkpoints.CheckpointError, match="holds 16 encoder variables the model of "
                     "the BERT config has no place for, e.g. bert/encoder/layer_1/"):
    checkpoints.restore_model(strategy, build_one_layer, output_dir)
  prefix = checkpoints.list_checkpoints(output_dir)[0]
  with pytest.raises(checkpoints.CheckpointError, match="e.g. bert/encoder/layer_1/"):
    checkpoints.load_init_checkpoint(build_one_layer(), prefix)
  # A pretraining checkpoint's heads (cls/...) are not the encoder's: they may stay unused.
  pretrained = heads.BertPretrainingModel(tiny_config())
  pretrained.build()
  prefix = checkpoints.save_checkpoint(pretrained, str(tmp_path / "pretrained" / "bert_model.ckpt"))
  report = checkpoints.load_init_checkpoint(built_classifier(), prefix)
  assert report.unused and all(name.startswith("cls/") for name in report.unused)


def test_a_glue_file_that_lost_its_header_is_refused(tmp_path):
  # Before, the first data row was skipped as the header: MRPC's test_results.tsv had 9 lines
  # for 10 rows, every result beside the wrong row (it holds no ids).
  rows = ["%d\t%d\t%d\tthe cat sat\tthe dog ran" % (i % 2, i, i + 1) for i in range(3)]
  (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
  (tmp_path / "test.tsv").write_text("\n".join(
      "%d\t%d\t%d\tthe cat sat\tthe dog ran" % (i, i, i + 1) for i in range(3)) + "\n")
  processor = classifier_data.get_processor("MRPC")
  for read, file_name in ((processor.get_train_examples, "train.tsv"),
                          (processor.get_test_examples, "test.tsv")):
    with pytest.raises(task_files.BadInputError, match=re.escape(
        "%s:1: the first line is a data row, not the header" % (tmp_path / file_name))):
      read(str(tmp_path))
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  (tmp_path / "train.tsv").write_text(header + "\n".join(rows) + "\n")
  assert len(processor.get_train_examples(str(tmp_path))) == 3


def test_restoring_without_any_checkpoint_is_an_error(tmp_path):
  # Before, a fresh model (random weights) evaluated, predicted and exported after a warning.
  output_dir = str(tmp_path / "out")
  with pytest.raises(errors.TrainingError, match="no checkpoint in %s and no `init_checkpoint`"
                     % output_dir):
    checkpoints.restore_model(tf.distribute.get_strategy(),
                              built_classifier, output_dir)


# ------------------------------------------------------------------------------------------------
# Records against the vocab (dynamic masking).
# ------------------------------------------------------------------------------------------------

SEQ_LENGTH, MAX_PREDICTIONS = 32, 5


@pytest.fixture
def pretraining_records(tmp_path):
  """Records made by create_pretraining_data.py's pipeline with VOCAB ([MASK] id 4): (path, their
  ids of [CLS] and of every masked position's stored token, read here from the records)."""
  rng = random.Random(3)
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n\n".join("\n".join(" ".join(rng.choice(WORDS) for _ in range(12))
                                          for _ in range(6)) for _ in range(8)) + "\n")
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(VOCAB) + "\n")
  records = str(tmp_path / "records.tfrecord")
  # In process: the pipeline create_pretraining_data.py runs with these flags (the records are
  # what the tests read, not the command).
  pretraining_data.run(pretraining_data.RunConfig(
      input_file=str(corpus), output_file=records, vocab_file=str(vocab_file),
      options=pretraining_instances.InstanceOptions(max_seq_length=SEQ_LENGTH,
                                                    max_predictions_per_seq=MAX_PREDICTIONS,
                                                    dupe_factor=2)))
  assert tf.io.gfile.exists(records)
  first_ids, masked_ids = [], []
  for record in tf.data.TFRecordDataset(records):
    features = tf.train.Example.FromString(record.numpy()).features.feature
    input_ids = features["input_ids"].int64_list.value
    first_ids.append(input_ids[0])
    masked_ids += [input_ids[p] for p, w in zip(features["masked_lm_positions"].int64_list.value,
                                                features["masked_lm_weights"].float_list.value)
                   if w > 0]
  return records, first_ids, masked_ids


def test_dynamic_masking_refuses_records_of_another_vocab(tmp_path, pretraining_records):
  records, first_ids, masked_ids = pretraining_records
  # The records are VOCAB's: [CLS] (id 2) opens each, [MASK] (id 4) fills most masked positions.
  assert set(first_ids) == {VOCAB.index("[CLS]")}
  assert masked_ids.count(VOCAB.index("[MASK]")) > 0.6 * len(masked_ids) >= 20
  # The same tokens with [MASK] and [PAD] swapped: before, re-masking wrote id 0 ([PAD] in the
  # records' vocab) and the stored [MASK] id stayed as an ordinary word; training went on.
  swapped = list(VOCAB)
  swapped[0], swapped[4] = swapped[4], swapped[0]
  vocab_file = tmp_path / "swapped_vocab.txt"
  vocab_file.write_text("\n".join(swapped) + "\n")
  config_file = tmp_path / "bert_config.json"
  config_file.write_text(tiny_config().to_json_string())
  output_dir = tmp_path / "out"
  result = run_script("run_pretraining.py", "--do_train", "--dynamic_masking",
                      "--input_file=" + records, "--vocab_file=%s" % vocab_file,
                      "--bert_config_file=%s" % config_file, "--output_dir=%s" % output_dir,
                      "--max_seq_length=%d" % SEQ_LENGTH,
                      "--max_predictions_per_seq=%d" % MAX_PREDICTIONS, "--train_batch_size=8",
                      "--num_train_steps=2", "--num_warmup_steps=0")
  line = assert_one_line_error(result, "run_pretraining.py", records, str(vocab_file),
                               "hold the [MASK] id 0")
  assert len(first_ids) <= 256  # All records are read for the check.
  assert "only %d of the %d masked positions" % (masked_ids.count(0), len(masked_ids)) in line
  assert not tf.io.gfile.glob(str(output_dir / "model.ckpt-*"))


def test_dynamic_masking_refuses_records_without_its_cls_id(tmp_path, pretraining_records):
  records, _, _ = pretraining_records
  moved = ["[UNK]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"] + VOCAB[5:]  # [CLS] at 3, [SEP] at 2.
  vocab_file = tmp_path / "moved_vocab.txt"
  vocab_file.write_text("\n".join(moved) + "\n")
  masking = pretraining.DynamicMasking.from_vocab_file(str(vocab_file), 0.15, MAX_PREDICTIONS,
                                                        False)
  with pytest.raises(pretraining.RecordVocabError,
                     match=r"%s: record 1 starts with id 2, not the \[CLS\] id 3 of `vocab_file` "
                     r"%s" % (re.escape(records), re.escape(str(vocab_file)))):
    pretraining.check_records_vocab([records], masking.vocab, "`vocab_file` %s" % vocab_file)
  # The records' own vocab passes.
  pretraining.check_records_vocab([records], pretraining.DynamicMasking.from_vocab_file(
      str(tmp_path / "vocab.txt"), 0.15, MAX_PREDICTIONS, False).vocab, "v")


# ------------------------------------------------------------------------------------------------
# Label and tag names.
# ------------------------------------------------------------------------------------------------


def test_hugging_face_id2label_with_a_repeated_name_is_refused():
  # Two classes of one name: predictions cannot tell them apart, and a label2id keeps one.
  hf_config = {"architectures": ["BertForSequenceClassification"],
               "id2label": {"0": "x", "1": "x"}}
  with pytest.raises(errors.InputError, match=r"config\.json: id2label: the name 'x' at id 1 "
                     r"repeats id 0"):
    conversion_hf.hf_labels(hf_config, conversion.SEQUENCE_CLASSIFICATION,
                                 "config.json")


def test_label_and_tag_lists_with_a_repeated_name_are_refused(tmp_path):
  label_list = tmp_path / classifier_data.LABEL_LIST_FILE
  label_list.write_text("neg\nneg\n")
  with pytest.raises(errors.InputError, match=r"label_list\.txt: the name 'neg' at line 2 "
                     r"repeats line 1"):
    classifier_data.read_label_list(str(label_list))
  (tmp_path / tagging.TAG_LIST_FILE).write_text("O\nB-PER\nI-PER\nB-PER\n")
  with pytest.raises(errors.InputError, match=r"tag_list\.txt: the name 'B-PER' at line 4 "
                     r"repeats line 2"):
    tagging.read_tag_list(str(tmp_path))
  written = tmp_path / "written.txt"
  with pytest.raises(errors.InputError, match=r"the name 'pos' at line 3 repeats line 1"):
    task_files.write_label_list(str(written), ["pos", "neg", "pos"])
  assert not written.exists()
  # Distinct names read and write as before.
  label_list.write_text("neg\npos\n")
  assert classifier_data.read_label_list(str(label_list)) == ("neg", "pos")


def test_keras_hub_classifier_preset_converts_with_a_warning_that_its_head_is_left_out(
    tmp_path, caplog):
  # A BertTextClassifier preset whose task.weights.h5 is missing: its encoder converts, and the
  # user is warned (not at INFO) that the checkpoint has no head; predicting with it is an error.
  keras_hub = pytest.importorskip("keras_hub")
  backbone = keras_hub.models.BertBackbone(vocabulary_size=len(VOCAB), num_layers=2, num_heads=2,
                                           hidden_dim=32, intermediate_dim=64,
                                           max_sequence_length=64)
  preset = tmp_path / "preset"
  keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None).save_to_preset(
      str(preset))
  (preset / "task.weights.h5").unlink()
  with caplog.at_level("WARNING"):
    prefix = model_conversion.convert_keras_hub_to_google(str(preset), str(tmp_path / "google"))
  warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert any("task.json: the preset holds a task, but only its BertBackbone is converted" in w
             for w in warnings), warnings
  with pytest.raises(errors.TrainingError, match="has no task head"):
    checkpoints.restore_model(tf.distribute.get_strategy(),
                              built_classifier, None, prefix)


def test_a_label_list_is_read_as_the_data_s_label_cells_are(tmp_path):
  """A byte-order mark, CRLF line ends, spaces around a name and blank lines at the end (an editor's)
  are not part of the names, as they are not part of a data file's label cell."""
  label_list = tmp_path / classifier_data.LABEL_LIST_FILE
  label_list.write_bytes(b"\xef\xbb\xbfneg\r\npos \r\n\r\n")
  assert classifier_data.read_label_list(str(label_list)) == ("neg", "pos")
  (tmp_path / tagging.TAG_LIST_FILE).write_bytes(b"\xef\xbb\xbfO\r\nB-PER\r\n")
  assert tagging.read_tag_list(str(tmp_path)) == ["O", "B-PER"]
  label_list.write_text("neg\n\npos\n")
  with pytest.raises(errors.InputError, match=r"label_list\.txt:2: empty label"):
    classifier_data.read_label_list(str(label_list))


def test_a_config_file_without_a_shape_field_or_with_a_misspelt_one_is_refused(tmp_path):
  """Left out, a field would take BERT-Base's value (12 layers for a 2-layer checkpoint);
  misspelt, it would be kept as an extra key while the field took that default."""
  google = json.loads(open(shared_path("fixtures", "google_bert_chinese", "bert_config.json"),
                           encoding="utf-8").read())
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(google))
  assert modeling.BertConfig.from_json_file(str(path)).num_hidden_layers == 12
  missing = dict(google)
  del missing["num_hidden_layers"]
  path.write_text(json.dumps(missing))
  with pytest.raises(modeling.ConfigError, match="field num_hidden_layers is missing"):
    modeling.BertConfig.from_json_file(str(path))
  misspelt = dict(google, hiden_size=64)
  path.write_text(json.dumps(misspelt))
  with pytest.raises(modeling.ConfigError, match="unknown key 'hiden_size': did you mean "
                     "'hidden_size'"):
    modeling.BertConfig.from_json_file(str(path))
  # Lengthened: before, kept as an extra key while training used the default dropout of 0.1.
  path.write_text(json.dumps(dict(google, hidden_dropout_probability=0.5)))
  with pytest.raises(modeling.ConfigError, match="unknown key 'hidden_dropout_probability': did "
                     "you mean 'hidden_dropout_prob'"):
    modeling.BertConfig.from_json_file(str(path))
