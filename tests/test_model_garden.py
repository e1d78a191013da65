"""TF Hub encoders and Model Garden checkpoints, in and out, refereed by Model Garden's own code.

`tests/model_garden_reference.py` (a fresh process with `official.nlp`) builds Model Garden's
`BertEncoder` with random weights, saves its checkpoint, exports it in TF Hub's layout with
`export_tfhub_lib.export_model`, and restores the checkpoints we write into its own encoder. Every
conversion is checked by outputs on the same ids (1e-5), not by our own reading of what we wrote.
run_classifier_with_tfhub.py runs as the original's command line, in fresh processes.
"""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from test_serving import run_client
import checkpoints
import choices
import conversion
import conversion_model_garden
import errors
import heads
import model_conversion
import modeling

pytestmark = [pytest.mark.slow, pytest.mark.reference]

REFERENCE = os.path.join(REPO_ROOT, "tests", "model_garden_reference.py")
WORDS = ["w%d" % i for i in range(35)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
# Model Garden's legacy BertConfig fields; its "gelu" is the tanh approximation.
MG_CONFIG = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=32, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=32, type_vocab_size=2,
                 initializer_range=0.02)
IDS = {"input_word_ids": [[2, 7, 9, 11, 3, 20, 21, 3], [2, 30, 8, 3, 0, 0, 0, 0]],
       "input_mask": [[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0]],
       "input_type_ids": [[0, 0, 0, 0, 0, 1, 1, 1], [0] * 8]}
POSITIONS = [[1, 3, 6], [1, 2, 0]]
TOLERANCE = 1e-5


def bert_outputs(directory):
  """Our BertModel from a Google-format directory (bert_config.json, bert_model.ckpt): its
  sequence and pooled outputs on IDS."""
  config = modeling.BertConfig.from_json_file(os.path.join(directory, "bert_config.json"))
  bert = modeling.BertModel(config, name="bert")
  bert.build()
  checkpoints.init_from_checkpoint(bert, os.path.join(directory, "bert_model.ckpt"))
  return our_outputs(bert)


def our_outputs(bert):
  outputs = bert(np.array(IDS["input_word_ids"]), input_mask=np.array(IDS["input_mask"]),
                 token_type_ids=np.array(IDS["input_type_ids"]), training=False)
  return {name: outputs[name].numpy() for name in ("sequence_output", "pooled_output")}


def assert_outputs_equal(ours, theirs, what):
  for name in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(ours[name], np.array(theirs[name]), atol=TOLERANCE,
                               err_msg="%s: %s" % (what, name))


@pytest.fixture(scope="module")
def garden(tmp_path_factory):
  """Model Garden's models and what it made of ours: an uncased and a cased (swish) encoder,
  each as checkpoint and TF Hub export; our random BERT converted to Model Garden's format and
  restored there."""
  root = str(tmp_path_factory.mktemp("model_garden"))
  vocab_file = os.path.join(root, "vocab.txt")
  with open(vocab_file, "w", encoding="utf-8") as writer:
    writer.write("\n".join(VOCAB) + "\n")
  keras.utils.set_random_seed(3)
  ours = modeling.BertModel(modeling.BertConfig.from_dict(
      dict(MG_CONFIG, hidden_act="gelu_approximate")), name="bert")
  ours.build()
  for variable in ours.weights:
    variable.assign(np.random.RandomState(len(variable.path)).normal(
        0.0, 0.5, variable.shape).astype(np.float32))
  ours_dir = os.path.join(root, "ours")
  os.makedirs(ours_dir)
  checkpoints.save_checkpoint(ours, os.path.join(ours_dir, "bert_model.ckpt"))
  with open(os.path.join(ours_dir, "bert_config.json"), "w", encoding="utf-8") as writer:
    writer.write(ours.config.to_json_string())
  shutil.copy(vocab_file, ours_dir)
  ours_in_garden = os.path.join(root, "ours_in_garden")
  model_conversion.convert_google_to_model_garden(os.path.join(ours_dir, "bert_model.ckpt"),
                                                    ours_in_garden)
  by_their_converter = os.path.join(root, "by_their_converter", "ckpt")
  reference = run_client(REFERENCE, root, {
      "root": root, "ids": IDS, "restore": [ours_in_garden], "masked_lm_positions": POSITIONS,
      "convert": [[os.path.join(ours_dir, "bert_model.ckpt"),
                   os.path.join(ours_in_garden, "bert_config.json"), by_their_converter]],
      "models": [
          {"name": "uncased", "config": MG_CONFIG, "vocab_file": vocab_file,
           "do_lower_case": True, "seed": 1, "with_mlm": False},
          {"name": "with_mlm", "config": MG_CONFIG, "vocab_file": vocab_file,
           "do_lower_case": True, "seed": 4, "with_mlm": True},
          {"name": "swish", "config": dict(MG_CONFIG, hidden_act="swish"),
           "vocab_file": vocab_file, "do_lower_case": False, "seed": 2, "with_mlm": False}]})
  return {"root": root, "vocab_file": vocab_file, "ours": ours, "ours_dir": ours_dir,
          "ours_in_garden": ours_in_garden, "by_their_converter": by_their_converter,
          **reference}


