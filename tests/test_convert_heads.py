"""Fine-tuned heads converted both ways between our checkpoints and Hugging Face's format, checked
by transformers' own loaders (tests/hf_heads_reference.py, in a process of its own).

Ours out (`CASES`): each task's model with random weights is saved as its script saves it (a
model.ckpt-N with label_list.txt or tag_list.txt beside it; config and vocab elsewhere, as a
released model's) and converted. transformers' AutoTokenizer and AutoModelFor... load the output
and on the same texts must give our FullTokenizer's ids and our model's outputs, to 1e-5, with no
weight missing or left over. Converted back, the checkpoint gives our outputs exactly.

Theirs in (`HF_CASES`): transformers makes a model of each class with random weights and saves it
with its tokenizer; converted, our task model gives its outputs, and the label file our scripts
read names its labels.

KerasHub, in this process (Keras 3 on TensorFlow, as ours): a preset we write loads with
`BertBackbone.from_preset` and `BertTextClassifier.from_preset` and gives our encoder's outputs and
classifier's logits; a preset KerasHub saves converts to a checkpoint our BertModel loads and gives
its outputs.

Tiny models (hidden 16, two layers, a vocab of 33 tokens) keep it fast.
"""
import importlib.util
import json
import os
import subprocess
import sys

import h5py
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT, write_model_files
import checkpoints
import choices
import classifier
import classifier_data
import modeling
import multiple_choice
import squad
import tagging
import task_files
from test_modeling import randomize
import conversion
import conversion_google
import conversion_hf
import heads
import model_conversion
import tokenization

pytestmark = pytest.mark.reference

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "?", "the", "a", "cat", "dog",
         "sat", "sit", "on", "mat", "ran", "home", "who", "lives", "in", "paris", "john", "not",
         "is", "very", "good", "The", "John", "Paris", "##s", "##ting"]
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=24, hidden_act="gelu", hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1, max_position_embeddings=32, type_vocab_size=2,
              initializer_range=0.02)
# Unknown words ("zebra"), pieces ("cats", "sitting"), punctuation and case.
PAIRS = {"first": ["The cat sat on the mat.", "Who lives in Paris?", "cats"],
         "second": ["A dog ran home!", "John lives in Paris, not the zebra.", "dogs sitting"]}
SENTENCES = {"first": ["John lives in Paris.", "The cat sat on the mat", "Paris is very good!"],
             "second": None}
CHOICES = {"first": ["The cat sat on the mat."] * 3 + ["Who lives in Paris?"] * 3,
           "second": ["A dog ran home!", "the cat is good", "not a mat", "John lives in Paris.",
                      "a dog", "cats"],
           "num_choices": 3}

# Our task models by transformers class, from a config and the number of outputs.
BUILDERS = {
    "BertForSequenceClassification": classifier.BertClassifier,
    "BertForTokenClassification": tagging.BertTagger,
    "BertForQuestionAnswering": lambda config, _: squad.SquadModel(config),
    "BertForMultipleChoice": lambda config, _: multiple_choice.BertMultipleChoice(config),
    "BertForPreTraining": lambda config, _: heads.BertPretrainingModel(config),
    "BertForMaskedLM": lambda config, _: heads.BertPretrainingModel(config),
}
POOLER = ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]

