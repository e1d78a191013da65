# coding=utf-8
"""The BERT model of Google's original TF1 code, on TensorFlow 2 and Keras 3.

The architecture is exactly the original's (post-LayerNorm Transformer encoder, learned position
embeddings, additive attention mask, tanh pooler on the first token; heads.py adds the masked-LM
and next-sentence heads and the tasks' output layer). Layers are named after the original's TF1
variable scopes, so every Keras variable path *is* its Google checkpoint name
(`bert/encoder/layer_3/attention/self/query/kernel`, ...): checkpoints written by Google's code
load by name and checkpoints written here are read by Google's tools. See DESIGN.md, "Checkpoint
names".

Also provided, with the original's names for users porting code: `gelu`, `get_activation`,
`get_shape_list`, `create_attention_mask_from_input_mask`, `attention_layer` and
`create_initializer`.
"""

import copy
import difflib
import json
import math
import os
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

import atomic_files
import checkpoints
import errors
import file_patterns
import packing

# The project's interface (../shared/checks/interface.py) names modeling.init_from_checkpoint beside
# BertConfig and BertModel; the loading itself lives in checkpoints.py.
init_from_checkpoint = checkpoints.init_from_checkpoint

# Additive attention bias for masked positions, as in the original.
_MASK_ADDER = -10000.0
_LAYER_NORM_EPSILON = 1e-12


# ----------------------------------------------------------------------------------------------
# Activations and small helpers (the original's names).
# ----------------------------------------------------------------------------------------------


def gelu(x: tf.Tensor) -> tf.Tensor:
  """Gaussian Error Linear Unit, exact form `0.5 * x * (1 + erf(x / sqrt(2)))`.

  This is what `hidden_act: "gelu"` means here and in Hugging Face configs. The final version of
  Google's repository computes its `gelu` with the tanh approximation (`gelu_approximate`); the two
  differ by less than 1e-3 anywhere.
  """
  x = tf.convert_to_tensor(x)
  return 0.5 * x * (1.0 + tf.math.erf(x * tf.cast(1.0 / math.sqrt(2.0), x.dtype)))


def gelu_approximate(x: tf.Tensor) -> tf.Tensor:
  """GELU with the tanh approximation (`gelu_new` in Hugging Face configs)."""
  x = tf.convert_to_tensor(x)
  inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))
  return 0.5 * x * (1.0 + tf.tanh(inner))


_ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": gelu_approximate,
    "gelu_approximate": gelu_approximate,
    "relu": tf.nn.relu,
    "swish": tf.nn.silu,
    "silu": tf.nn.silu,
    "tanh": tf.tanh,
}


def get_activation(activation_string: Union[str, Callable, None]) -> Optional[Callable]:
  """Maps an activation name to its function, as the original does.

  Args:
    activation_string: a name (`gelu`, `gelu_new`, `gelu_approximate`, `relu`, `swish`, `silu`,
      `tanh`, `linear`), None or "" (no activation), or a callable (returned unchanged).

  Returns:
    The activation function, or None for a linear activation.

  Raises:
    ValueError: for an unknown name.
  """
  if not isinstance(activation_string, str):
    return activation_string
  if not activation_string:
    return None
  name = activation_string.lower()
  if name == "linear":
    return None
  if name not in _ACTIVATIONS:
    raise ValueError("Unsupported activation: %s (known: %s)" %
                     (activation_string, ", ".join(sorted(_ACTIVATIONS) + ["linear"])))
  return _ACTIVATIONS[name]


def get_shape_list(tensor: tf.Tensor, expected_rank: Union[int, Sequence[int], None] = None,
                   name: Optional[str] = None) -> list:
  """Returns the shape as a list: Python ints where static, scalar tensors where dynamic.

  Args:
    tensor: the tensor.
    expected_rank: if given, an int or list of ints; a different rank raises ValueError.
    name: name used in the error message.
  """
  tensor = tf.convert_to_tensor(tensor)
  if expected_rank is not None:
    ranks = [expected_rank] if isinstance(expected_rank, int) else list(expected_rank)
    if tensor.shape.rank not in ranks:
      raise ValueError("Tensor %s has rank %s, expected %s (shape %s)" % (
          name or getattr(tensor, "name", "?"), tensor.shape.rank, ranks, tensor.shape))
  dynamic = None
  shape = []
  for index, dim in enumerate(tensor.shape.as_list()):
    if dim is None:
      if dynamic is None:
        dynamic = tf.shape(tensor)
      dim = dynamic[index]
    shape.append(dim)
  return shape