def test_tf_hub_encoder_of_model_garden_converts_to_a_model_with_its_outputs(garden, tmp_path):
  model = garden["models"]["uncased"]
  out = str(tmp_path / "google")
  model_conversion.convert_tf_hub_to_google(model["hub"], out)
  assert_outputs_equal(bert_outputs(out), model, "converted TF Hub encoder")
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as reader:
    assert reader.read().split() == VOCAB
  config = modeling.BertConfig.from_json_file(os.path.join(out, "bert_config.json"))
  assert (config.num_attention_heads, config.intermediate_size, config.hidden_act) == (
      2, 32, "gelu_approximate")
  mark = os.path.join(out, choices.CONVERTED_MARK_NAME)
  assert '"do_lower_case": true' in open(mark, encoding="utf-8").read()


def write_config(path, **changes):
  """bert_config.json of MG_CONFIG (Model Garden's names) with `changes`; its path."""
  with open(path, "w", encoding="utf-8") as writer:
    writer.write(modeling.BertConfig.from_dict(dict(MG_CONFIG, **changes)).to_json_string())
  return str(path)


def test_tf_hub_encoder_with_its_masked_lm_converts_with_the_head(garden, tmp_path):
  """tfhub.dev's BERT encoders carry the pretrainer's masked-LM head as `mlm`: it becomes the
  original's cls/predictions, giving Model Garden's logits."""
  model = garden["models"]["with_mlm"]
  out = str(tmp_path / "google")
  model_conversion.convert_tf_hub_to_google(model["hub"], out)
  assert_outputs_equal(bert_outputs(out), model, "converted TF Hub encoder with its head")
  config = modeling.BertConfig.from_json_file(os.path.join(out, "bert_config.json"))
  pretraining = heads.BertPretrainingModel(config)
  pretraining.build()
  report = checkpoints.init_from_checkpoint(pretraining, os.path.join(out, "bert_model.ckpt"))
  assert all(name.startswith("cls/seq_relationship/") for name in report.missing)
  logits = pretraining(np.array(IDS["input_word_ids"]), input_mask=np.array(IDS["input_mask"]),
                       token_type_ids=np.array(IDS["input_type_ids"]),
                       masked_lm_positions=np.array(POSITIONS), training=False)
  np.testing.assert_allclose(logits["masked_lm_logits"], np.array(model["mlm_logits"]),
                             atol=TOLERANCE)


