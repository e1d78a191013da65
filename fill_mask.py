# coding=utf-8
"""Fill-mask serving: the masked-LM head of a pretraining model as a SavedModel for TF Serving.

`run_pretraining.py --export_dir=DIR` writes it from the model it trained or, without
`--do_train`, from the newest checkpoint of `--output_dir` or `--init_checkpoint` (e.g. Google's
`bert_model.ckpt`), with no training. The checkpoint must hold the masked-LM head
(`cls/predictions/...`): one without it (fine-tuned, or an encoder alone) is a `MissingHeadError`,
never an export with a random head.

The signatures (`FillMaskServing`; the one export shape of export.py):
- `serving_default(text: [B] string)`: sentences with "[MASK]" where tokens are to be predicted.
  Exactly "[MASK]" is the mask token, kept whole as Hugging Face's tokenizers keep it (FullTokenizer
  would split it into "[", "mask", "]"); the text around it is tokenized as FullTokenizer does
  (`in_graph_tokenization.BertInputEncoder` with `keep_mask_token`).
- `token_ids(input_ids, input_mask, segment_ids: [B, T] int32)`: the masks are the positions
  holding the vocab's [MASK] id (where input_mask is 1).
Both return, for the masks of each row in text order, padded to M, the most masks of a row:
  num_masks [B] int32: how many masks the row has (0 for a row without any);
  mask_positions [B, M] int32: their positions in the model's input ([CLS] is 0; -1 pads);
  token_ids [B, M, K] int32: the K most probable tokens at each mask, most probable first (-1 pads);
  tokens [B, M, K] string: those tokens as the vocab writes them ("" pads);
  probabilities [B, M, K] float32: their probabilities, a softmax over the whole vocab (0 pads).
K is fixed at export (`--fill_mask_top_k`, 5 as in Hugging Face's fill-mask pipeline). Each mask
is predicted with every other mask of its row still masked, as Hugging Face's pipeline does.

A row without "[MASK]" is no error (num_masks 0). A text with a "[MASK]" beyond the tokens the
model reads (the first max_seq_length - 2) fails the request with InvalidArgument naming the
input and the rows, as do the checks of every export (batch sizes, over 4 MiB of text, ids out of
range: export.py).
"""

from typing import Mapping, Optional

import keras
import tensorflow as tf

import checkpoints
import errors
import export
import in_graph_tokenization
import modeling
import pretraining
import tokenization

HEAD_SCOPE = "cls/predictions"
# Hugging Face's fill-mask pipeline returns this many tokens per mask by default.
DEFAULT_TOP_K = 5


class MissingHeadError(checkpoints.CheckpointError):
  """A checkpoint without the masked-LM head (`cls/predictions/...`) that fill-mask serves."""


def check_settings(config: modeling.BertConfig, tokenizer: tokenization.FullTokenizer,
                   top_k: int) -> None:
  """A FlagError unless the vocab has [MASK] and fits the model, and top_k <= its vocab_size."""
  tokenizer.special_token_id(tokenization.MASK_TOKEN)
  largest = max(tokenizer.inv_vocab)
  if largest >= config.vocab_size:
    raise errors.FlagError("`vocab_file` has token ids up to %d but the model's vocab_size is %d: "
                           "pass the vocab the model was trained with" %
                           (largest, config.vocab_size))
  if top_k > config.vocab_size:
    raise errors.FlagError("`fill_mask_top_k`=%d exceeds the model's vocab_size %d" %
                           (top_k, config.vocab_size))


def restore_model(strategy: tf.distribute.Strategy, config: modeling.BertConfig,
                  output_dir: Optional[str], init_checkpoint: Optional[str],
                  allow_partial_init_checkpoint: bool = False) -> keras.Model:
  """The pretraining model of the newest checkpoint of `output_dir`, else of `init_checkpoint`
  (`checkpoints.restore_model`), which must hold the masked-LM head (else MissingHeadError)."""
  if not init_checkpoint and not checkpoints.list_checkpoints(output_dir):
    raise errors.FlagError("`export_dir` without `do_train` needs `init_checkpoint` (e.g. Google's "
                           "bert_model.ckpt) or an `output_dir` holding checkpoints")
  model, _, prefix = checkpoints.restore_model(
      strategy, lambda: pretraining.build_model(config), output_dir, init_checkpoint,
      allow_partial_init_checkpoint, head_required=False)  # Only cls/predictions: below.
  stored = checkpoints.open_checkpoint(prefix).get_variable_to_shape_map()
  missing = sorted(name for name in checkpoints.checkpoint_variables(model)
                   if name.startswith(HEAD_SCOPE + "/") and name not in stored)
  if missing:
    raise MissingHeadError(
        "checkpoint %s has no masked-LM head (%s missing): fill-mask needs a pretraining "
        "checkpoint such as Google's bert_model.ckpt, not a fine-tuned or encoder-only one" %
        (prefix, ", ".join(missing)))
  return model