def create_attention_mask_from_input_mask(from_tensor: tf.Tensor, to_mask: tf.Tensor) -> tf.Tensor:
  """Creates the original's 3D attention mask [batch, from_seq, to_seq] from a 2D mask.

  Args:
    from_tensor: [batch, from_seq, ...] tensor (ids or activations); only its shape is used.
    to_mask: int or float [batch, to_seq] with 1 for real tokens and 0 for padding.

  Returns:
    float32 [batch, from_seq, to_seq]: every query position may attend to the `to_mask` keys.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_mask = tf.cast(to_mask, tf.float32)[:, tf.newaxis, :]
  return tf.ones([from_shape[0], from_shape[1], 1], tf.float32) * to_mask


def create_initializer(initializer_range: float) -> keras.initializers.Initializer:
  """The original's weight initializer (truncated at two standard deviations)."""
  return keras.initializers.TruncatedNormal(stddev=initializer_range)


# ----------------------------------------------------------------------------------------------
# Configuration.
# ----------------------------------------------------------------------------------------------

_INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size", "max_position_embeddings", "type_vocab_size")
_PROBABILITY_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


# A config beyond these bounds is a typo, not a model to build: building it would only hang (a
# Keras layer per transformer layer) or run out of memory (400 GB of float32 weights).
MAX_LAYERS = 1000
MAX_PARAMETERS = 10**11


class ConfigError(errors.InputError):
  """A `bert_config.json` (or config dict) that cannot describe a BERT model; says which field."""


# The fields that give a model its shape: a bert_config.json without one would build BERT-Base's
# value for it (the original's defaults), another model than its checkpoint.
SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size")
KNOWN_FIELDS = SHAPE_FIELDS + ("hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
                               "max_position_embeddings", "type_vocab_size", "initializer_range")
# The fields that decide what a trained model computes (not its dropout or initializer).
COMPUTATION_FIELDS = SHAPE_FIELDS + ("hidden_act", "max_position_embeddings", "type_vocab_size")
CONFIG_FILE_NAME = "bert_config.json"


def _check_config_file_fields(json_file: str, fields: Mapping[str, Any]) -> None:
  """A config file names every shape field; a key that is a misspelt field (close to one, or one
  lengthened or cut short: `hidden_dropout_probability`) is an error (it would be kept as an
  extra field while the field took its default or kept another value)."""
  missing = [name for name in SHAPE_FIELDS if name not in fields]
  if missing:
    raise ConfigError("%s: BertConfig field %s is missing (Google's configs give all of %s)" %
                      (json_file, ", ".join(missing), ", ".join(SHAPE_FIELDS)))
  for key in fields:
    close = (difflib.get_close_matches(key, KNOWN_FIELDS, n=1, cutoff=0.85) or
             [name for name in KNOWN_FIELDS if key.startswith(name) or name.startswith(key)])
    if key not in KNOWN_FIELDS and close:
      raise ConfigError("%s: unknown key %r: did you mean %r?" % (json_file, key, close[0]))


