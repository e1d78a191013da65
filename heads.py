# coding=utf-8
"""The heads on BERT: the fine-tuning tasks' linear layer and pretraining's two heads.

`BertTaskModel` is every fine-tuning task's model (classifier, SQuAD, tagging, multiple choice):
BERT, dropout and one linear layer with the original's `output_weights` and `output_bias`.
`BertPretrainingModel` is run_pretraining's: BERT with the masked-LM head (`cls/predictions`,
its output embedding tied to the word embeddings) and the next-sentence head
(`cls/seq_relationship`), under the original's variable names.
"""

import contextlib
import copy

import keras
import tensorflow as tf

import modeling
import packing


class BertTaskModel(keras.Model):
  """BERT plus one linear output layer: the model of every fine-tuning task.

  `logits = dropout(bert output) @ output_weights^T + output_bias`, float32, where the BERT output
  is `pooled_output` ([B, H] -> logits [B, N]: classification, multiple choice) or
  `sequence_output` ([B, T, H] -> [B, T, N]: tagging, SQuAD spans). The two variables keep the
  original's names and layout: `output_weights` [N, H] (transposed relative to a Keras Dense
  kernel) and `output_bias` [N], at the top of the checkpoint (the original run_classifier's
  `output_weights`) or under `head_scope` (run_squad's `cls/squad/output_weights`).

  Call with a feature dict (`input_ids`, `input_mask`, `segment_ids`); subclasses turn the logits
  into the task's outputs.
  """

  def __init__(self, config: modeling.BertConfig, num_outputs: int, bert_output: str,
               dropout_rate: float, head_scope: str = "", name: str = "bert_task", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.num_outputs = num_outputs
    self.bert_output = bert_output
    self.head_scope = head_scope
    self.bert = modeling.BertModel(config, name="bert")
    self.dropout = keras.layers.Dropout(dropout_rate) if dropout_rate else None
    # Keras names a variable after the layer that creates it: the model itself for top-level
    # names, else a plain layer named after the scope's last part.
    self.scoped_head = (keras.layers.Layer(name=head_scope.rsplit("/", 1)[-1]) if head_scope
                        else None)

  def build(self, input_shape=None):
    """Creates every variable (their shapes do not depend on the input)."""
    self.bert.build()
    with contextlib.ExitStack() as scopes:
      for part in self.head_scope.split("/")[:-1]:
        scopes.enter_context(keras.name_scope(part))
      owner = self.scoped_head or self
      # The original's heads start from stddev 0.02 whatever the config's initializer_range.
      self.output_weights = owner.add_weight(
          name="output_weights", shape=(self.num_outputs, self.config.hidden_size),
          initializer=keras.initializers.TruncatedNormal(stddev=0.02))
      self.output_bias = owner.add_weight(name="output_bias", shape=(self.num_outputs,),
                                          initializer="zeros")
    self.built = True

  def logits(self, features, training=False) -> tf.Tensor:
    """float32 logits [B, N] or [B, T, N]. On packed rows (`packing`) B counts sequences: one
    row of logits per sequence's [CLS], or its tokens laid out as a padded row of the packed
    width (zero past its end)."""
    hidden = self.bert(features, training=training)[self.bert_output]
    if self.dropout is not None:
      hidden = self.dropout(hidden, training=training)
    weights = tf.cast(self.output_weights, hidden.dtype)  # bfloat16/float16 under mixed precision
    if hidden.shape.rank == 2:
      logits = tf.matmul(hidden, weights, transpose_b=True)
    else:
      logits = tf.einsum("bth,nh->btn", hidden, weights)
    logits = tf.cast(logits + tf.cast(self.output_bias, hidden.dtype), tf.float32)
    if hidden.shape.rank == 3 and packing.is_packed(features):
      logits = packing.unpack_tokens(logits, features[packing.SEQUENCE_STARTS],
                                     features[packing.SEQUENCE_IDS])
    return logits

  def call(self, features, training=False):
    return self.logits(features, training=training)


class MaskedLMHead(keras.layers.Layer):
  """The original's `cls/predictions`: transform (dense + activation + LayerNorm), then logits
  against the tied word embedding table plus `output_bias`, only at the masked positions."""

  def __init__(self, config: modeling.BertConfig, **kwargs):
    # No autocasting: the bias is added to float32 logits at full precision.
    super().__init__(autocast=False, **kwargs)
    self.config = config
    self.transform = modeling.ScopedDense(config.hidden_size,
                                          config.hidden_act,
                                          config.initializer_range,
                                          layer_norm=True,
                                          name="transform")

  def build(self, input_shape=None):
    self.transform.build((None, None, self.config.hidden_size))
    self.output_bias = self.add_weight(name="output_bias", shape=(self.config.vocab_size,),
                                       initializer="zeros")

  def call(self, sequence_output, embedding_table, masked_lm_positions=None):
    """Returns float32 logits [B, P, vocab] (P = positions per example; all T if None)."""
    hidden = sequence_output
    if masked_lm_positions is not None:
      hidden = tf.gather(sequence_output, tf.cast(masked_lm_positions, tf.int32), batch_dims=1)
    hidden = self.transform(tf.cast(hidden, self.compute_dtype))
    logits = tf.matmul(hidden, tf.cast(embedding_table, hidden.dtype), transpose_b=True)
    return tf.cast(logits, tf.float32) + tf.cast(self.output_bias, tf.float32)


class NextSentenceHead(keras.layers.Layer):
  """The original's `cls/seq_relationship`: `output_weights` [2, H] and `output_bias` [2]."""

  def __init__(self, config: modeling.BertConfig, **kwargs):
    # No autocasting: the bias is added to float32 logits at full precision.
    super().__init__(autocast=False, **kwargs)
    self.config = config

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        name="output_weights", shape=(2, self.config.hidden_size),
        initializer=modeling.create_initializer(self.config.initializer_range))
    self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

  def call(self, pooled_output):
    """Returns float32 logits [B, 2] (0 = is next, 1 = random, as the original's labels)."""
    pooled_output = tf.cast(pooled_output, self.compute_dtype)
    logits = tf.matmul(pooled_output, tf.cast(self.output_weights, self.compute_dtype),
                       transpose_b=True)
    return tf.cast(logits, tf.float32) + tf.cast(self.output_bias, tf.float32)


