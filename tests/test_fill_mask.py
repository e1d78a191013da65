"""Fill-mask serving (fill_mask.py, `run_pretraining.py --export_dir`) against Hugging Face.

A tiny `BertPretrainingModel` with random weights (biases and LayerNorm too, and large enough that
its predictions are peaked) is written as a Google checkpoint. `run_pretraining.py
--do_train=false --init_checkpoint=... --export_dir=...` exports it in a subprocess, the path of a
user holding only a released checkpoint. Meanwhile convert_checkpoint.py converts the checkpoint to
safetensors and hf_reference_fill_mask.py runs transformers' fill-mask pipeline on it
(`BertForMaskedLM`, `BertTokenizer` of the same vocab) in its own process. TF's C++ loader
(tests/cpp_serving_client.py, as TF Serving) then answers text and token-ids requests: the tokens
and probabilities at every mask must be the pipeline's.
"""
import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import REPO_ROOT
from conftest import shared_path
import checkpoints
import conversion
import export
import model_conversion
import modeling
import pretraining
from test_serving import assert_same, ids_inputs, run_cpp_client, texts_input, warmup_requests

pytestmark = pytest.mark.slow

MAX_SEQ_LENGTH = 24
TOP_K = 4
# Masks alone, several, adjacent, next to punctuation, accents, case and CJK.
SENTENCES = ["Paris is the [MASK] of France.", "The [MASK] sat on the [MASK], purring.",
             "Héllo, WORLD! The [MASK] café's naïve owner.", "[MASK]",
             "東京 is [MASK][MASK] big; isn't it?"]
# No mask: "[mask]" is text, as in Hugging Face's tokenizer.
NO_MASK = "Nothing to fill here, [mask] in lower case is text."
TEXTS = SENTENCES[:2] + [NO_MASK] + SENTENCES[2:]
SCRIPT = os.path.join(REPO_ROOT, "run_pretraining.py")
REFERENCE_SCRIPT = os.path.join(REPO_ROOT, "tests", "hf_reference_fill_mask.py")


def random_model(vocab_size: int) -> keras.Model:
  """A pretraining model whose every variable is random: matrices N(0, 1) (peaked predictions),
  biases and LayerNorm betas N(0, 0.3^2), gammas 1 + N(0, 0.1^2); the word embeddings' rows of
  one norm, so that no token wins at every mask whatever its context."""
  config = modeling.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=MAX_SEQ_LENGTH, type_vocab_size=2)
  model = pretraining.build_model(config)
  rng = np.random.default_rng(0)
  for name, variable in checkpoints.checkpoint_variables(model).items():
    shape = tuple(variable.shape)
    if name.endswith("/gamma"):
      value = 1.0 + 0.1 * rng.normal(size=shape)
    elif name.endswith(("/beta", "bias")):
      value = 0.3 * rng.normal(size=shape)
    else:
      value = rng.normal(size=shape)
    if name.endswith("word_embeddings"):
      value *= np.sqrt(shape[1]) / np.linalg.norm(value, axis=1, keepdims=True)
    variable.assign(value.astype(np.float32))
  return model


def write_google_model(directory: str, model: keras.Model, with_head: bool = True) -> str:
  """`bert_model.ckpt` and `bert_config.json` as a released model; returns the checkpoint prefix.
  Without `with_head` only the encoder (`bert/...`), as a fine-tuned or converted encoder."""
  os.makedirs(directory)
  with open(os.path.join(directory, conversion.GOOGLE_CONFIG_NAME), "w") as writer:
    writer.write(model.config.to_json_string())
  tensors = {name: variable.numpy()
             for name, variable in checkpoints.checkpoint_variables(model).items()
             if with_head or name.startswith("bert/")}
  return checkpoints.write_checkpoint(
      tensors, os.path.join(directory, conversion.GOOGLE_CHECKPOINT_NAME))


def export_command(prefix: str, vocab_file: str, export_dir: str) -> list:
  """The no-training command line of a user holding a released model."""
  directory = os.path.dirname(prefix)
  return [sys.executable, SCRIPT, "--do_train=false", "--init_checkpoint=" + prefix,
          "--bert_config_file=" + os.path.join(directory, conversion.GOOGLE_CONFIG_NAME),
          "--vocab_file=" + vocab_file, "--export_dir=" + export_dir,
          "--max_seq_length=%d" % MAX_SEQ_LENGTH, "--fill_mask_top_k=%d" % TOP_K]