class BertConfig:
  """Configuration of a `BertModel`, in the format of Google's `bert_config.json`.

  Keys the model does not use (Google's `directionality`, `pooler_*`, Hugging Face's extras) are
  kept as attributes and written back by `to_dict`, never an error.
  """

  def __init__(self,
               vocab_size: int,
               hidden_size: int = 768,
               num_hidden_layers: int = 12,
               num_attention_heads: int = 12,
               intermediate_size: int = 3072,
               hidden_act: str = "gelu",
               hidden_dropout_prob: float = 0.1,
               attention_probs_dropout_prob: float = 0.1,
               max_position_embeddings: int = 512,
               type_vocab_size: int = 16,
               initializer_range: float = 0.02,
               **extra_fields: Any):
    """Builds and validates a configuration (defaults as the original's BertConfig)."""
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range
    for key, value in extra_fields.items():
      setattr(self, key, value)
    self.validate()

  def validate(self) -> None:
    """Raises ConfigError naming the first field that cannot describe a BERT model."""
    for field in _INT_FIELDS:
      value = getattr(self, field)
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError("BertConfig field %s must be a positive integer, got %r" %
                          (field, value))
    for field in _PROBABILITY_FIELDS:
      value = getattr(self, field)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError("BertConfig field %s must be a probability in [0, 1), got %r" %
                          (field, value))
    if (isinstance(self.initializer_range, bool) or
        not isinstance(self.initializer_range, (int, float)) or
        not math.isfinite(self.initializer_range) or self.initializer_range <= 0):
      raise ConfigError("BertConfig field initializer_range must be a finite number > 0, got %r"
                        % (self.initializer_range,))
    for field, value in sorted(self.__dict__.items()):  # Extra keys too (layer_norm_eps, ...).
      if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError("BertConfig field %s must be a finite number, got %r" % (field, value))
    if self.hidden_size % self.num_attention_heads:
      raise ConfigError("BertConfig field hidden_size (%d) must be a multiple of "
                        "num_attention_heads (%d)" % (self.hidden_size, self.num_attention_heads))
    if not isinstance(self.hidden_act, str) or self.hidden_act.lower() not in _ACTIVATIONS:
      raise ConfigError("BertConfig field hidden_act has unsupported value %r (known: %s)" %
                        (self.hidden_act, ", ".join(sorted(_ACTIVATIONS))))
    if self.num_hidden_layers > MAX_LAYERS:
      raise ConfigError("BertConfig field num_hidden_layers must be at most %d, got %d" %
                        (MAX_LAYERS, self.num_hidden_layers))
    if self.num_parameters() > MAX_PARAMETERS:
      raise ConfigError("BertConfig describes %.3g parameters (hidden_size=%d, "
                        "intermediate_size=%d, vocab_size=%d, max_position_embeddings=%d): more "
                        "than %.0e, so a field is mistyped" % (self.num_parameters(), self.hidden_size,
                                         self.intermediate_size, self.vocab_size,
                                         self.max_position_embeddings, MAX_PARAMETERS))

  def num_parameters(self) -> int:
    """The encoder's weight count (embeddings, layers, pooler), to catch absurd configs before
    anything is built."""
    hidden, inner = self.hidden_size, self.intermediate_size
    positions = self.max_position_embeddings + self.type_vocab_size
    embeddings = (self.vocab_size + positions + 2) * hidden
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inner + inner + hidden + 4 * hidden
    return embeddings + self.num_hidden_layers * layer + hidden * hidden + hidden

  @property
  def size_per_head(self) -> int:
    """Width of one attention head."""
    return self.hidden_size // self.num_attention_heads

  @classmethod
  def from_dict(cls, json_object: Mapping[str, Any]) -> "BertConfig":
    """Builds a config from a dict such as a parsed `bert_config.json`."""
    if "vocab_size" not in json_object:
      raise ConfigError("BertConfig field vocab_size is missing")
    try:
      return cls(**dict(json_object))
    except TypeError as e:  # A field given twice, or a key that is not a valid name.
      raise ConfigError("BertConfig: %s" % e) from e

  @classmethod
  def from_json_file(cls, json_file: str) -> "BertConfig":
    """Reads a `bert_config.json`; errors name the file."""
    try:
      with tf.io.gfile.GFile(json_file, "r") as reader:
        text = reader.read()
    except (tf.errors.OpError, UnicodeDecodeError) as e:
      raise ConfigError(errors.named(json_file, e)) from e
    try:
      parsed = json.loads(text)
    except json.JSONDecodeError as e:
      raise ConfigError("%s is not valid JSON: %s" % (json_file, e)) from e
    if not isinstance(parsed, dict):
      raise ConfigError("%s must hold a JSON object, got %s" % (json_file, type(parsed).__name__))
    _check_config_file_fields(json_file, parsed)
    try:
      return cls.from_dict(parsed)
    except ConfigError as e:
      raise ConfigError("%s: %s" % (json_file, e)) from e

  def check_max_seq_length(self, max_seq_length: int) -> None:
    """Raises a ValueError naming `max_seq_length` when it exceeds the learned positions."""
    if max_seq_length > self.max_position_embeddings:
      raise ConfigError("`max_seq_length`=%d exceeds the model's max_position_embeddings=%d: the "
                       "model was only trained up to that length" %
                       (max_seq_length, self.max_position_embeddings))

  def to_dict(self) -> dict:
    """All fields, including the extra keys read from a file."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self) -> str:
    """The config as `bert_config.json` text (sorted keys, like Google's files)."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def check_config_of_model_directory(config: BertConfig, config_file: str, directory: str,
                                    what: str) -> None:
  """Raises ConfigError when `directory` (a model's: `what` names its flag) holds a
  bert_config.json other than `config_file` whose COMPUTATION_FIELDS differ from `config`'s.

  Another number of attention heads or another activation keeps every variable's shape, so a
  checkpoint loads under the wrong config and the model computes something else without an
  error; the config released, converted or exported beside the checkpoint is what it computes.
  A file there that is not a readable BERT config (another library's naming) is not compared.
  """
  beside = os.path.join(directory, CONFIG_FILE_NAME)
  if not tf.io.gfile.exists(beside) or atomic_files.same_place(beside, config_file):
    return
  try:
    model_config = BertConfig.from_json_file(beside)
  except ConfigError:
    return
  differences = computation_differences(config, model_config.to_dict())
  if differences:
    raise ConfigError("`bert_config_file`=%s has %s: the model in %s=%s was made with %s; "
                      "pass that config" % (config_file, "; ".join(differences), what, directory,
                                            beside))