def test_model_garden_checkpoint_converts_with_its_config(garden, tmp_path, caplog):
  model = garden["models"]["uncased"]
  out = str(tmp_path / "google")
  config_file = write_config(tmp_path / "bert_config.json")
  with caplog.at_level("WARNING", logger="absl"):
    model_conversion.convert_model_garden_to_google(
        os.path.dirname(model["checkpoint"]), out, config_file, vocab_file=garden["vocab_file"])
  assert_outputs_equal(bert_outputs(out), model, "converted Model Garden checkpoint")
  # Its "gelu" is the tanh approximation: said, since a Google config's "gelu" is exact.
  with open(os.path.join(out, "bert_config.json")) as f:
    assert json.load(f)["hidden_act"] == "gelu_approximate"
  assert '%s: hidden_act "gelu" is read as Model Garden computes it' % config_file in caplog.text


@pytest.mark.parametrize("changes, message", [
    ({"intermediate_size": 64}, r"transformer/layer_0/intermediate/bias \(bert/.*\) has shape "
                                r"\[32\] but the config needs \[64\]"),
    ({"num_attention_heads": 4}, r"its attention weights have 2 heads, but .* says "
                                 r"num_attention_heads 4"),
    (None, "has no bert_config.json beside it: pass `bert_config_file`"),
], ids=["other_shape", "other_heads", "no_config"])
def test_model_garden_checkpoint_without_its_config_is_refused(garden, tmp_path, changes,
                                                               message):
  config_file = None if changes is None else write_config(tmp_path / "c.json", **changes)
  with pytest.raises(conversion.ConversionError, match=message):
    conversion_model_garden.read_model_garden_checkpoint(
        garden["models"]["uncased"]["checkpoint"], config_file)


def test_our_checkpoint_restores_in_model_garden_with_equal_outputs(garden):
  assert_outputs_equal(our_outputs(garden["ours"]), garden["restored"][garden["ours_in_garden"]],
                       "our checkpoint in Model Garden's BertEncoder")


def test_what_model_garden_s_converter_makes_of_ours_converts_back_to_our_weights(garden):
  """Model Garden's tf2_bert_encoder_checkpoint_converter writes its checkpoint of our Google one
  (Checkpoint(encoder=...), name-permuted, heads split): read back, every weight is ours."""
  model = conversion_model_garden.read_model_garden_checkpoint(
      os.path.dirname(garden["by_their_converter"]),  # It saves `ckpt-1` and a state file.
      os.path.join(garden["ours_in_garden"], "bert_config.json"))
  variables = checkpoints.checkpoint_variables(garden["ours"])
  assert sorted(model.tensors) == sorted(variables)
  for name, variable in variables.items():
    np.testing.assert_array_equal(model.tensors[name], variable.numpy(), err_msg=name)


def test_tf_hub_encoder_whose_activation_is_none_of_berts_is_refused(garden):
  with pytest.raises(conversion.ConversionError, match="does not give its outputs"):
    conversion_model_garden.read_tf_hub_encoder(garden["models"]["swish"]["hub"])


def test_what_is_not_a_tf2_bert_encoder_is_refused_in_one_line(garden, tmp_path):
  hub = garden["models"]["uncased"]["hub"]
  without_vocab = str(tmp_path / "without_vocab")
  shutil.copytree(hub, without_vocab)
  os.remove(os.path.join(without_vocab, "assets", "vocab.txt"))
  tf1_module = str(tmp_path / "tf1_module")
  shutil.copytree(hub, tf1_module)
  open(os.path.join(tf1_module, "tfhub_module.pb"), "wb").close()
  cut_short = str(tmp_path / "cut_short")
  shutil.copytree(hub, cut_short)
  graph_file = os.path.join(cut_short, "saved_model.pb")
  with open(graph_file, "rb") as reader:
    head = reader.read(3000)
  with open(graph_file, "wb") as writer:
    writer.write(head)
  cases = [(without_vocab, "vocab.txt does not exist"),
           (cut_short, "saved_model.pb is not a readable SavedModel graph"),
           (tf1_module, "a TF1 Hub module"),
           ("https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4",
            "nothing is downloaded"),
           (str(tmp_path), "holds no saved_model.pb")]
  for path, message in cases:
    with pytest.raises(errors.InputError, match=message):
      conversion_model_garden.read_tf_hub_encoder(path)


