"""The reference side of test_fill_mask.py: Hugging Face's fill-mask pipeline, in its own process.

    python tests/hf_reference_fill_mask.py WORK_DIR

PyTorch and TensorFlow each bring their own OpenMP and oneDNN, so the two never share a process
(as hf_reference_training.py). What a Hugging Face user writes: `BertForMaskedLM.from_pretrained`
on the model our convert_checkpoint.py wrote, `BertTokenizer(vocab_file, do_lower_case=True)`, and
`pipeline("fill-mask", top_k=...)` on each sentence.

Reads `WORK_DIR/hf_model/` (config.json, model.safetensors) and `WORK_DIR/request.json`:
{"vocab_file", "top_k", "sentences": [each with at least one [MASK]]}.
Writes `WORK_DIR/reference.json`: per sentence {"input_ids": the tokenizer's ids,
"mask_positions": the masks' positions in them, "token_ids", "tokens", "probabilities": [masks][k]
of the pipeline's answers}.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import transformers  # pylint: disable=g-import-not-at-top


def fill_mask(work_dir: str) -> list:
  """The pipeline's answers for every sentence of request.json, in order."""
  with open(os.path.join(work_dir, "request.json"), encoding="utf-8") as reader:
    request = json.load(reader)
  tokenizer = transformers.BertTokenizer(request["vocab_file"], do_lower_case=True)
  model = transformers.BertForMaskedLM.from_pretrained(os.path.join(work_dir, "hf_model"))
  pipeline = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer,
                                   top_k=request["top_k"])
  answers = []
  for sentence in request["sentences"]:
    input_ids = tokenizer(sentence)["input_ids"]
    per_mask = pipeline(sentence)
    if isinstance(per_mask[0], dict):  # One mask: the pipeline drops the outer list.
      per_mask = [per_mask]
    answers.append({
        "input_ids": input_ids,
        "mask_positions": [i for i, token in enumerate(input_ids)
                           if token == tokenizer.mask_token_id],
        "token_ids": [[answer["token"] for answer in mask] for mask in per_mask],
        "tokens": [tokenizer.convert_ids_to_tokens([answer["token"] for answer in mask])
                   for mask in per_mask],
        "probabilities": [[answer["score"] for answer in mask] for mask in per_mask]})
  return answers


if __name__ == "__main__":
  with open(os.path.join(sys.argv[1], "reference.json"), "w", encoding="utf-8") as writer:
    json.dump(fill_mask(sys.argv[1]), writer)