def computation_differences(config: BertConfig, model_fields: Mapping[str, Any]) -> list[str]:
  """"<field> <config's value>, not <model's>" for each of COMPUTATION_FIELDS in `model_fields`
  (the config a model was made with, as a dict) whose value differs from `config`'s (names of
  activations compared without case)."""
  def comparable(value):
    return value.lower() if isinstance(value, str) else value
  return ["%s %s, not %s" % (field, getattr(config, field), model_fields[field])
          for field in COMPUTATION_FIELDS if field in model_fields
          and comparable(getattr(config, field)) != comparable(model_fields[field])]


# ----------------------------------------------------------------------------------------------
# Layers. Each layer's `name` is the original's TF1 variable scope.
# ----------------------------------------------------------------------------------------------


class Dense(keras.layers.Dense):
  """`keras.layers.Dense` computed as one 2D matmul over all leading dimensions.

  Keras multiplies a 3D input through `tensordot` (reshape, matmul, reshape, then bias and
  activation), which keeps TensorFlow's CPU graph optimizer from fusing bias and activation into
  the matmul; flattening first lets it fuse them, as the original's 2D formulation did.
  """

  def call(self, inputs, training=None):
    if len(inputs.shape) == 2:
      return super().call(inputs)
    outputs = super().call(tf.reshape(inputs, [-1, inputs.shape[-1]]))
    return tf.reshape(outputs, get_shape_list(inputs)[:-1] + [self.units])


class LayerNorm(keras.layers.LayerNormalization):
  """The original's LayerNorm (last axis, epsilon 1e-12); variables `gamma`, `beta`.

  Keras computes it in float32 even under a float16/bfloat16 policy.
  """

  def __init__(self, name: str = "LayerNorm", **kwargs):
    super().__init__(axis=-1, epsilon=_LAYER_NORM_EPSILON, name=name, **kwargs)


class ScopedDense(keras.layers.Layer):
  """A dense layer inside its own scope (`<name>/dense/{kernel,bias}`), optionally LayerNormed.

  Serves the pooler (`pooler/dense`, tanh), each layer's `intermediate/dense` and the masked-LM
  `cls/predictions/transform/{dense,LayerNorm}`.
  """

  def __init__(self, units: int, activation: Union[str, Callable, None], initializer_range: float,
               layer_norm: bool = False, **kwargs):
    super().__init__(**kwargs)
    self.dense = Dense(units, activation=get_activation(activation),
                       kernel_initializer=create_initializer(initializer_range), name="dense")
    self.layer_norm = LayerNorm() if layer_norm else None

  def build(self, input_shape):
    self.dense.build(input_shape)
    if self.layer_norm is not None:
      self.layer_norm.build(tuple(input_shape[:-1]) + (self.dense.units,))

  def call(self, inputs):
    outputs = self.dense(inputs)
    if self.layer_norm is not None:
      outputs = self.layer_norm(outputs)
    return outputs