# Ours out: the transformers class, the labels saved beside the checkpoint (their file is the
# task's), read_google_model's options (the flags of the run), the texts, and what transformers'
# config must say of the labels.
CASES = {
    "classifier": dict(architecture="BertForSequenceClassification", texts=PAIRS,
                       labels=("negative", "neutral", "positive"), options={},
                       problem_type="single_label_classification"),
    "multi_label": dict(architecture="BertForSequenceClassification", texts=PAIRS,
                        labels=("art", "politics", "sports", "tech"),
                        options={"multi_label": True}, problem_type="multi_label_classification"),
    "regression": dict(architecture="BertForSequenceClassification", texts=PAIRS, labels=(),
                       options={"task_name": "STS-B"}, problem_type="regression"),
    "squad": dict(architecture="BertForQuestionAnswering", texts=PAIRS, labels=(), options={}),
    "ner": dict(architecture="BertForTokenClassification", texts=SENTENCES,
                labels=("O", "B-LOC", "B-PER", "I-LOC", "I-PER"), options={},
                do_lower_case=False),
    "multiple_choice": dict(architecture="BertForMultipleChoice", texts=CHOICES, labels=(),
                            options={}),
    "pretraining": dict(architecture="BertForPreTraining", texts=PAIRS, labels=(), options={}),
}
# Theirs in: the transformers class, its config's head fields, the texts, what our converter must
# make of them (labels, problem type) and the tokenizer's casing.
HF_CASES = {
    "hf_classifier": dict(architecture="BertForSequenceClassification", texts=PAIRS,
                          head={"id2label": {0: "no", 1: "yes"}},
                          labels=("no", "yes"), problem_type="single_label_classification"),
    "hf_multi_label": dict(architecture="BertForSequenceClassification", texts=PAIRS,
                           head={"id2label": {0: "x", 1: "y", 2: "z"},
                                 "problem_type": "multi_label_classification"},
                           labels=("x", "y", "z"), problem_type="multi_label_classification"),
    "hf_regression": dict(architecture="BertForSequenceClassification", texts=PAIRS,
                          head={"num_labels": 1}, labels=(), problem_type="regression"),
    "hf_ner": dict(architecture="BertForTokenClassification", texts=SENTENCES,
                   head={"id2label": {0: "O", 1: "B-PER", 2: "I-PER"}},
                   labels=("O", "B-PER", "I-PER"), do_lower_case=False),
    "hf_squad": dict(architecture="BertForQuestionAnswering", texts=PAIRS, head={}),
    "hf_multiple_choice": dict(architecture="BertForMultipleChoice", texts=CHOICES, head={}),
    "hf_masked_lm": dict(architecture="BertForMaskedLM", texts=PAIRS, head={}),
}
REFERENCE_SCRIPT = os.path.join(REPO_ROOT, "tests", "hf_heads_reference.py")


def _config() -> modeling.BertConfig:
  return modeling.BertConfig.from_dict(CONFIG)


def _save_as_our_script(model, architecture: str, labels, output_dir: str) -> str:
  """Saves a task model as its script leaves output_dir: model.ckpt-N and, beside it, the labels
  (tag_list.txt for tagging, else label_list.txt); returns the checkpoint prefix."""
  os.makedirs(output_dir)
  if architecture == "BertForTokenClassification":
    tagging.write_tag_list(labels, output_dir)
  elif labels:
    task_files.write_label_list(os.path.join(output_dir, classifier_data.LABEL_LIST_FILE), labels)
  return checkpoints.save_checkpoint(model, os.path.join(output_dir, "model.ckpt-3"))


def _our_outputs(model, architecture: str, inputs: dict) -> dict:
  """Our model's outputs under transformers' names, on transformers' padded inputs."""
  features = {"input_ids": inputs["input_ids"], "input_mask": inputs["attention_mask"],
              "segment_ids": inputs["token_type_ids"]}
  features = {name: tf.constant(value, tf.int32) for name, value in features.items()}
  if architecture == "BertForMultipleChoice":
    features[multiple_choice.CHOICE_MASK_KEY] = tf.ones(inputs["input_ids"].shape[:2], tf.int32)
  outputs = model(features)
  if architecture == "BertForQuestionAnswering":
    return {name: value.numpy() for name, value in outputs.items()}
  if architecture == "BertForPreTraining":
    return {"prediction_logits": outputs["masked_lm_logits"].numpy(),
            "seq_relationship_logits": outputs["next_sentence_logits"].numpy()}
  if architecture == "BertForMaskedLM":
    return {"logits": outputs["masked_lm_logits"].numpy()}
  return {"logits": outputs.numpy()}


