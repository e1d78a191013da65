"""TFRecord files and protocol buffers as bytes, written without TensorFlow.

Pretraining data's worker processes fork and must not import TensorFlow, and an export's warmup
requests are `tensorflow.serving` messages this project has no Python package for; so they encode
by hand, with these pieces of the wire formats:
- protocol buffers: `varint`, `field_tag`/`field_header` and `length_delimited` fields (wire type
  2), and `feature_entry_prefix`, the bytes of one `tf.train.Features.feature` map entry before its
  packed values;
- TFRecord files: `frame_tfrecords` frames records (length, data and their masked CRC-32C, computed
  with NumPy by `crc32c`).
The tests check the results against TensorFlow's own parsers and writer.
"""

from typing import Sequence

import numpy as np

# Field numbers of feature.proto's Feature.kind: the value lists a feature holds.
FLOAT_LIST, INT64_LIST = 2, 3


def varint(value: int) -> bytes:
  """Protocol-buffer base-128 varint of a non-negative int."""
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def field_tag(number: int) -> bytes:
  """The tag of length-delimited field `number` (wire type 2: strings, sub-messages, packed
  values, map entries)."""
  return varint(number << 3 | 2)


def field_header(number: int, length: int) -> bytes:
  """The bytes before a length-delimited field's `length` bytes of payload."""
  return field_tag(number) + varint(length)


def length_delimited(number: int, payload: bytes) -> bytes:
  """A whole length-delimited protobuf field."""
  return field_header(number, len(payload)) + payload


def feature_entry_prefix(name: str, value_list: int, packed_values_length: int) -> bytes:
  """Bytes before the packed values of one `Features.feature` map entry.

  The entry is: map key `name` (field 1), map value (field 2) a Feature holding one value list
  (`value_list`: INT64_LIST or FLOAT_LIST) whose `value` field 1 holds the packed values.
  Everything but the values depends on their length only.
  """
  values_field = field_header(1, packed_values_length)
  list_field = field_header(value_list, len(values_field) + packed_values_length)
  feature_length = len(list_field) + len(values_field) + packed_values_length
  key_field = length_delimited(1, name.encode())
  value_field = field_header(2, feature_length)
  entry_length = len(key_field) + len(value_field) + feature_length
  return field_header(1, entry_length) + key_field + value_field + list_field + values_field


def _crc32c_tables() -> tuple:
  """Tables of the reflected CRC-32C (Castagnoli, polynomial 0x82F63B78) update.

  Returns (byte_table, low_table, high_table): `byte_table[b]` advances the register by one byte;
  after four bytes the register is `low_table[x & 0xFFFF] ^ high_table[x >> 16]` with x = register
  XOR the four bytes read as a little-endian uint32 (the update is linear, and after four bytes
  nothing of the old register is left but what x carries).
  """
  byte_table = np.arange(256, dtype=np.uint32)
  for _ in range(8):
    byte_table = np.where(byte_table & 1, (byte_table >> 1) ^ np.uint32(0x82F63B78),
                          byte_table >> 1).astype(np.uint32)
  halves = np.arange(1 << 16, dtype=np.uint32)
  low_table, high_table = halves, halves << np.uint32(16)
  for _ in range(4):
    low_table = byte_table[low_table & 0xFF] ^ (low_table >> np.uint32(8))
    high_table = byte_table[high_table & 0xFF] ^ (high_table >> np.uint32(8))
  return byte_table, low_table, high_table


_CRC_BYTE_TABLE, _CRC_LOW_TABLE, _CRC_HIGH_TABLE = _crc32c_tables()
_CRC_OF_ZEROS = [0xFFFFFFFF]  # [n]: the register after n zero bytes from the initial 0xFFFFFFFF.
_CRC_BATCH = 4096


def _initial_register_effect(lengths: np.ndarray) -> np.ndarray:
  """What the initial register value contributes to the CRC of a message of each length."""
  longest = int(lengths.max())
  while len(_CRC_OF_ZEROS) <= longest:
    register = _CRC_OF_ZEROS[-1]
    _CRC_OF_ZEROS.append(int(_CRC_BYTE_TABLE[register & 0xFF]) ^ (register >> 8))
  return np.asarray(_CRC_OF_ZEROS, dtype=np.uint32)[lengths]


def crc32c(messages: Sequence[bytes]) -> np.ndarray:
  """CRC-32C of every message, computed together with NumPy: one vector step per 4 bytes.

  The CRC update is linear, so a message's CRC is its CRC from a zero register XOR the effect of the
  initial register over its length; from a zero register leading zero bytes change nothing, so the
  messages are right-aligned in one zero-padded matrix and processed column by column.
  """
  result = np.empty(len(messages), dtype=np.uint32)
  for start in range(0, len(messages), _CRC_BATCH):
    batch = messages[start:start + _CRC_BATCH]
    lengths = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
    width = -(-int(lengths.max()) // 4) * 4
    zeros = bytes(width)
    padded = b"".join(part for message in batch for part in (zeros[len(message):], message))
    words = np.frombuffer(padded, dtype="<u4").reshape(len(batch), width // 4)
    register = np.zeros(len(batch), dtype=np.uint32)
    for column in np.ascontiguousarray(words.T):
      mixed = register ^ column
      register = _CRC_LOW_TABLE[mixed & 0xFFFF] ^ _CRC_HIGH_TABLE[mixed >> 16]
    result[start:start + len(batch)] = (register ^ _initial_register_effect(lengths)
                                        ^ np.uint32(0xFFFFFFFF))
  return result


def _masked_crc(crc: np.ndarray) -> np.ndarray:
  """TFRecord's masked CRC: rotate right by 15 bits and add a constant (mod 2**32)."""
  return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


def frame_tfrecords(records: Sequence[bytes]) -> list:
  """Each record framed as in a TFRecord file: length, its masked CRC, data, data's masked CRC."""
  if not records:
    return []
  lengths = np.fromiter(map(len, records), dtype="<u8", count=len(records))
  length_bytes = lengths.tobytes()
  length_fields = [length_bytes[8 * i:8 * i + 8] for i in range(len(records))]
  headers = np.empty(len(records), dtype=[("length", "<u8"), ("crc", "<u4")])
  headers["length"] = lengths
  headers["crc"] = _masked_crc(crc32c(length_fields))
  header_bytes = headers.tobytes()
  footer_bytes = _masked_crc(crc32c(records)).astype("<u4").tobytes()
  return [header_bytes[12 * i:12 * i + 12] + record + footer_bytes[4 * i:4 * i + 4]
          for i, record in enumerate(records)]