class ResidualOutput(keras.layers.Layer):
  """`LayerNorm(dropout(dense(x)) + residual)`: the original's `attention/output` and `output`."""

  def __init__(self, hidden_size: int, dropout_prob: float, initializer_range: float, **kwargs):
    super().__init__(**kwargs)
    self.dense = Dense(hidden_size, kernel_initializer=create_initializer(initializer_range),
                       name="dense")
    self.dropout = keras.layers.Dropout(dropout_prob)
    self.layer_norm = LayerNorm()

  def build(self, input_shape):
    self.dense.build(input_shape)
    self.layer_norm.build(tuple(input_shape[:-1]) + (self.dense.units,))

  def call(self, inputs, residual, training=False):
    return self.layer_norm(self.dropout(self.dense(inputs), training=training) + residual)


class SelfAttention(keras.layers.Layer):
  """Multi-head scaled dot-product attention with `query`, `key`, `value` projections.

  The original's `attention_layer`: scores scaled by 1/sqrt(size_per_head), additive mask
  `(1 - mask) * -10000.0`, softmax (in float32 under mixed precision), dropout on the probabilities.
  """

  def __init__(self, num_attention_heads: int, size_per_head: int,
               attention_probs_dropout_prob: float, initializer_range: float,
               query_act=None, key_act=None, value_act=None, **kwargs):
    super().__init__(**kwargs)
    self.num_attention_heads = num_attention_heads
    self.size_per_head = size_per_head
    width = num_attention_heads * size_per_head

    def projection(name, activation):
      return Dense(width, activation=get_activation(activation),
                   kernel_initializer=create_initializer(initializer_range), name=name)

    self.query = projection("query", query_act)
    self.key = projection("key", key_act)
    self.value = projection("value", value_act)
    self.dropout = keras.layers.Dropout(attention_probs_dropout_prob)

  def build(self, from_tensor_shape, to_tensor_shape=None):
    """Builds `query` for the queries' width and `key`, `value` for the keys' (may differ)."""
    self.query.build(from_tensor_shape)
    for projection in (self.key, self.value):
      projection.build(to_tensor_shape or from_tensor_shape)

  def _project_to_heads(self, inputs, projections):
    """Applies `projections` (Dense layers) to `inputs` [B, S, W] as one matmul.

    The kernels and biases are concatenated at run time (the checkpoint keeps the three separate
    variables); one wide matmul keeps both cores busier than three narrow ones. The result is
    split and laid out per head.

    Returns:
      One tensor [B, heads, S, size_per_head] per projection.
    """
    batch_size, seq_length, width = get_shape_list(inputs, expected_rank=3)
    dtype = self.compute_dtype

    def joined(name):
      parts = [tf.cast(getattr(projection, name), dtype) for projection in projections]
      return parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)

    outputs = tf.nn.bias_add(
        tf.matmul(tf.reshape(tf.cast(inputs, dtype), [-1, width]), joined("kernel")),
        joined("bias"))
    outputs = tf.reshape(outputs, [batch_size, seq_length, len(projections),
                                   self.num_attention_heads, self.size_per_head])
    # [B, S, projections, heads, size] -> [projections, B, heads, S, size]: one transpose for all.
    outputs = tf.transpose(outputs, [2, 0, 3, 1, 4])
    return [projection.activation(head_values) for projection, head_values
            in zip(projections, tf.unstack(outputs, num=len(projections)))]

  def call(self, from_tensor, to_tensor=None, attention_mask=None, training=False):
    """Attends from `from_tensor` [B, F, W] to `to_tensor` [B, T, W] (default: itself).

    Args:
      from_tensor: queries' input.
      to_tensor: keys' and values' input; None for self-attention.
      attention_mask: 1 = may attend, 0 = may not; [B, F, T] as the original or broadcastable
        ([B, 1, T]); None attends everywhere.
      training: apply dropout.

    Returns:
      [B, F, heads * size_per_head] context vectors.
    """
    if to_tensor is None:
      query, key, value = self._project_to_heads(from_tensor, [self.query, self.key, self.value])
    else:
      query, = self._project_to_heads(from_tensor, [self.query])
      key, value = self._project_to_heads(to_tensor, [self.key, self.value])
    # Scaling the queries rather than the scores is the same product with fewer multiplies.
    query = query * tf.cast(1.0 / math.sqrt(float(self.size_per_head)), query.dtype)
    # Batched matmuls on [B, heads, ., size] (no einsum: its implicit transposes cost more).
    scores = tf.matmul(query, key, transpose_b=True)
    # Softmax in float32: the -10000 bias and the exponent overflow float16.
    scores = tf.cast(scores, tf.float32)
    if attention_mask is not None:
      adder = (1.0 - tf.cast(attention_mask, tf.float32)) * _MASK_ADDER
      scores += adder[:, tf.newaxis, :, :]
    probs = tf.cast(tf.nn.softmax(scores, axis=-1), self.compute_dtype)
    probs = self.dropout(probs, training=training)
    context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])
    batch_size, from_length = get_shape_list(from_tensor, expected_rank=3)[:2]
    return tf.reshape(context,
                      [batch_size, from_length, self.num_attention_heads * self.size_per_head])