def _our_ids(texts: dict, vocab_file: str, do_lower_case: bool) -> list:
  """[CLS] first [SEP] (second [SEP]) ids of each row, by our FullTokenizer."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  rows = []
  for index, first in enumerate(texts["first"]):
    tokens = ["[CLS]"] + tokenizer.tokenize(first) + ["[SEP]"]
    if texts["second"]:
      tokens += tokenizer.tokenize(texts["second"][index]) + ["[SEP]"]
    rows.append(tokenizer.convert_tokens_to_ids(tokens))
  return rows


def _check_ids(reference: dict, texts: dict, vocab_file: str, do_lower_case: bool) -> None:
  """transformers' tokenizer of the converted files gives our FullTokenizer's ids."""
  ids = reference["input_ids"].reshape(-1, reference["input_ids"].shape[-1])
  mask = reference["attention_mask"].reshape(ids.shape)
  assert [list(row[m > 0]) for row, m in zip(ids, mask)] == _our_ids(texts, vocab_file,
                                                                      do_lower_case)


def _labels_beside(architecture: str, directory: str) -> tuple:
  """The labels our scripts read from a converted output directory."""
  if architecture == "BertForTokenClassification":
    return tuple(tagging.read_tag_list(directory))
  path = os.path.join(directory, classifier_data.LABEL_LIST_FILE)
  return classifier_data.read_label_list(path) if os.path.exists(path) else ()


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> tuple:
  """(bert_config.json, vocab.txt) of the tiny model, as a released model's directory has them."""
  return write_model_files(str(tmp_path_factory.mktemp("release")), _config(), VOCAB)


@pytest.fixture(scope="module")
def references(tmp_path_factory, release):
  """A function of a case name returning (case directory, what hf_heads_reference.py wrote for
  it: arrays and loading report, our model of the case). One reference process (importing torch
  takes seconds) makes theirs while ours are saved and converted, then loads ours."""
  for package in ("torch", "transformers"):
    if importlib.util.find_spec(package) is None:  # Looks for it without importing it.
      pytest.fail("%s is not installed: pip install -r requirements-dev.txt" % package)
  log_path = str(tmp_path_factory.mktemp("reference_log") / "stderr.txt")
  with open(log_path, "w") as log:
    process = subprocess.Popen([sys.executable, REFERENCE_SCRIPT], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=log, text=True)
  case_dirs, models = {}, {}

  def start(name: str, case: dict, **make) -> None:
    spec = dict(case["texts"], architecture=case["architecture"], **make)
    with open(os.path.join(case_dirs[name], "case.json"), "w") as f:
      json.dump(spec, f)
    process.stdin.write(case_dirs[name] + "\n")
    process.stdin.flush()

  try:
    for name, case in HF_CASES.items():
      case_dir = case_dirs[name] = str(tmp_path_factory.mktemp(name))
      write_model_files(case_dir, _config(), VOCAB)
      start(name, case, make={"config": dict(CONFIG, **case["head"]),
                              "do_lower_case": case.get("do_lower_case", True)})
    config_file, vocab_file = release
    for name, case in CASES.items():
      case_dir = case_dirs[name] = str(tmp_path_factory.mktemp(name))
      models[name] = randomize(
          BUILDERS[case["architecture"]](_config(), len(case["labels"]) or 1), seed=0)
      prefix = _save_as_our_script(models[name], case["architecture"], case["labels"],
                                   os.path.join(case_dir, "output_dir"))
      model_conversion.convert_google_to_hf(
          prefix, os.path.join(case_dir, "hf"), config_file, vocab_file=vocab_file,
          do_lower_case=case.get("do_lower_case", True), **case["options"])
      start(name, case)
  finally:  # The reference ends when its input does.
    process.stdin.close()

  def reference(name: str) -> tuple:
    returncode = process.wait(timeout=300)
    with open(log_path) as log:
      assert returncode == 0, log.read()[-3000:]
    case_dir = case_dirs[name]
    with np.load(os.path.join(case_dir, "reference.npz")) as written:
      arrays = {key: written[key] for key in written.files}
    with open(os.path.join(case_dir, "reference.json")) as f:
      report = json.load(f)
    return case_dir, arrays, report, models.get(name)

  yield reference
  if process.poll() is None:
    process.kill()
    process.wait()


