"""The reference side of test_reference_training.py: a few training steps of a Hugging Face PyTorch
task model (`BertForSequenceClassification`, `BertForQuestionAnswering`, `BertForMultipleChoice`,
`BertForTokenClassification`), run as a script in its own process.

    python tests/hf_reference_training.py WORK_DIR [WORK_DIR ...]

PyTorch and TensorFlow each bring their own OpenMP and oneDNN, so the two never share a process:
the test writes what this script needs into each WORK_DIR (one per case, trained one after the
other: PyTorch is imported once) and reads back what it writes there.

Reads:
  - `hf_model/config.json` and `hf_model/model.safetensors`: the encoder, as our
    convert_checkpoint.py wrote it from the model's initial weights;
  - `head.npz`: the head under the class's names: `classifier.weight` [outputs, hidden] and
    `classifier.bias` [outputs], or `qa_outputs.weight` [2, hidden] and `qa_outputs.bias` [2];
  - `batches.npz`: the model's arguments, one batch per step on the first axis: `input_ids`,
    `attention_mask`, `token_type_ids` ([steps, batch, seq]; multiple choice [steps, batch,
    choices, seq]) and `labels` ([steps, batch], the tagger's [steps, batch, seq] with -100 where
    untagged) or `start_positions` and `end_positions` [steps, batch];
  - `settings.json`: `architecture` (the class), `optimizer` (`adamw` or `bert_adam`),
    `learning_rate`, `num_train_steps`, `num_warmup_steps`, `weight_decay`, `beta_1`, `beta_2`,
    `epsilon`, `clip_norm`.

Writes `reference.npz`: for each step k (1-based) `loss/k` (the batch's loss before the update),
`grad_norm/k` (the global gradient norm before clipping), and, by Hugging Face parameter name,
`param/k/NAME`, `m/k/NAME` and `v/k/NAME` (the weights and the optimizer's first and second
moments after the update); plus `grad/1/NAME`, the clipped gradients of the first step.

The training step is what a PyTorch user writes: the model's own loss (mean cross-entropy; for
spans, of start and end averaged), dropout off, `clip_grad_norm_`, then the optimizer and
`get_linear_schedule_with_warmup`. The decay/no-decay split is Hugging Face's usual one: biases and
LayerNorm weights are not decayed. `adamw` is `torch.optim.AdamW`; `bert_adam` is Google's
AdamWeightDecayOptimizer (no bias correction), which PyTorch does not have, written out in
`OriginalBertAdam` below.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # pylint: disable=g-import-not-at-top
import safetensors.torch  # pylint: disable=g-import-not-at-top
import torch  # pylint: disable=g-import-not-at-top
import transformers  # pylint: disable=g-import-not-at-top


class OriginalBertAdam(torch.optim.Optimizer):
  """Google BERT's AdamWeightDecayOptimizer as a PyTorch optimizer, from its published rule:

      m = beta_1 * m + (1 - beta_1) * g
      v = beta_2 * v + (1 - beta_2) * g**2
      update = m / (sqrt(v) + epsilon) + weight_decay * p     (no bias correction)
      p -= lr * update

  The state keeps PyTorch's names (`exp_avg`, `exp_avg_sq`) so both optimizers report alike.
  """

  def __init__(self, params, lr, betas, eps, weight_decay=0.0):
    super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

  @torch.no_grad()
  def step(self, closure=None):
    del closure
    for group in self.param_groups:
      beta_1, beta_2 = group["betas"]
      for p in group["params"]:
        if p.grad is None:
          continue
        state = self.state[p]
        if not state:
          state["exp_avg"] = torch.zeros_like(p)
          state["exp_avg_sq"] = torch.zeros_like(p)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(beta_1).add_(p.grad, alpha=1.0 - beta_1)
        v.mul_(beta_2).addcmul_(p.grad, p.grad, value=1.0 - beta_2)
        update = m / (v.sqrt() + group["eps"]) + group["weight_decay"] * p
        p.sub_(group["lr"] * update)


def load_model(work_dir: str, architecture: str) -> torch.nn.Module:
  """The model of class `architecture` with the converted encoder and the hand-mapped head; every
  weight is set."""
  model_dir = os.path.join(work_dir, "hf_model")
  config = transformers.BertConfig.from_pretrained(model_dir)
  with np.load(os.path.join(work_dir, "head.npz")) as head:
    head_state = {name: torch.from_numpy(head[name]) for name in head.files}
  config.num_labels = int(next(value for name, value in head_state.items()
                               if name.endswith(".bias")).shape[0])
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
  config.classifier_dropout = 0.0
  # Hugging Face's word embeddings never train the [PAD] row (`padding_idx`); the original's (and
  # ours) do wherever padding reaches the loss, as it does through SQuAD's softmax over every
  # position. Without `padding_idx` the reference trains it too, so the rest is compared.
  config.pad_token_id = None
  model = getattr(transformers, architecture)(config)
  state = safetensors.torch.load_file(os.path.join(model_dir, "model.safetensors"))
  state.update(head_state)
  if model.bert.pooler is None:
    # The encoder was converted with its pooler; BertForQuestionAnswering and
    # BertForTokenClassification have none.
    state = {name: value for name, value in state.items() if not name.startswith("bert.pooler.")}
  # strict: a weight missing from the conversion (or left over) is an error, not a random init.
  model.load_state_dict(state, strict=True)
  return model


def make_optimizer(model: torch.nn.Module, settings: dict) -> torch.optim.Optimizer:
  """The optimizer `settings` names, with weight decay on all but biases and LayerNorm weights."""
  decayed, not_decayed = [], []
  for name, parameter in model.named_parameters():
    (not_decayed if name.endswith(".bias") or "LayerNorm" in name else decayed).append(parameter)
  groups = [{"params": decayed, "weight_decay": settings["weight_decay"]},
            {"params": not_decayed, "weight_decay": 0.0}]
  kwargs = dict(lr=settings["learning_rate"], betas=(settings["beta_1"], settings["beta_2"]),
                eps=settings["epsilon"])
  if settings["optimizer"] == "adamw":
    return torch.optim.AdamW(groups, **kwargs)
  if settings["optimizer"] == "bert_adam":
    return OriginalBertAdam(groups, **kwargs)
  raise ValueError("unknown optimizer %r" % settings["optimizer"])


def train(work_dir: str) -> None:
  """Trains as WORK_DIR/settings.json says; writes WORK_DIR/reference.npz."""
  with open(os.path.join(work_dir, "settings.json"), encoding="utf-8") as f:
    settings = json.load(f)
  model = load_model(work_dir, settings["architecture"])
  model.train()
  optimizer = make_optimizer(model, settings)
  schedule = transformers.get_linear_schedule_with_warmup(
      optimizer, settings["num_warmup_steps"], settings["num_train_steps"])
  names = {parameter: name for name, parameter in model.named_parameters()}
  batches = np.load(os.path.join(work_dir, "batches.npz"))
  results = {}
  for step in range(1, batches["input_ids"].shape[0] + 1):
    inputs = {key: torch.from_numpy(batches[key][step - 1].astype(np.int64))
              for key in batches.files}
    optimizer.zero_grad()
    loss = model(**inputs).loss
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings["clip_norm"])
    results["loss/%d" % step] = loss.detach().numpy()
    results["grad_norm/%d" % step] = norm.detach().numpy()
    if step == 1:
      results.update({"grad/1/" + name: p.grad.numpy().copy()
                      for name, p in model.named_parameters()})
    optimizer.step()
    schedule.step()
    for parameter, name in names.items():
      state = optimizer.state[parameter]
      results["param/%d/%s" % (step, name)] = parameter.detach().numpy().copy()
      results["m/%d/%s" % (step, name)] = state["exp_avg"].numpy().copy()
      results["v/%d/%s" % (step, name)] = state["exp_avg_sq"].numpy().copy()
  np.savez(os.path.join(work_dir, "reference.npz"), **results)


if __name__ == "__main__":
  torch.set_num_threads(1)
  torch.manual_seed(0)
  for directory in sys.argv[1:]:
    train(directory)