def attention_layer(from_tensor: tf.Tensor,
                    to_tensor: tf.Tensor,
                    attention_mask: Optional[tf.Tensor] = None,
                    num_attention_heads: int = 1,
                    size_per_head: int = 512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob: float = 0.0,
                    initializer_range: float = 0.02,
                    do_return_2d_tensor: bool = False,
                    batch_size: Optional[int] = None,
                    from_seq_length: Optional[int] = None,
                    to_seq_length: Optional[int] = None,
                    training: bool = False,
                    name: str = "self") -> tf.Tensor:
  """The original's functional `attention_layer`, for code ported from TF1.

  Like the original it creates fresh `query`/`key`/`value` variables on every call (a new
  `SelfAttention` layer named `name`): in a functional `keras.Model` built from `keras.Input`
  tensors the model tracks them; in eager code they are new random weights each call. Models should
  hold a `SelfAttention` layer instead.

  Args:
    from_tensor: [B, F, W], or [B * F, W] with `batch_size` and `from_seq_length`.
    to_tensor: [B, T, W], or [B * T, W] with `batch_size` and `to_seq_length`.
    attention_mask: [B, F, T] with 1 where attention is allowed, or None.
    num_attention_heads, size_per_head: head layout.
    query_act, key_act, value_act: optional activations of the projections.
    attention_probs_dropout_prob: dropout on attention probabilities (applied when `training`).
    initializer_range: stddev of the truncated-normal initializer.
    do_return_2d_tensor: return [B * F, heads * size] instead of [B, F, heads * size].
    batch_size, from_seq_length, to_seq_length: needed only for 2D inputs.
    training: apply dropout.
    name: the layer's (variable scope) name.

  Returns:
    The context tensor.
  """

  def as_3d(tensor, seq_length, arg_name):
    if len(tensor.shape) == 3:
      return tensor
    if len(tensor.shape) != 2 or batch_size is None or seq_length is None:
      raise ValueError("attention_layer: %s must be 3D, or 2D with batch_size and its seq_length;"
                       " got shape %s" % (arg_name, tensor.shape))
    return keras.ops.reshape(tensor, [batch_size, seq_length, tensor.shape[-1]])

  from_tensor = as_3d(from_tensor, from_seq_length, "from_tensor")
  to_tensor = as_3d(to_tensor, to_seq_length, "to_tensor")
  layer = SelfAttention(num_attention_heads, size_per_head, attention_probs_dropout_prob,
                        initializer_range, query_act, key_act, value_act, name=name)
  context = layer(from_tensor, to_tensor, attention_mask=attention_mask, training=training)
  if do_return_2d_tensor:
    context = keras.ops.reshape(context, [-1, num_attention_heads * size_per_head])
  return context


class Attention(keras.layers.Layer):
  """The original's `attention` scope: `self` (attention) and `output` (projection + residual)."""

  def __init__(self, config: BertConfig, **kwargs):
    super().__init__(**kwargs)
    self.self_attention = SelfAttention(config.num_attention_heads, config.size_per_head,
                                        config.attention_probs_dropout_prob,
                                        config.initializer_range, name="self")
    self.projection = ResidualOutput(config.hidden_size, config.hidden_dropout_prob,
                                     config.initializer_range, name="output")

  def build(self, input_shape):
    self.self_attention.build(input_shape)
    self.projection.build(input_shape)

  def call(self, hidden_states, attention_mask=None, training=False):
    context = self.self_attention(hidden_states, attention_mask=attention_mask, training=training)
    return self.projection(context, hidden_states, training=training)