def _assert_outputs_close(ours: dict, reference: dict, atol: float) -> None:
  assert ours  # Every case compares at least one output.
  for name, value in ours.items():
    np.testing.assert_allclose(value, reference[name], atol=atol, rtol=0, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_our_head_loads_in_transformers_and_converts_back_exactly(name, references, release,
                                                                    tmp_path):
  case = CASES[name]
  architecture = case["architecture"]
  case_dir, reference, report, model = references(name)
  assert (report["missing"], report["unexpected"], report["mismatched"]) == ([], [], [])
  _check_ids(reference, case["texts"], release[1], case.get("do_lower_case", True))
  ours = _our_outputs(model, architecture, reference)
  _assert_outputs_close(ours, reference, atol=1e-5)
  assert report["problem_type"] == case.get("problem_type")
  if case["labels"]:
    assert report["id2label"] == {str(i): label for i, label in enumerate(case["labels"])}

  prefix = model_conversion.convert_hf_to_google(os.path.join(case_dir, "hf"), str(tmp_path))
  assert _labels_beside(architecture, str(tmp_path)) == case["labels"]
  again = BUILDERS[architecture](modeling.BertConfig.from_json_file(
      str(tmp_path / "bert_config.json")), len(case["labels"]) or 1)
  again.build()
  load = checkpoints.init_from_checkpoint(again, prefix)
  pooler_less = architecture in ("BertForTokenClassification", "BertForQuestionAnswering")
  assert (load.missing, load.unused) == (POOLER if pooler_less else [], [])
  for key, value in _our_outputs(again, architecture, reference).items():
    np.testing.assert_array_equal(value, ours[key], err_msg=key)


@pytest.mark.parametrize("name", sorted(HF_CASES))
def test_transformers_head_converts_to_ours(name, references, release, tmp_path):
  case = HF_CASES[name]
  architecture = case["architecture"]
  case_dir, reference, _, _ = references(name)
  model = conversion_hf.read_hf_model(os.path.join(case_dir, "hf"))
  prefix = conversion_google.write_google_model(model, str(tmp_path))
  assert model.problem_type == case.get("problem_type")
  assert model.do_lower_case == case.get("do_lower_case", True)
  assert _labels_beside(architecture, str(tmp_path)) == case.get("labels", ())
  with open(tmp_path / "vocab.txt") as f:  # From tokenizer.json: transformers 5 saves no vocab.txt.
    assert f.read().splitlines() == VOCAB
  _check_ids(reference, case["texts"], release[1], case.get("do_lower_case", True))
  ours = BUILDERS[architecture](modeling.BertConfig.from_json_file(
      str(tmp_path / "bert_config.json")), len(case.get("labels", ())) or 1)
  ours.build()
  load = checkpoints.init_from_checkpoint(ours, prefix)
  absent = {"BertForMaskedLM": POOLER + ["cls/seq_relationship/output_bias",
                                         "cls/seq_relationship/output_weights"],
            "BertForTokenClassification": POOLER, "BertForQuestionAnswering": POOLER}
  assert (load.missing, load.unused) == (absent.get(architecture, []), [])
  _assert_outputs_close(_our_outputs(ours, architecture, reference), reference, atol=1e-5)


# ------------------------------------------------------------------------------------ KerasHub


def _padded_ids(texts: dict, vocab_file: str, length: int) -> dict:
  """Our features of the texts (pairs) padded to `length`, under KerasHub's input names."""
  rows = _our_ids(texts, vocab_file, do_lower_case=True)
  ids = np.zeros((len(rows), length), np.int32)
  segments = np.zeros_like(ids)
  for index, row in enumerate(rows):
    ids[index, :len(row)] = row
    segments[index, row.index(VOCAB.index("[SEP]")) + 1:len(row)] = 1
  return {"token_ids": ids, "segment_ids": segments, "padding_mask": (ids > 0).astype(np.int32)}


def _our_features(inputs: dict) -> dict:
  return {"input_ids": inputs["token_ids"], "input_mask": inputs["padding_mask"],
          "segment_ids": inputs["segment_ids"]}


def test_our_classifier_as_keras_hub_preset_loads_in_keras_hub(tmp_path, release):
  # KerasHub's BertBackbone computes GELU with the tanh approximation: so does this model.
  config = modeling.BertConfig.from_dict(dict(CONFIG, hidden_act="gelu_approximate"))
  model = randomize(BUILDERS["BertForSequenceClassification"](config, 3), seed=0)
  prefix = _save_as_our_script(model, "BertForSequenceClassification", ("a", "b", "c"),
                               str(tmp_path / "output_dir"))
  config_file = str(tmp_path / "bert_config.json")
  with open(config_file, "w") as f:
    f.write(config.to_json_string())
  preset = str(tmp_path / "preset")
  model_conversion.convert_google_to_keras_hub(prefix, preset, config_file,
                                                 vocab_file=release[1])

  inputs = _padded_ids(PAIRS, release[1], config.max_position_embeddings)
  backbone = keras_hub.models.BertBackbone.from_preset(preset)
  theirs = backbone(inputs)
  ours = model.bert(_our_features(inputs))
  for name in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(theirs[name].numpy(), ours[name].numpy(), atol=1e-5, err_msg=name)

  task = keras_hub.models.BertTextClassifier.from_preset(preset)
  texts = (tf.constant(PAIRS["first"]), tf.constant(PAIRS["second"]))
  packed = task.preprocessor(x=texts)  # Its tokenizer and packing give our ids.
  for name, value in inputs.items():
    np.testing.assert_array_equal(np.asarray(packed[name], np.int32), value, err_msg=name)
  np.testing.assert_allclose(task(packed).numpy(), model(_our_features(inputs)).numpy(),
                             atol=1e-5)


def _keras_hub_backbone():
  return keras_hub.models.BertBackbone(
      vocabulary_size=len(VOCAB), num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24,
      max_sequence_length=32)


def _saved_keras_hub_preset(model, preset: str, rng) -> None:
  """`model` (a backbone or a task) with random weights (LayerNorm gammas near 1), saved by
  KerasHub's own save_to_preset with a BertTokenizer of VOCAB."""
  for weight in model.weights:
    value = 0.2 * rng.normal(size=tuple(weight.shape))
    weight.assign(value + 1.0 if weight.path.endswith("gamma") else value)
  model.save_to_preset(preset)
  keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(preset)


def _converted_and_inputs(model, prefix: str, rng) -> dict:
  """Loads the converted checkpoint into `model` (built from the converted bert_config.json),
  every variable and nothing else; returns two rows of KerasHub inputs, one of them padded."""
  model.build()
  load = checkpoints.init_from_checkpoint(model, prefix)
  assert (load.missing, load.unused) == ([], [])
  ids = rng.integers(5, len(VOCAB), size=(2, 9)).astype(np.int32)
  return {"token_ids": ids, "segment_ids": np.repeat([[0] * 5 + [1] * 4], 2, axis=0),
          "padding_mask": np.array([[1] * 9, [1] * 6 + [0] * 3], np.int32)}


def test_keras_hub_preset_converts_to_our_encoder(tmp_path, caplog):
  backbone = _keras_hub_backbone()
  rng = np.random.default_rng(0)
  preset = str(tmp_path / "preset")
  _saved_keras_hub_preset(backbone, preset, rng)

  with caplog.at_level("WARNING"):
    prefix = model_conversion.convert_keras_hub_to_google(preset, str(tmp_path / "google"))
  # KerasHub's BertTokenizer keeps accents unless told (strip_accents absent): said, not hidden.
  assert "strip_accents is false with lowercase true, which Google's tokenizer cannot" in (
      caplog.text)
  with open(tmp_path / "google" / "vocab.txt") as f:
    assert f.read().splitlines() == VOCAB
  ours = modeling.BertModel(modeling.BertConfig.from_json_file(
      str(tmp_path / "google" / "bert_config.json")))
  inputs = _converted_and_inputs(ours, prefix, rng)
  theirs = backbone(inputs)
  mine = ours(_our_features(inputs))
  for name in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(mine[name].numpy(), theirs[name].numpy(), atol=1e-5, err_msg=name)


def test_keras_hub_classifier_preset_converts_with_its_head(tmp_path, caplog):
  # Before, only the backbone of a BertTextClassifier preset was converted (the README said
  # heads included): a fine-tuned KerasHub classifier came out without its classifier.
  task = keras_hub.models.BertTextClassifier(_keras_hub_backbone(), num_classes=3,
                                             preprocessor=None, dropout=0.0)
  rng = np.random.default_rng(3)
  preset = str(tmp_path / "preset")
  _saved_keras_hub_preset(task, preset, rng)
  with caplog.at_level("WARNING"):
    prefix = model_conversion.convert_keras_hub_to_google(preset, str(tmp_path / "google"))
  assert any("KerasHub keeps no label names: the classifier's 3 outputs are named LABEL_0, "
             "LABEL_1, LABEL_2" in message for message in caplog.messages), caplog.messages
  assert classifier_data.read_label_list(
      str(tmp_path / "google" / classifier_data.LABEL_LIST_FILE)) == ("LABEL_0", "LABEL_1",
                                                                      "LABEL_2")
  ours = classifier.BertClassifier(modeling.BertConfig.from_json_file(
      str(tmp_path / "google" / "bert_config.json")), 3)
  inputs = _converted_and_inputs(ours, prefix, rng)
  np.testing.assert_allclose(ours(_our_features(inputs)).numpy(), task(inputs).numpy(),
                             atol=1e-5)


def test_keras_hub_preset_is_written_whole_or_not_at_all(tmp_path, release, monkeypatch):
  model = randomize(BUILDERS["BertForSequenceClassification"](_config(), 2), seed=0)
  prefix = _save_as_our_script(model, "BertForSequenceClassification", ("a", "b"),
                               str(tmp_path / "output_dir"))
  preset = tmp_path / "preset"
  written = []
  real_create = h5py.Group.create_dataset

  def create_then_fail(group, name, **kwargs):
    written.append(name)
    if len(written) > 3:
      raise _Interrupted()
    return real_create(group, name, **kwargs)

  monkeypatch.setattr(h5py.Group, "create_dataset", create_then_fail)
  with pytest.raises(_Interrupted):
    model_conversion.convert_google_to_keras_hub(prefix, str(preset), release[0],
                                                   vocab_file=release[1])
  assert not os.path.exists(preset)  # Not a single file of the preset,
  assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # nor its staging.
  monkeypatch.undo()
  model_conversion.convert_google_to_keras_hub(prefix, str(preset), release[0],
                                                 vocab_file=release[1])
  assert [name for name in os.listdir(preset) if name.startswith(".")] == [
      choices.CONVERTED_MARK_NAME]


class _Interrupted(Exception):
  """Stands for a kill in the middle of writing."""


# ---------------------------------------------------------------------------------- bad input


def _classifier_output_dir(tmp_path, num_outputs: int, labels=()) -> str:
  """A run_classifier output_dir with a head of `num_outputs` and `labels` in label_list.txt,
  and bert_config.json and vocab.txt beside the checkpoint; returns its prefix."""
  output_dir = str(tmp_path / "output_dir")
  model = classifier.BertClassifier(_config(), num_outputs)
  model.build()
  prefix = _save_as_our_script(model, "BertForSequenceClassification", labels, output_dir)
  write_model_files(output_dir, _config(), VOCAB)
  return prefix


def test_head_that_does_not_fit_its_labels_is_named(tmp_path):
  prefix = _classifier_output_dir(tmp_path, 3, ["a", "b"])
  label_file = str(tmp_path / "output_dir" / "label_list.txt")
  with pytest.raises(conversion.ConversionError,
                     match=r"^%s: its run_classifier.py head has 3 outputs, but %s gives 2 labels$"
                     % (prefix, label_file)):
    model_conversion.convert_google_to_hf(prefix, str(tmp_path / "hf"))
  with pytest.raises(conversion.ConversionError, match="gives one score"):
    model_conversion.convert_google_to_hf(prefix, str(tmp_path / "hf"), task_name="sts-b")
  assert not os.path.exists(tmp_path / "hf")

  # The other way: id2label names four labels, the classifier has three rows.
  (tmp_path / "output_dir" / "label_list.txt").write_text("a\nb\nc\n")
  model_conversion.convert_google_to_hf(prefix, str(tmp_path / "hf"))
  config_path = tmp_path / "hf" / "config.json"
  config = json.loads(config_path.read_text())
  config["id2label"]["3"] = "d"
  config_path.write_text(json.dumps(config))
  with pytest.raises(conversion.ConversionError,
                     match=r"its run_classifier.py head has 3 outputs, but the id2label of %s "
                     r"gives 4 labels" % config_path):
    model_conversion.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "back"))