def _is_mask(features: Mapping[str, tf.Tensor], mask_id: int) -> tf.Tensor:
  """[B, T] bool: the positions holding the mask id (in the input_mask)."""
  return tf.logical_and(tf.equal(features["input_ids"], mask_id),
                        tf.not_equal(features["input_mask"], 0))


class FillMaskServing(export.EncodedTextServing):
  """The fill-mask export of a `heads.BertPretrainingModel` (see the module docstring)."""

  def __init__(self, model: keras.Model, tokenizer: tokenization.FullTokenizer,
               max_seq_length: int, top_k: int):
    encoder = in_graph_tokenization.BertInputEncoder.for_tokenizer(tokenizer, max_seq_length,
                                                                   keep_mask_token=True)
    super().__init__(encoder, model.config, self.top_k_at_masks, ["text"])
    self.model = model
    self.top_k = top_k
    self.vocab = [tokenizer.inv_vocab.get(i, "") for i in range(model.config.vocab_size)]

  def text_outputs(self, texts):
    """`top_k_at_masks` of the encoded texts, unless truncation cut off a [MASK] written in one
    (then the request fails naming its rows: a mask would silently go unanswered)."""
    text = texts["text"]
    features = self.encoder(text)
    written = tf.strings.split(text, sep=tokenization.MASK_TOKEN).row_lengths() - 1
    read = tf.reduce_sum(tf.cast(_is_mask(features, self.encoder.mask_id), tf.int64), axis=1)
    check = export.fail_unless(
        tf.reduce_all(tf.equal(written, read)),
        "text rows {} (from 0) have a [MASK] after the first %d tokens, which the model reads "
        "(max_seq_length = %d, with [CLS] and [SEP])" % (
            self.encoder.max_seq_length - 2, self.encoder.max_seq_length),
        tf.where(tf.not_equal(written, read))[:, 0])
    return self.outputs_fn(export.checked([check], features))

  def top_k_at_masks(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The outputs of both signatures (module docstring) for int32 id features [B, T]."""
    is_mask = _is_mask(features, self.encoder.mask_id)
    where = tf.where(is_mask)  # [masks, 2]: (row, position), in row-major order.
    positions = tf.RaggedTensor.from_value_rowids(
        tf.cast(where[:, 1], tf.int32), where[:, 0], nrows=tf.shape(is_mask, tf.int64)[0])
    padded = positions.to_tensor(-1)  # [B, M]
    sequence_output = self.model.bert(features, training=False)["sequence_output"]
    logits = self.model.cls.predictions(sequence_output, self.model.bert.get_embedding_table(),
                                        tf.maximum(padded, 0))
    probabilities, ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=self.top_k)
    real = tf.expand_dims(padded >= 0, -1)
    return {"num_masks": tf.cast(positions.row_lengths(), tf.int32), "mask_positions": padded,
            "token_ids": tf.where(real, ids, -1),
            "tokens": tf.where(real, tf.gather(tf.constant(self.vocab), ids), ""),
            "probabilities": tf.where(real, probabilities, 0.0)}

  def warmup_text(self, num_words: int) -> str:
    """The warmup text with every fourth word, the first included, a [MASK]."""
    words = export.warmup_text(num_words).split()
    return " ".join(tokenization.MASK_TOKEN if i % 4 == 0 else word
                    for i, word in enumerate(words))


def export_fill_mask(export_dir: str, model: keras.Model, tokenizer: tokenization.FullTokenizer,
                     max_seq_length: int, top_k: int = DEFAULT_TOP_K,
                     precision: str = "float32",
                     limits: export.RequestLimits = export.RequestLimits()) -> str:
  """Writes the fill-mask SavedModel of a pretraining model as the next version under
  `export_dir`, computing in `precision` (`export.model_in_precision`), serving requests within
  `limits`; returns its path."""
  config = model.config
  check_settings(config, tokenizer, top_k)
  model = export.model_in_precision(model, lambda: pretraining.build_model(config), precision)
  return export.write_saved_model(export_dir,
                                  FillMaskServing(model, tokenizer, max_seq_length, top_k),
                                  limits=limits)
