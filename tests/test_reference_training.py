"""Our training step against an independent reference: Hugging Face's PyTorch BERT.

A tiny task model with random weights (every weight random, LayerNorm and biases included, so that
a weight decay applied where it should not be shows) trains for three steps with the real
`training_loop.train` and the task's own model and loss: the loop, the loss and its normalization,
the gradient clipping, the optimizer and the learning rate schedule are all ours. The same initial
weights, converted to Hugging Face safetensors with our `model_conversion.convert_google_to_hf`
(the head mapped by `ARCHITECTURES`' names: ours is `output_weights` [N, hidden], theirs
`classifier.weight` or `qa_outputs.weight` of the same layout), train in the matching transformers
class on the same three batches (padding included) with `clip_grad_norm_`, the optimizer and
Hugging Face's linear schedule, in a subprocess (`hf_reference_training.py`): PyTorch and
TensorFlow never share a process.

The heads (`CASES`): run_classifier's against `BertForSequenceClassification`, with `adamw`
against `torch.optim.AdamW`, `bert_adam` (the original's AdamWeightDecayOptimizer, no bias
correction) against its rule written out in PyTorch, and `adamw` with `--lr_schedule=linear` and a
warmup step against Hugging Face's schedule with that warmup; then, with that last recipe,
run_squad's (`squad_loss`: start and end cross-entropy over every position, padding included)
against `BertForQuestionAnswering`, which has no pooler (ours, which the loss does not reach, must
not move), the multiple-choice head against `BertForMultipleChoice` (each batch's rows grouped into
examples of two endings), and run_ner's tagger against `BertForTokenClassification` (tags on first
sub-tokens only). One reference process trains every case while our side trains (a module fixture
starts it).

Dropout is off on both sides (a pooled-output head's 0.1, hard-coded as in the original, is set to
0 in the model we train). After every step the loss before the update, the weights after it and
the optimizer's two moments must agree; the first step's first moment is `(1 - beta_1)` times the
clipped gradient, so that checks the gradients our loop applied. The first batch's gradient norm
is above the clipping norm, so clipping is exercised. The reference's word embeddings have no
`padding_idx`, so the [PAD] row trains on both sides, as the original's does.

One exception: the gradients that are zero in exact arithmetic (`_has_zero_gradient`: a softmax
ignores what those variables add), where both sides apply Adam to rounding noise; for them the test
checks that the gradients are that small on both sides, and compares nothing else.

torch and transformers are in requirements-dev.txt: without them the test fails, saying so.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.util import event_pb2

from conftest import REPO_ROOT
import checkpoints
import classifier
import classifier_data
import conversion
import model_conversion
import modeling
import multiple_choice
import squad
import squad_data
import tagging
import training_loop

pytestmark = [pytest.mark.slow, pytest.mark.reference]

CONFIG = dict(vocab_size=30, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=37, hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, max_position_embeddings=16, type_vocab_size=2,
              initializer_range=0.02)
SEQ_LENGTH = 16
BATCH_SIZE = 4
NUM_STEPS = 3
NUM_LABELS = 3  # MNLI's processor: contradiction, entailment, neutral.
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 0.01  # create_optimizer's default, the original's.
# AdamWeightDecay's defaults (optimization.py), as the original's.
BETA_1, BETA_2, EPSILON, CLIP_NORM = 0.9, 0.999, 1e-6, 1.0
# The transformers classes compared (`conversion.ARCHITECTURES` names our model of each).
CLASSIFIER = "BertForSequenceClassification"
SQUAD = "BertForQuestionAnswering"
MULTIPLE_CHOICE = "BertForMultipleChoice"
TAGGER = "BertForTokenClassification"
NUM_CHOICES = 2  # Multiple choice: each batch's four rows are two examples of two endings.
# The runs compared, by name: the class, our `--optimizer`, `--lr_schedule` and warmup steps. The
# reference runs the optimizer of that name and Hugging Face's `get_linear_schedule_with_warmup`.
CASES = {
    "adamw": dict(architecture=CLASSIFIER, optimizer="adamw", lr_schedule="original",
                  num_warmup_steps=0),
    "bert_adam": dict(architecture=CLASSIFIER, optimizer="bert_adam", lr_schedule="original",
                      num_warmup_steps=0),
    # Hugging Face's schedule with warmup: rates 0, 1, 1/2 of the peak (the original's 0, 2/3, 1/3).
    "adamw_linear_warmup": dict(architecture=CLASSIFIER, optimizer="adamw", lr_schedule="linear",
                                num_warmup_steps=1),
    # A Hugging Face SQuAD recipe on run_squad's head and loss.
    "squad_adamw_linear_warmup": dict(architecture=SQUAD, optimizer="adamw", lr_schedule="linear",
                                      num_warmup_steps=1),
    # And on the multiple-choice head and loss (a softmax over each example's endings).
    "multiple_choice_adamw_linear_warmup": dict(architecture=MULTIPLE_CHOICE, optimizer="adamw",
                                                lr_schedule="linear", num_warmup_steps=1),
    # And on run_ner's tagger (a mean over the batch's labeled first sub-tokens).
    "tagger_adamw_linear_warmup": dict(architecture=TAGGER, optimizer="adamw",
                                       lr_schedule="linear", num_warmup_steps=1),
}
REFERENCE_SCRIPT = os.path.join(REPO_ROOT, "tests", "hf_reference_training.py")

# How far float32 may take the two apart, as relative differences (`_relative_differences`: norm
# of the difference over the reference's norm, per tensor). Measured with both optimizers: the loss
# up to 3e-6, the gradient 1.4e-6, the first moment 9e-6, the second moment 2e-5 (our fused kernel
# scales by 1 - float32(0.999) = 0.00099998713, PyTorch by 0.001), a step's update of the weights
# 4.5e-5 (an element whose gradient is near epsilon amplifies rounding). Against mistakes: decaying
# biases and LayerNorm moved an update by 2.4e-3 (adamw) and 7.8e-4 (bert_adam), no decay at all by
# 2e-3, no clipping by 8.5e-4, a constant learning rate by 0.33.
LOSS_RTOL = 2e-5
MOMENT_RTOL = 1e-4
UPDATE_RTOL = 4e-4


def _random_weights(model) -> None:
  """Sets every variable of `model` to seeded random values: matrices and embeddings N(0, 0.2^2),
  biases and LayerNorm betas N(0, 0.3^2), LayerNorm gammas 1 + N(0, 0.1^2), the head N(0, 1)
  (logits of order one, so the first gradients are above the clipping norm)."""
  rng = np.random.default_rng(0)
  for name, variable in sorted(checkpoints.checkpoint_variables(model).items()):
    shape = tuple(variable.shape)
    if name.endswith("/gamma"):
      value = 1.0 + 0.1 * rng.normal(size=shape)
    elif name.endswith(("/beta", "/bias", "output_bias")):
      value = 0.3 * rng.normal(size=shape)
    elif name.endswith("output_weights"):
      value = rng.normal(size=shape)
    else:
      value = 0.2 * rng.normal(size=shape)
    variable.assign(value.astype(np.float32))


def _batches(architecture: str) -> dict:
  """Three batches of four rows: [CLS]-like id 2 first, a second segment in the longer rows,
  padding (id 0, mask 0, segment 0) after each row's length; labels of every class, for SQuAD
  answer spans inside each row (a start at the row's last token, an empty answer at 0), for
  multiple choice rows grouped into examples of NUM_CHOICES endings with the right one's index,
  for the tagger a tag at each first sub-token (every third token continues a word; [CLS], the
  last token and padding are not tagged: `tagging.IGNORE_LABEL`)."""
  rng = np.random.default_rng(1)
  shape = (NUM_STEPS, BATCH_SIZE, SEQ_LENGTH)
  input_ids, input_mask, segment_ids = (np.zeros(shape, np.int32) for _ in range(3))
  lengths = [[16, 11, 7, 4], [9, 16, 3, 13], [5, 12, 16, 8]]
  for step in range(NUM_STEPS):
    for row, length in enumerate(lengths[step]):
      input_ids[step, row, :length] = rng.integers(3, CONFIG["vocab_size"], size=length)
      input_ids[step, row, 0] = 2
      input_mask[step, row, :length] = 1
      if length > 6:
        segment_ids[step, row, length // 2:length] = 1
  batches = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
  if architecture == SQUAD:
    lengths = np.array(lengths)
    starts = (rng.random(lengths.shape) * lengths).astype(np.int32)
    ends = np.minimum(starts + rng.integers(0, 3, size=lengths.shape), lengths - 1)
    starts[0, 0] = ends[0, 0] = lengths[0, 0] - 1  # The row's last token.
    starts[0, 1] = ends[0, 1] = 0  # No answer in the window: [CLS].
    batches.update(start_positions=starts, end_positions=ends.astype(np.int32))
    return batches
  if architecture == TAGGER:
    tags = rng.integers(0, NUM_LABELS, size=shape).astype(np.int32)
    positions = np.arange(SEQ_LENGTH)
    for step in range(NUM_STEPS):
      for row, length in enumerate(lengths[step]):
        tagged = (positions > 0) & (positions < length - 1) & (positions % 3 != 2)
        tags[step, row, ~tagged] = tagging.IGNORE_LABEL
    batches["label_ids"] = tags
    return batches
  if architecture == MULTIPLE_CHOICE:
    batches = {name: value.reshape((NUM_STEPS, -1, NUM_CHOICES, SEQ_LENGTH))
               for name, value in batches.items()}
    batches["label_ids"] = np.array([[0, 1], [1, 1], [1, 0]], np.int32)
    return batches
  labels = rng.integers(0, NUM_LABELS, size=(NUM_STEPS, BATCH_SIZE)).astype(np.int32)
  labels[0, :NUM_LABELS] = np.arange(NUM_LABELS)
  batches["label_ids"] = labels
  return batches


# Our feature names -> the Hugging Face model's argument names.
HF_INPUT_NAMES = {"input_ids": "input_ids", "input_mask": "attention_mask",
                  "segment_ids": "token_type_ids", "label_ids": "labels",
                  "start_positions": "start_positions", "end_positions": "end_positions"}


def _write_reference_inputs(work_dir, model, batches, case: dict) -> None:
  """What hf_reference_training.py reads: the encoder converted by convert_checkpoint.py, the head
  by hand, the batches under Hugging Face's argument names, the class and optimizer settings."""
  architecture = conversion.ARCHITECTURES[case["architecture"]]
  config = modeling.BertConfig.from_dict(CONFIG)
  tensors = {name: variable.numpy()
             for name, variable in checkpoints.checkpoint_variables(model).items()}
  encoder_dir = os.path.join(work_dir, "google_encoder")
  os.makedirs(encoder_dir)
  with open(os.path.join(encoder_dir, conversion.GOOGLE_CONFIG_NAME), "w") as f:
    f.write(config.to_json_string())
  prefix = checkpoints.write_checkpoint(
      {name: value for name, value in tensors.items() if name.startswith("bert/")},
      os.path.join(encoder_dir, conversion.GOOGLE_CHECKPOINT_NAME))
  model_conversion.convert_google_to_hf(prefix, os.path.join(work_dir, "hf_model"))
  np.savez(os.path.join(work_dir, "head.npz"), **{
      hf_name: tensors[google_name] for google_name, hf_name in architecture.head_names().items()})
  hf_batches = {HF_INPUT_NAMES[name]: value for name, value in batches.items()}
  if architecture.name == TAGGER:  # Hugging Face's losses ignore -100.
    hf_batches["labels"] = np.where(batches["label_ids"] == tagging.IGNORE_LABEL, -100,
                                    batches["label_ids"])
  np.savez(os.path.join(work_dir, "batches.npz"), **hf_batches)
  with open(os.path.join(work_dir, "settings.json"), "w") as f:
    json.dump(dict(architecture=architecture.name, optimizer=case["optimizer"],
                   learning_rate=LEARNING_RATE,
                   num_train_steps=NUM_STEPS, num_warmup_steps=case["num_warmup_steps"],
                   weight_decay=WEIGHT_DECAY, beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON,
                   clip_norm=CLIP_NORM), f)


def _initial_model(architecture: str):
  """Our model of the Hugging Face class `architecture`, with `_random_weights`."""
  model = conversion.ARCHITECTURES[architecture].build_model(
      modeling.BertConfig.from_dict(CONFIG), NUM_LABELS)
  model.build()
  _random_weights(model)
  return model


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory):
  """A function of a CASES name returning what hf_reference_training.py wrote for it.

  One process trains the reference for every case (importing torch and transformers takes
  seconds), started here so that it runs while the tests train our model."""
  for package in ("torch", "transformers"):
    if importlib.util.find_spec(package) is None:  # Looks for it without importing it.
      pytest.fail("%s is not installed: pip install -r requirements-dev.txt" % package)
  work_dirs = {name: str(tmp_path_factory.mktemp("reference_" + name)) for name in CASES}
  for name, work_dir in work_dirs.items():
    architecture = CASES[name]["architecture"]
    _write_reference_inputs(work_dir, _initial_model(architecture), _batches(architecture),
                            CASES[name])
  log_path = str(tmp_path_factory.mktemp("reference_log") / "stderr.txt")
  with open(log_path, "w") as log:
    process = subprocess.Popen([sys.executable, REFERENCE_SCRIPT] + list(work_dirs.values()),
                               stdout=subprocess.DEVNULL, stderr=log)

  def results(name: str) -> dict:
    returncode = process.wait(timeout=300)
    with open(log_path) as log:
      assert returncode == 0, log.read()[-3000:]
    with np.load(os.path.join(work_dirs[name], "reference.npz")) as written:
      return {name: written[name] for name in written.files}

  yield results
  if process.poll() is None:
    process.kill()
    process.wait()