def run_script(script, *args):
  """Runs one of our scripts as a user does, in a fresh process; its stderr."""
  completed = subprocess.run([sys.executable, script, *args], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=600)
  assert completed.returncode == 0, completed.stderr[-3000:]
  return completed.stderr


def write_mrpc(directory):
  """A small MRPC-format task of WORDS (train, dev and test files with GLUE's headers)."""
  random = np.random.RandomState(0)
  os.makedirs(directory)
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  rows = ["%d\t%d\t%d\t%s\t%s\n" % (i % 2, i, 100 + i, " ".join(random.choice(WORDS, 5)),
                                    " ".join(random.choice(WORDS, 4))) for i in range(16)]
  for name, first in (("train.tsv", header), ("dev.tsv", header),
                      ("test.tsv", header.replace("Quality", "index"))):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as writer:
      writer.write(first + "".join(rows))


def test_run_classifier_with_tfhub_trains_as_run_classifier_from_the_converted_module(
    garden, tmp_path):
  data_dir = str(tmp_path / "MRPC")
  write_mrpc(data_dir)
  common = ["--task_name=MRPC", "--do_train", "--do_eval", "--do_predict",
            "--data_dir=" + data_dir, "--max_seq_length=16", "--train_batch_size=4",
            "--learning_rate=1e-3", "--num_train_epochs=1.0", "--random_seed=7"]
  hub_out = str(tmp_path / "hub_run")
  run_script("run_classifier_with_tfhub.py",
             "--bert_hub_module_handle=" + garden["models"]["uncased"]["hub"],
             "--output_dir=" + hub_out, "--export_dir=" + str(tmp_path / "export"), *common)
  module = os.path.join(hub_out, "tf_hub_module")
  plain_out = str(tmp_path / "plain_run")
  run_script("run_classifier.py", "--init_checkpoint=" + os.path.join(module, "bert_model.ckpt"),
             "--bert_config_file=" + os.path.join(module, "bert_config.json"),
             "--vocab_file=" + os.path.join(module, "vocab.txt"), "--output_dir=" + plain_out,
             *common)
  trained = [tf.train.load_checkpoint(checkpoints.latest_checkpoint(out))
             for out in (hub_out, plain_out)]
  names = [name for name in trained[0].get_variable_to_shape_map()
           if not checkpoints.is_training_state_name(name)]
  assert "output_weights" in names and "bert/encoder/layer_1/output/dense/kernel" in names
  for name in names:
    np.testing.assert_allclose(trained[0].get_tensor(name), trained[1].get_tensor(name),
                               atol=TOLERANCE, err_msg=name)
  for name in ("eval_results.txt", "test_results.tsv"):
    with open(os.path.join(hub_out, name), encoding="utf-8") as first, \
        open(os.path.join(plain_out, name), encoding="utf-8") as second:
      assert first.read() == second.read(), name
  assert tf.saved_model.contains_saved_model(str(tmp_path / "export" / "1"))
  # convert_checkpoint reads the run as it reads run_classifier's, with the module's files.
  converted = model_conversion.convert_google_to_hf(
      hub_out, str(tmp_path / "hf"), os.path.join(module, "bert_config.json"),
      vocab_file=os.path.join(module, "vocab.txt"), task_name="MRPC")
  with open(os.path.join(os.path.dirname(converted), "config.json"), encoding="utf-8") as reader:
    assert json.load(reader)["architectures"] == ["BertForSequenceClassification"]
  # The trained run keeps its module: another one is refused before anything is written.
  before = {name: open(os.path.join(module, name), "rb").read() for name in os.listdir(module)}
  other = subprocess.run(
      [sys.executable, "run_classifier_with_tfhub.py", "--do_predict", "--output_dir=" + hub_out,
       "--bert_hub_module_handle=" + garden["models"]["with_mlm"]["hub"],
       *[flag for flag in common if flag.startswith(("--task_name", "--data_dir", "--max_seq"))]],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
  assert other.returncode == 1
  assert ("--output_dir=%s trained from another module (%s" % (
      hub_out, garden["models"]["uncased"]["hub"])) in other.stderr.splitlines()[-1]
  assert {name: open(os.path.join(module, name), "rb").read()
          for name in os.listdir(module)} == before


@pytest.mark.parametrize("case", ["not_a_module", "symlinked_module_dir", "module_in_place",
                                  "output_dir_in_the_module", "unknown_task"])
def test_run_classifier_with_tfhub_refuses_before_tensorflow_in_one_line(tmp_path, case):
  """Refusals of the validation pass: one error line naming the flag or path, nothing written
  (TensorFlow never loads, so stderr holds only that line)."""
  data_dir = str(tmp_path / "MRPC")
  write_mrpc(data_dir)
  output_dir = str(tmp_path / "out")
  module_dir = os.path.join(output_dir, "tf_hub_module")
  # What the checks before TensorFlow see of a module: a directory with a saved_model.pb.
  handle = str(tmp_path / "module")
  os.makedirs(handle)
  open(os.path.join(handle, "saved_model.pb"), "wb").close()
  task, expected = "MRPC", None
  if case == "not_a_module":
    handle, expected = data_dir, ("--bert_hub_module_handle=%s holds no saved_model.pb: not a TF "
                                  "Hub SavedModel" % data_dir)
  elif case == "symlinked_module_dir":
    os.makedirs(output_dir)
    os.symlink(data_dir, module_dir)
    expected = "%s is a symlink: the run keeps the module it trains from itself" % module_dir
  elif case == "module_in_place":
    os.makedirs(output_dir)
    os.rename(handle, module_dir)
    handle = module_dir
    expected = ("--bert_hub_module_handle=%s is where this run writes the module's conversion"
                % module_dir)
  elif case == "output_dir_in_the_module":
    output_dir = os.path.join(handle, "run")
    expected = ("--output_dir=%s is in the SavedModel in %s (saved_model.pb): it is a model's "
                "directory, not one to write into" % (output_dir, handle))
  elif case == "unknown_task":
    task, expected = "MRPC9", "`task_name`=MRPC9: unknown task"
  before = sorted(os.walk(tmp_path))
  completed = subprocess.run(
      [sys.executable, "run_classifier_with_tfhub.py", "--task_name=" + task, "--do_train",
       "--data_dir=" + data_dir, "--bert_hub_module_handle=" + handle,
       "--output_dir=" + output_dir], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
  assert completed.returncode == 1
  lines = completed.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith("run_classifier_with_tfhub.py: error: ")
  assert expected.replace("`task_name`", "--task_name") in lines[0], lines
  assert sorted(os.walk(tmp_path)) == before


def test_a_checkpoint_of_the_other_kind_is_refused_naming_the_flag_to_use(garden, tmp_path):
  with pytest.raises(errors.InputError, match="is object-based .* --model_garden_checkpoint"):
    model_conversion.convert_google_to_hf(garden["models"]["uncased"]["checkpoint"],
                                            str(tmp_path / "hf"),
                                            write_config(tmp_path / "c.json"))
  with pytest.raises(errors.InputError, match="is a SavedModel: convert a TF Hub encoder with"):
    conversion_model_garden.read_model_garden_checkpoint(garden["models"]["uncased"]["hub"])
  with pytest.raises(errors.InputError, match="is a name-based checkpoint"):
    conversion_model_garden.read_model_garden_checkpoint(
        os.path.join(garden["ours_dir"], "bert_model.ckpt"))