class TransformerLayer(keras.layers.Layer):
  """One post-LayerNorm encoder layer (`layer_<i>`): attention, intermediate, output."""

  def __init__(self, config: BertConfig, **kwargs):
    super().__init__(**kwargs)
    self.attention = Attention(config, name="attention")
    self.intermediate = ScopedDense(config.intermediate_size, config.hidden_act,
                                    config.initializer_range, name="intermediate")
    self.projection = ResidualOutput(config.hidden_size, config.hidden_dropout_prob,
                                     config.initializer_range, name="output")

  def build(self, input_shape):
    self.attention.build(input_shape)
    self.intermediate.build(input_shape)
    self.projection.build(tuple(input_shape[:-1]) + (self.intermediate.dense.units,))

  def call(self, hidden_states, attention_mask=None, training=False):
    attention_output = self.attention(hidden_states, attention_mask=attention_mask,
                                      training=training)
    return self.projection(self.intermediate(attention_output), attention_output, training=training)


class Encoder(keras.layers.Layer):
  """The original's `encoder` scope: `num_hidden_layers` layers named `layer_0`, `layer_1`, ..."""

  def __init__(self, config: BertConfig, **kwargs):
    super().__init__(**kwargs)
    self.transformer_layers = [TransformerLayer(config, name="layer_%d" % index)
                               for index in range(config.num_hidden_layers)]

  def build(self, input_shape):
    for layer in self.transformer_layers:
      layer.build(input_shape)

  def call(self, hidden_states, attention_mask=None, training=False):
    """Returns the list of every layer's output."""
    outputs = []
    for layer in self.transformer_layers:
      hidden_states = layer(hidden_states, attention_mask=attention_mask, training=training)
      outputs.append(hidden_states)
    return outputs