def _train_ours(work_dir, batches, case: dict) -> str:
  """Three steps of training_loop.train from the initial checkpoint, a checkpoint after each, with
  the task's own model and loss; returns the output directory."""
  output_dir = os.path.join(work_dir, "ours")
  config = modeling.BertConfig.from_dict(CONFIG)
  if case["architecture"] == SQUAD:
    task = squad.SquadTask(config, None, squad_data.SquadOptions(max_seq_length=SEQ_LENGTH),
                           output_dir)
  elif case["architecture"] == MULTIPLE_CHOICE:
    task = multiple_choice.MultipleChoiceTask(config, None, None, output_dir, SEQ_LENGTH)
  elif case["architecture"] == TAGGER:
    task = tagging.TaggingTask(config, None, None, output_dir, SEQ_LENGTH,
                               tag_list=["B-X", "I-X", "O"])
  else:
    processor = classifier_data.get_processor("mnli")
    assert len(processor.get_labels()) == NUM_LABELS
    task = classifier.ClassifierTask(config, processor, None, None, output_dir, SEQ_LENGTH)

  def model_fn():
    model = task.build_model()
    if model.dropout is not None:  # The head's own (a pooled-output head's is always 0.1).
      model.dropout.rate = 0.0
    return model

  examples = {name: value.reshape((-1,) + value.shape[2:]) for name, value in batches.items()}
  batch_size = batches["input_ids"].shape[1]
  examples[training_loop.REAL_EXAMPLE_KEY] = np.ones(NUM_STEPS * batch_size, np.int32)
  if case["architecture"] == MULTIPLE_CHOICE:
    examples[multiple_choice.CHOICE_MASK_KEY] = np.ones((NUM_STEPS * batch_size, NUM_CHOICES),
                                                        np.int32)

  def dataset_fn(batch_size, seed):
    del seed  # The batches in their order, as the reference gets them.
    return tf.data.Dataset.from_tensor_slices(examples).batch(batch_size, drop_remainder=True)

  config = training_loop.TrainConfig(
      output_dir=output_dir, num_train_steps=NUM_STEPS, num_warmup_steps=case["num_warmup_steps"],
      learning_rate=LEARNING_RATE, optimizer=case["optimizer"], lr_schedule=case["lr_schedule"],
      train_batch_size=batch_size,
      save_checkpoints_steps=1, iterations_per_loop=1, keep_checkpoint_max=NUM_STEPS,
      init_checkpoint=os.path.join(work_dir, "init", "model.ckpt"))
  result = training_loop.train(tf.distribute.get_strategy(), model_fn, task.loss, dataset_fn,
                               config)
  assert result.global_step == NUM_STEPS
  return output_dir