def test_missing_or_ambiguous_label_list_is_named(tmp_path):
  prefix = _classifier_output_dir(tmp_path, 3)
  with pytest.raises(conversion.ConversionError,
                     match=r"^%s has a task head, output_weights, and neither label_list.txt "
                     r"\(run_classifier.py\) nor tag_list.txt \(run_ner.py\) beside it" % prefix):
    model_conversion.convert_google_to_hf(prefix, str(tmp_path / "hf"))
  tagging.write_tag_list(["O", "B-X", "I-X"], str(tmp_path / "output_dir"))
  task_files.write_label_list(str(tmp_path / "output_dir" / "label_list.txt"), ["a", "b", "c"])
  with pytest.raises(conversion.ConversionError, match="and both label_list.txt"):
    model_conversion.convert_google_to_hf(prefix, str(tmp_path / "hf"))


def test_preset_of_another_architecture_is_named(tmp_path):
  preset = tmp_path / "preset"
  preset.mkdir()
  config_path = preset / "config.json"
  for config, expected in (
      ({"class_name": "RobertaBackbone", "config": {}, "registered_name":
        "keras_hub>RobertaBackbone"}, r"^%s: holds a RobertaBackbone, not a BertBackbone$"),
      (dict(CONFIG, model_type="bert"),
       r"^%s is not a KerasHub preset's file: a Hugging Face config.json, convert it with "
       r"`hf_model_path`$")):
    config_path.write_text(json.dumps(config))
    with pytest.raises(conversion.ConversionError, match=expected % config_path):
      model_conversion.convert_keras_hub_to_google(str(preset), str(tmp_path / "out"))


def test_keras_weights_file_with_links_is_refused(tmp_path):
  path = str(tmp_path / "model.weights.h5")
  for link in (h5py.SoftLink("/layers/dense/vars/0"), h5py.ExternalLink("other.h5", "/data")):
    with h5py.File(path, "w") as f:
      f["layers/dense/vars/0"] = np.zeros(2, np.float32)
      f["layers/dense/vars/1"] = link
    with pytest.raises(conversion.ConversionError,
                       match=r"^%s: layers/dense/vars/1 is a link, not data of the file$" % path):
      conversion.read_keras_weights(path)