class Embeddings(keras.layers.Layer):
  """Word + token-type + learned position embeddings, LayerNorm and dropout (`embeddings`)."""

  def __init__(self, config: BertConfig, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.layer_norm = LayerNorm()
    self.dropout = keras.layers.Dropout(config.hidden_dropout_prob)

  def build(self, input_shape=None):
    config = self.config
    initializer = create_initializer(config.initializer_range)

    def table(name, rows):
      return self.add_weight(name=name, shape=(rows, config.hidden_size), initializer=initializer)

    self.word_embeddings = table("word_embeddings", config.vocab_size)
    self.token_type_embeddings = table("token_type_embeddings", config.type_vocab_size)
    self.position_embeddings = table("position_embeddings", config.max_position_embeddings)
    self.layer_norm.build((None, None, config.hidden_size))

  def call(self, input_ids, token_type_ids, position_ids=None, training=False):
    """Embeds [B, T] ids. Position t of a row has position id t unless `position_ids` [B, T]
    gives each token its own (packed rows: each sequence counts from 0)."""
    seq_length = get_shape_list(input_ids, expected_rank=2)[1]
    if position_ids is None:
      if isinstance(seq_length, int) and seq_length > self.config.max_position_embeddings:
        raise ValueError("sequence length %d exceeds max_position_embeddings %d" %
                         (seq_length, self.config.max_position_embeddings))
      positions = self.position_embeddings[tf.newaxis, :seq_length, :]
    else:
      positions = tf.gather(self.position_embeddings, position_ids)
    embeddings = (tf.gather(self.word_embeddings, input_ids) +
                  tf.gather(self.token_type_embeddings, token_type_ids) + positions)
    return self.dropout(self.layer_norm(embeddings), training=training)


def packed_attention_mask(packed_sequence_ids: tf.Tensor, input_mask: tf.Tensor) -> tf.Tensor:
  """The block-diagonal attention mask of packed rows: float32 [B, T, T], 1 where query and key
  belong to the same sequence (`packed_sequence_ids` [B, T], 0 on padding) and the key is a real
  token (`input_mask`), so each sequence attends exactly where its padded row would."""
  same = tf.equal(packed_sequence_ids[:, :, tf.newaxis], packed_sequence_ids[:, tf.newaxis, :])
  real_key = tf.not_equal(input_mask, 0)[:, tf.newaxis, :]
  return tf.cast(same & real_key, tf.float32)


def unpack_features(input_ids, input_mask, token_type_ids, extra_keys=()):
  """Accepts either separate tensors or one feature dict (TFRecord names, as the original).

  A dict may name the type ids `segment_ids` (TFRecord feature) or `token_type_ids`.
  """
  if not isinstance(input_ids, Mapping):
    return (input_ids, input_mask, token_type_ids) + (None,) * len(extra_keys)
  features = input_ids
  type_ids = features.get("segment_ids", features.get("token_type_ids"))
  return (features["input_ids"], features.get("input_mask"), type_ids) + tuple(
      features.get(key) for key in extra_keys)


class BertModel(keras.Model):
  """BERT encoder. Variables are named as in Google's checkpoints (`bert/...` by default).

  Call as `model(input_ids, input_mask=None, token_type_ids=None, training=False)` (or with one
  dict holding `input_ids`, `input_mask`, `segment_ids`) and get a dict:
    sequence_output [B, T, H]: the last layer.
    pooled_output [B, H]: tanh(dense(first token of the last layer)).
    encoder_outputs: list of every layer's [B, T, H].
    embedding_output [B, T, H]: the embedding layer's output.
  `input_mask` defaults to all ones, `token_type_ids` to zeros. Dropout only when `training`.
  The variables are built by `model.build()` or by the first call.

  A dict may also hold packed rows (`packing.PACKED_FEATURES`: `position_ids`,
  `packed_sequence_ids`, `sequence_starts`): each sequence then attends only to itself
  (`packed_attention_mask`) and `pooled_output` is [sequences, H], one per sequence's [CLS], in
  the order of `sequence_starts`.
  """

  # Tells checkpoints.py that this model keeps its own name (`bert/...`) in checkpoint names.
  is_bert_encoder = True

  def __init__(self, config: BertConfig, name: str = "bert", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = copy.deepcopy(config)
    self.embeddings = Embeddings(self.config, name="embeddings")
    self.encoder = Encoder(self.config, name="encoder")
    self.pooler = ScopedDense(self.config.hidden_size, "tanh", self.config.initializer_range,
                              name="pooler")

  def build(self, input_shape=None):
    """Creates every variable; their shapes do not depend on the input shape."""
    hidden_shape = (None, None, self.config.hidden_size)
    self.embeddings.build()
    self.encoder.build(hidden_shape)
    self.pooler.build((None, self.config.hidden_size))

  def get_embedding_table(self) -> keras.Variable:
    """The word embedding table [vocab_size, hidden_size] (tied to the masked-LM output)."""
    if not self.built:
      self.build()
    return self.embeddings.word_embeddings

  def call(self, input_ids, input_mask=None, token_type_ids=None, training=False):
    packed = packing.is_packed(input_ids)
    input_ids, input_mask, token_type_ids, position_ids, sequence_ids, starts = unpack_features(
        input_ids, input_mask, token_type_ids, extra_keys=packing.PACKED_FEATURES)
    if input_mask is None:
      input_mask = tf.ones_like(input_ids)
    if token_type_ids is None:
      token_type_ids = tf.zeros_like(input_ids)
    embedding_output = self.embeddings(input_ids, token_type_ids, position_ids,
                                       training=training)
    if packed:
      attention_mask = packed_attention_mask(sequence_ids, input_mask)
    else:
      # [B, 1, T] broadcasts over query positions: the original's [B, T, T] mask's values.
      attention_mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, :]
    encoder_outputs = self.encoder(embedding_output, attention_mask=attention_mask,
                                   training=training)
    sequence_output = encoder_outputs[-1]
    first_tokens = (tf.gather_nd(sequence_output, tf.reshape(starts, [-1, 2])) if packed else
                    sequence_output[:, 0, :])
    pooled_output = self.pooler(first_tokens)
    return {
        "sequence_output": sequence_output,
        "pooled_output": pooled_output,
        "encoder_outputs": encoder_outputs,
        "embedding_output": embedding_output,
    }

  def get_config(self):
    return {"config": self.config.to_dict(), "name": self.name}

  @classmethod
  def from_config(cls, config):
    return cls(BertConfig.from_dict(config["config"]), name=config.get("name", "bert"))