class PretrainingHeads(keras.layers.Layer):
  """The original's `cls` scope: `predictions` (masked LM), `seq_relationship` (next sentence)."""

  def __init__(self, config: modeling.BertConfig, **kwargs):
    super().__init__(**kwargs)
    self.predictions = MaskedLMHead(config, name="predictions")
    self.seq_relationship = NextSentenceHead(config, name="seq_relationship")

  def build(self, input_shape=None):
    self.predictions.build()
    self.seq_relationship.build()


class BertPretrainingModel(keras.Model):
  """BERT with the masked-LM and next-sentence heads; variables `bert/...` and `cls/...`.

  Call as `model(input_ids, input_mask=None, token_type_ids=None, masked_lm_positions=None,
  training=False)` or with one dict of the pretraining TFRecord features (`input_ids`,
  `input_mask`, `segment_ids`, `masked_lm_positions`). Returns the `BertModel` outputs plus
    masked_lm_logits float32 [B, P, vocab] at `masked_lm_positions` [B, P] (all T if None),
    next_sentence_logits float32 [B, 2].
  """

  def __init__(self, config: modeling.BertConfig, name: str = "bert_pretraining", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = copy.deepcopy(config)
    self.bert = modeling.BertModel(self.config, name="bert")
    self.cls = PretrainingHeads(self.config, name="cls")

  def build(self, input_shape=None):
    """Creates every variable; their shapes do not depend on the input shape."""
    self.bert.build()
    self.cls.build()

  def call(self, input_ids, input_mask=None, token_type_ids=None, masked_lm_positions=None,
           training=False):
    input_ids, input_mask, token_type_ids, positions = modeling.unpack_features(
        input_ids, input_mask, token_type_ids, extra_keys=("masked_lm_positions",))
    if masked_lm_positions is None:
      masked_lm_positions = positions
    outputs = dict(self.bert(input_ids, input_mask=input_mask, token_type_ids=token_type_ids,
                             training=training))
    outputs["masked_lm_logits"] = self.cls.predictions(
        outputs["sequence_output"], self.bert.get_embedding_table(), masked_lm_positions)
    outputs["next_sentence_logits"] = self.cls.seq_relationship(outputs["pooled_output"])
    return outputs

  def get_config(self):
    return {"config": self.config.to_dict(), "name": self.name}

  @classmethod
  def from_config(cls, config):
    return cls(modeling.BertConfig.from_dict(config["config"]),
               name=config.get("name", "bert_pretraining"))
