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

Tiny models (hidden 16, two layers, a vocab of 33 tokens) keep it fast.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT, write_model_files
import checkpoints
import classifier
import convert_checkpoint
import modeling
import multiple_choice
import squad
import tagging
import tokenization

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
    "BertForPreTraining": lambda config, _: modeling.BertPretrainingModel(config),
    "BertForMaskedLM": lambda config, _: modeling.BertPretrainingModel(config),
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


def _random_model(architecture: str, config: modeling.BertConfig, num_outputs: int):
  """Our model of that class, every variable seeded random of order one (gammas about 1)."""
  model = BUILDERS[architecture](config, num_outputs)
  model.build()
  rng = np.random.default_rng(0)
  for name, variable in sorted(checkpoints.checkpoint_variables(model).items()):
    value = 0.2 * rng.normal(size=tuple(variable.shape))
    variable.assign((value + 1.0 if name.endswith("/gamma") else value).astype(np.float32))
  return model


def _save_as_our_script(model, architecture: str, labels, output_dir: str) -> str:
  """Saves a task model as its script leaves output_dir: model.ckpt-N and, beside it, the labels
  (tag_list.txt for tagging, else label_list.txt); returns the checkpoint prefix."""
  os.makedirs(output_dir)
  if architecture == "BertForTokenClassification":
    tagging.write_tag_list(labels, output_dir)
  elif labels:
    classifier.write_label_list(os.path.join(output_dir, classifier.LABEL_LIST_FILE), labels)
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
  path = os.path.join(directory, classifier.LABEL_LIST_FILE)
  return classifier.read_label_list(path) if os.path.exists(path) else ()


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
      models[name] = _random_model(case["architecture"], _config(), len(case["labels"]) or 1)
      prefix = _save_as_our_script(models[name], case["architecture"], case["labels"],
                                   os.path.join(case_dir, "output_dir"))
      convert_checkpoint.convert_google_to_hf(
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

  prefix = convert_checkpoint.convert_hf_to_google(os.path.join(case_dir, "hf"), str(tmp_path))
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
  model = convert_checkpoint.read_hf_model(os.path.join(case_dir, "hf"))
  prefix = convert_checkpoint.write_google_model(model, str(tmp_path))
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
  with pytest.raises(convert_checkpoint.ConversionError,
                     match=r"^%s: its run_classifier.py head has 3 outputs, but %s gives 2 labels$"
                     % (prefix, label_file)):
    convert_checkpoint.convert_google_to_hf(prefix, str(tmp_path / "hf"))
  with pytest.raises(convert_checkpoint.ConversionError, match="gives one score"):
    convert_checkpoint.convert_google_to_hf(prefix, str(tmp_path / "hf"), task_name="sts-b")
  assert not os.path.exists(tmp_path / "hf")

  # The other way: id2label names four labels, the classifier has three rows.
  (tmp_path / "output_dir" / "label_list.txt").write_text("a\nb\nc\n")
  convert_checkpoint.convert_google_to_hf(prefix, str(tmp_path / "hf"))
  config_path = tmp_path / "hf" / "config.json"
  config = json.loads(config_path.read_text())
  config["id2label"]["3"] = "d"
  config_path.write_text(json.dumps(config))
  with pytest.raises(convert_checkpoint.ConversionError,
                     match=r"its run_classifier.py head has 3 outputs, but the id2label of %s "
                     r"gives 4 labels" % config_path):
    convert_checkpoint.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "back"))


def test_missing_or_ambiguous_label_list_is_named(tmp_path):
  prefix = _classifier_output_dir(tmp_path, 3)
  with pytest.raises(convert_checkpoint.ConversionError,
                     match=r"^%s has a task head, output_weights, and neither label_list.txt "
                     r"\(run_classifier.py\) nor tag_list.txt \(run_ner.py\) beside it" % prefix):
    convert_checkpoint.convert_google_to_hf(prefix, str(tmp_path / "hf"))
  tagging.write_tag_list(["O", "B-X", "I-X"], str(tmp_path / "output_dir"))
  classifier.write_label_list(str(tmp_path / "output_dir" / "label_list.txt"), ["a", "b", "c"])
  with pytest.raises(convert_checkpoint.ConversionError, match="and both label_list.txt"):
    convert_checkpoint.convert_google_to_hf(prefix, str(tmp_path / "hf"))