def hugging_face_ids(reference: list) -> dict:
  """The token_ids inputs of the pipeline's own ids of SENTENCES, padded."""
  length = max(len(answer["input_ids"]) for answer in reference)
  rows = [answer["input_ids"] + [0] * (length - len(answer["input_ids"])) for answer in reference]
  input_ids = np.array(rows, np.int32)
  return ids_inputs({"input_ids": input_ids, "input_mask": (input_ids > 0).astype(np.int32),
                     "segment_ids": np.zeros_like(input_ids)})


def malformed_requests() -> list:
  """(what the error must say, request) of requests a client bug makes."""
  too_far = "word " * MAX_SEQ_LENGTH + "[MASK]"
  ids = np.array([[101, 103, 102], [101, 103, 102]], np.int32)
  return [
      ("text rows [1 2] (from 0) have a [MASK] after the first %d tokens" % (MAX_SEQ_LENGTH - 2),
       {"signature": "serving_default", "inputs": {"text": texts_input(
           ["a [MASK]", too_far, "[MASK] " + too_far])}}),
      ("the texts of this request have %d bytes in all" % (export.MAX_REQUEST_TEXT_BYTES + 1),
       {"signature": "serving_default", "inputs": {"text": texts_input(
           ["[MASK] " + "x" * (export.MAX_REQUEST_TEXT_BYTES - 6)])}}),
      ("segment_ids has shape [1 3] but input_ids has [2 3]",
       {"signature": "token_ids", "inputs": ids_inputs(
           {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": ids[:1] * 0})})]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """Exports with the CLI while Hugging Face answers, then asks TF's C++ loader."""
  for package in ("torch", "transformers"):
    if importlib.util.find_spec(package) is None:
      pytest.fail("%s is not installed: pip install -r requirements-dev.txt" % package)
  root = tmp_path_factory.mktemp("fill_mask")
  vocab_file = shared_path("fixtures", "uncased_vocab", "vocab.txt")
  with open(vocab_file, encoding="utf-8") as reader:
    model = random_model(sum(1 for _ in reader))
  prefix = write_google_model(str(root / "google"), model)
  encoder_only = write_google_model(str(root / "encoder_only"), model, with_head=False)
  commands = {"export": export_command(prefix, vocab_file, str(root / "export")),
              "encoder_only": export_command(encoder_only, vocab_file,
                                             str(root / "encoder_only_export"))}
  processes = {name: subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
               for name, command in commands.items()}
  work_dir = str(root / "reference")
  model_conversion.convert_google_to_hf(prefix, os.path.join(work_dir, "hf_model"))
  with open(os.path.join(work_dir, "request.json"), "w", encoding="utf-8") as writer:
    json.dump({"vocab_file": vocab_file, "top_k": TOP_K, "sentences": SENTENCES}, writer)
  processes["reference"] = subprocess.Popen([sys.executable, REFERENCE_SCRIPT, work_dir],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                            text=True)
  stderr = {name: process.communicate(timeout=300)[1] for name, process in processes.items()}
  for name in ("export", "reference"):
    assert processes[name].returncode == 0, stderr[name][-3000:]
  with open(os.path.join(work_dir, "reference.json"), encoding="utf-8") as reader:
    reference = json.load(reader)
  path = os.path.join(root, "export", "1")
  malformed = malformed_requests()
  warmup = warmup_requests(path)
  requests = ([{"signature": "serving_default", "inputs": {"text": texts_input(TEXTS)}},
               {"signature": "token_ids", "inputs": hugging_face_ids(reference)}] +
              warmup + [request for _, request in malformed])
  (job,) = run_cpp_client(str(root), [{"saved_model": path, "requests": requests}])["jobs"]
  answers = job["results"]
  return {"root": root, "encoder_only": (encoder_only, processes["encoder_only"].returncode,
                                         stderr["encoder_only"]), "reference": reference,
          "signatures": job["signatures"], "non_core_ops": job["non_core_ops"],
          "text": answers[0], "token_ids": answers[1],
          "warmup": list(zip(warmup, answers[2:2 + len(warmup)])),
          "malformed": [(message, answer) for (message, _), answer in
                        zip(malformed, answers[2 + len(warmup):])]}


def assert_like_hugging_face(outputs: dict, rows: list, reference: list, what: str) -> None:
  """Rows `rows` of the outputs hold the pipeline's answers; every other row is a row without
  masks; padding is -1, "" and 0."""
  num_masks = max(len(answer["mask_positions"]) for answer in reference)
  assert np.array(outputs["token_ids"]).shape == (len(outputs["num_masks"]), num_masks, TOP_K)
  expected_counts = [0] * len(outputs["num_masks"])
  for row, answer in zip(rows, reference):
    masks = len(answer["mask_positions"])
    expected_counts[row] = masks
    assert outputs["mask_positions"][row][:masks] == answer["mask_positions"], what
    assert outputs["token_ids"][row][:masks] == answer["token_ids"], (what, row)
    assert outputs["tokens"][row][:masks] == answer["tokens"], (what, row)
    assert_same(outputs["probabilities"][row][:masks], answer["probabilities"], what)
  assert outputs["num_masks"] == expected_counts, what
  for row, count in enumerate(expected_counts):
    assert outputs["mask_positions"][row][count:] == [-1] * (num_masks - count), what
    assert outputs["token_ids"][row][count:] == [[-1] * TOP_K] * (num_masks - count), what
    assert outputs["tokens"][row][count:] == [[""] * TOP_K] * (num_masks - count), what
    assert outputs["probabilities"][row][count:] == [[0.0] * TOP_K] * (num_masks - count), what


def test_cpp_loader_answers_like_hugging_face_fill_mask(served):
  reference = served["reference"]
  # Not a vacuous comparison: peaked predictions that differ from mask to mask.
  top = [mask[0] for answer in reference for mask in answer["probabilities"]]
  assert min(top) > 0.05
  assert len({mask[0] for answer in reference for mask in answer["token_ids"]}) >= 4
  assert set(served["signatures"]) >= {"serving_default", "token_ids"}
  assert served["non_core_ops"] == ["FastWordpieceTokenizeWithOffsets"]  # README's table.
  for signature in ("text", "token_ids"):
    assert "error" not in served[signature], served[signature]["error"]
  assert_like_hugging_face(served["text"], [TEXTS.index(s) for s in SENTENCES], reference,
                           "serving_default")
  assert_like_hugging_face(served["token_ids"], list(range(len(SENTENCES))), reference,
                           "token_ids on Hugging Face's ids")


def test_warmup_requests_hold_masks_and_run_through_the_cpp_loader(served):
  warmup = served["warmup"]
  assert {request["signature"] for request, _ in warmup} == {"serving_default", "token_ids"}
  for request, outputs in warmup:
    assert "error" not in outputs, outputs["error"]
    assert all(count > 0 for count in outputs["num_masks"]), request


def test_bad_requests_fail_with_a_message_naming_the_input(served):
  for message, answer in served["malformed"]:
    assert "error" in answer, (message, answer)
    assert answer["error"].startswith("InvalidArgumentError: ") and message in answer["error"]


def test_checkpoint_without_the_masked_lm_head_is_a_one_line_error(served):
  """A fine-tuned or encoder-only checkpoint would otherwise serve a random head."""
  prefix, returncode, stderr = served["encoder_only"]
  assert returncode == 1
  assert stderr.strip().splitlines()[-1] == (
      "run_pretraining.py: error: checkpoint %s has no masked-LM head (%s missing): fill-mask "
      "needs a pretraining checkpoint such as Google's bert_model.ckpt, not a fine-tuned or "
      "encoder-only one" % (prefix, ", ".join(
          "cls/predictions/" + name for name in ("output_bias", "transform/LayerNorm/beta",
                                                 "transform/LayerNorm/gamma",
                                                 "transform/dense/bias",
                                                 "transform/dense/kernel"))))
  assert not os.path.exists(served["root"] / "encoder_only_export")
