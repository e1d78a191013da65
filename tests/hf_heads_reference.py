"""The consumer side of test_convert_heads.py: transformers' own classes load the models, run in a
process of their own (PyTorch and TensorFlow never share one; see hf_reference_training.py).

    python tests/hf_heads_reference.py < case directories, one a line

reads each CASE_DIR as soon as its line arrives, so that importing torch and transformers (seconds)
overlaps the writing of later cases. Each holds `case.json`:
  - `architecture`: the transformers class of the model in CASE_DIR/hf (`BertForMaskedLM`, ...);
  - `first`, `second` (or null): the texts, a pair per row; with `num_choices` (multiple choice),
    that many consecutive rows make one example;
  - `make` (optional): first make a model of that class with seeded random weights, from
    `config` (transformers' BertConfig fields), and save it, with a BertTokenizer of
    CASE_DIR/vocab.txt and `do_lower_case`, to CASE_DIR/hf as transformers saves them.

Writes CASE_DIR/reference.npz: what `AutoTokenizer.from_pretrained(CASE_DIR/hf)` gives the texts
(`input_ids`, `attention_mask`, `token_type_ids`, padded to the longest row) and what the class's
`AutoModelFor...from_pretrained` returns for them (`logits`, `start_logits`, `end_logits`,
`prediction_logits`, `seq_relationship_logits`); and CASE_DIR/reference.json: the weights loading
reported missing, unexpected or mismatched, and the loaded config's `problem_type` and `id2label`.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # pylint: disable=g-import-not-at-top
import torch  # pylint: disable=g-import-not-at-top
import transformers  # pylint: disable=g-import-not-at-top

# The Auto class that loads each architecture, and the outputs it returns.
AUTO_CLASSES = {
    "BertForSequenceClassification": ("AutoModelForSequenceClassification", ("logits",)),
    "BertForTokenClassification": ("AutoModelForTokenClassification", ("logits",)),
    "BertForQuestionAnswering": ("AutoModelForQuestionAnswering", ("start_logits", "end_logits")),
    "BertForMultipleChoice": ("AutoModelForMultipleChoice", ("logits",)),
    "BertForMaskedLM": ("AutoModelForMaskedLM", ("logits",)),
    "BertForPreTraining": ("AutoModelForPreTraining",
                           ("prediction_logits", "seq_relationship_logits")),
}


def make_model(case_dir: str, case: dict) -> None:
  """A model of the case's class with weights of order one (N(0, 0.2^2), LayerNorm scales about
  1), saved with its tokenizer as transformers saves them."""
  torch.manual_seed(0)
  config = transformers.BertConfig(**case["make"]["config"])
  model = getattr(transformers, case["architecture"])(config)
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      parameter.copy_(0.2 * torch.randn_like(parameter) + (1.0 if "LayerNorm.weight" in name
                                                           else 0.0))
  hf_dir = os.path.join(case_dir, "hf")
  model.save_pretrained(hf_dir)
  with open(os.path.join(case_dir, "vocab.txt"), encoding="utf-8") as f:
    vocab = {token: index for index, token in enumerate(f.read().splitlines())}
  tokenizer = transformers.BertTokenizer(vocab=vocab, do_lower_case=case["make"]["do_lower_case"])
  tokenizer.save_pretrained(hf_dir)


def run_case(case_dir: str) -> None:
  with open(os.path.join(case_dir, "case.json"), encoding="utf-8") as f:
    case = json.load(f)
  if "make" in case:
    make_model(case_dir, case)
  hf_dir = os.path.join(case_dir, "hf")
  auto_class, output_names = AUTO_CLASSES[case["architecture"]]
  tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
  model, loading = getattr(transformers, auto_class).from_pretrained(hf_dir,
                                                                     output_loading_info=True)
  model.eval()
  encoded = tokenizer(case["first"], case["second"], padding=True, return_tensors="pt")
  inputs = dict(encoded)
  if case.get("num_choices"):
    inputs = {name: value.reshape(-1, case["num_choices"], value.shape[-1])
              for name, value in inputs.items()}
  with torch.no_grad():
    outputs = model(**inputs)
  results = {name: value.numpy() for name, value in inputs.items()}
  results.update({name: getattr(outputs, name).numpy() for name in output_names})
  np.savez(os.path.join(case_dir, "reference.npz"), **results)
  with open(os.path.join(case_dir, "reference.json"), "w", encoding="utf-8") as f:
    json.dump({"missing": sorted(loading["missing_keys"]),
               "unexpected": sorted(loading["unexpected_keys"]),
               "mismatched": sorted(str(key) for key in loading["mismatched_keys"]),
               "problem_type": model.config.problem_type,
               "id2label": {str(i): label for i, label in model.config.id2label.items()}}, f)


if __name__ == "__main__":
  for line in sys.stdin:
    run_case(line.rstrip("\n"))