def _losses(output_dir) -> dict:
  """step -> the `loss` summary the loop wrote (with one step per loop, that step's loss)."""
  losses = {}
  for event_file in tf.io.gfile.glob(os.path.join(output_dir, "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(event_file):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.tag == "loss":
          losses[event.step] = float(tf.make_ndarray(value.tensor))
  return losses


def _reference_by_google_name(reference: dict, kind: str, step: int, architecture: str) -> dict:
  """The reference's `kind/step/NAME` tensors under our checkpoint names, in our layout."""
  prefix = "%s/%d/" % (kind, step)
  hf_tensors = {name[len(prefix):]: value for name, value in reference.items()
                if name.startswith(prefix)}
  tensors, _ = conversion.hf_to_google_tensors(
      hf_tensors, conversion.ARCHITECTURES[architecture])
  return tensors


def _relative_differences(ours: dict, theirs: dict) -> dict:
  """name -> ||ours - theirs|| / ||theirs|| (Frobenius norms), for the same names."""
  assert sorted(ours) == sorted(theirs)
  return {name: float(np.linalg.norm(ours[name] - theirs[name]) /
                      max(np.linalg.norm(theirs[name]), 1e-30)) for name in theirs}


def _has_zero_gradient(name: str, architecture: str) -> bool:
  """Whether the loss ignores the variable in exact arithmetic: it adds one constant to every
  score a softmax normalizes. The attention key biases do (the same vector added to every key);
  under SQuAD's span head so do the head's bias and the last layer's LayerNorm beta (the same
  vector added to every position's output: one constant to all start or end logits), under the
  multiple-choice head its bias (the same to every ending's score)."""
  if name.endswith("/attention/self/key/bias"):
    return True
  if architecture == MULTIPLE_CHOICE:
    return name == multiple_choice.HEAD_SCOPE + "/output_bias"
  last_layer = "bert/encoder/layer_%d/output/LayerNorm/beta" % (CONFIG["num_hidden_layers"] - 1)
  return architecture == SQUAD and name in (last_layer, squad.HEAD_SCOPE + "/output_bias")


@pytest.mark.parametrize("case", CASES)
def test_training_steps_equal_hugging_face_pytorch(tmp_path, reference_runs, case):
  architecture = CASES[case]["architecture"]
  omits = conversion.ARCHITECTURES[architecture].omits_name
  model = _initial_model(architecture)
  initial = {name: variable.numpy()
             for name, variable in checkpoints.checkpoint_variables(model).items()}
  checkpoints.save_checkpoint(model, str(tmp_path / "init" / "model.ckpt"))
  output_dir = _train_ours(str(tmp_path), _batches(architecture), CASES[case])
  reference = reference_runs(case)
  assert float(reference["grad_norm/1"]) > 2 * CLIP_NORM  # Clipping is exercised.
  losses = _losses(output_dir)
  assert sorted(losses) == list(range(1, NUM_STEPS + 1))
  worst = {}

  def check(kind, step, ours, theirs, rtol):
    for name, difference in _relative_differences(ours, theirs).items():
      if _has_zero_gradient(name, architecture):
        continue
      worst[kind] = max(worst.get(kind, 0.0), difference)
      assert difference <= rtol, "%s of %s at step %d: relative difference %.3g" % (
          kind, name, step, difference)

  ours_before, theirs_before = initial, initial
  for step in range(1, NUM_STEPS + 1):
    expected = float(reference["loss/%d" % step])
    worst["loss"] = max(worst.get("loss", 0.0), abs(losses[step] - expected) / expected)
    assert losses[step] == pytest.approx(expected, rel=LOSS_RTOL), "loss at step %d" % step
    reader = tf.train.load_checkpoint(checkpoints.checkpoint_prefix(output_dir, step))
    theirs = {kind: _reference_by_google_name(reference, kind, step, architecture)
              for kind in ("param", "m", "v")}
    ours = {kind: {name: reader.get_tensor(name + suffix) for name in theirs["param"]}
            for kind, suffix in (("param", ""), ("m", "/adam_m"), ("v", "/adam_v"))}
    # Every weight of the model is compared; those the reference's class lacks (SQuAD's pooler,
    # which the loss does not reach) keep their initial values: no update, no weight decay.
    assert sorted(ours["param"]) == sorted(name for name in initial if not omits(name))
    for name in filter(omits, initial):
      np.testing.assert_array_equal(reader.get_tensor(name), initial[name], err_msg=name)
    check("update", step,
          {name: value - ours_before[name] for name, value in ours["param"].items()},
          {name: value - theirs_before[name] for name, value in theirs["param"].items()},
          UPDATE_RTOL)
    check("m", step, ours["m"], theirs["m"], MOMENT_RTOL)
    check("v", step, ours["v"], theirs["v"], MOMENT_RTOL)
    if step == 1:  # The first moment is (1 - beta_1) times the clipped gradient.
      gradients = _reference_by_google_name(reference, "grad", 1, architecture)
      ours_gradients = {name: value / (1.0 - BETA_1) for name, value in ours["m"].items()}
      check("gradient", step, ours_gradients, gradients, MOMENT_RTOL)
      largest_gradient = max(np.max(np.abs(value)) for value in gradients.values())
      for name in (name for name in gradients if _has_zero_gradient(name, architecture)):
        # Zero but for rounding, on both sides; Adam turns that rounding into updates of up to 1%
        # of the learning rate that need not agree (the update divides it by itself plus
        # epsilon). Only check that it is rounding.
        for side in (gradients, ours_gradients):
          assert np.max(np.abs(side[name])) < 1e-5 * largest_gradient, name
    ours_before, theirs_before = ours["param"], theirs["param"]
  # Shown with -s: the margins left.
  print("%s: largest relative differences: %s" % (case, ", ".join(
      "%s %.2g" % item for item in sorted(worst.items()))))
