"""The Tinker SDK's binary messages (protobuf, package ``tinker_public``): what
``forward_backward`` sends, and what ``forward_backward`` and ``asample`` futures return.
Every other call is JSON (``ascent.service.app``).

The schema is the SDK's own generated module (``tinker.proto.tinker_public_pb2``, the
``tinker`` extra): the server reads and writes exactly what the client does. Encodings:

- token ids of a chunk: int32 little-endian bytes;
- a tensor: little-endian bytes of its dtype (float32 or int64 from the SDK), C order, with
  its shape; or a sparse CSR matrix (values, int64 row pointers and column indices), the
  missing entries 0;
- a batch of per-datum outputs: one ``BatchedTensor`` per field, the datums' values end to
  end and int64 *byte* offsets (datums + 1 of them);
- metrics: ``name:reduction`` keys (the client reduces chunked calls by the reduction).
"""

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ascent.errors import InputError


def protos() -> ModuleType:
    """The SDK's generated protobuf module; a clear error without the ``tinker`` extra."""
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as missing:
        raise ImportError(
            "the Tinker service reads the SDK's wire format: pip install 'ascent[tinker]'"
        ) from missing
    return tinker_public_pb2


class WireError(InputError):
    """A request the client must fix (answered as the SDK's user error; raised in a worker,
    it reaches the driver as a ``WorkerInputError``, a user error too)."""


@dataclass(frozen=True)
class Datum:
    """One example: its model input (N token ids) and its loss inputs, each (N,) aligned so
    that position i of the input predicts ``inputs["target_tokens"][i]``."""

    tokens: Tensor  # (N,) int64
    inputs: dict[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    config: dict[str, float | str]
    forward_only: bool
    data: list[Datum]


_NUMPY = {1: np.float32, 2: np.int64, 3: np.int32}


def decode_tensor(message: Any, name: str) -> Tensor:
    """A ``tinker_public.Tensor`` as a torch tensor (int64 or float32)."""
    dtype = _NUMPY.get(message.dtype)
    if dtype is None:
        raise WireError(f"loss input {name!r}: dtype {message.dtype} is not float32 or int64")
    shape = tuple(int(s) for s in message.shape)
    if message.WhichOneof("encoding") == "sparse_csr":
        csr = message.sparse_csr
        values = np.frombuffer(csr.values, dtype=dtype)
        rows = np.frombuffer(csr.crow_indices, dtype=np.int64)
        cols = np.frombuffer(csr.col_indices, dtype=np.int64)
        dense = np.zeros(shape, dtype=dtype)
        for row in range(len(rows) - 1):
            dense[row, cols[rows[row] : rows[row + 1]]] = values[rows[row] : rows[row + 1]]
        array = dense
    else:
        array = np.frombuffer(message.dense, dtype=dtype)
        if shape and int(np.prod(shape)) != array.size:
            raise WireError(f"loss input {name!r}: {array.size} values for shape {list(shape)}")
        array = array.reshape(shape) if shape else array
    return torch.from_numpy(array.astype(np.int64 if dtype != np.float32 else np.float32))


def _tokens(datum: Any, index: int) -> Tensor:
    parts = []
    for chunk in datum.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise WireError(f"datum {index}: {kind} chunks are not served (text models only)")
        parts.append(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32))
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return torch.from_numpy(ids.astype(np.int64))


def _config(request: Any) -> dict[str, float | str]:
    config: dict[str, float | str] = dict(request.loss_fn_config)
    for key, value in request.loss_fn_config_v2.items():  # the SDK writes both; v2 has text
        config[key] = value.number if value.WhichOneof("value") == "number" else value.text
    return config


def decode_forward_backward(raw: bytes) -> ForwardBackwardCall:
    """A ``ForwardBackwardRequest`` body -> its call; ``WireError`` naming what is wrong."""
    request = protos().ForwardBackwardRequest()
    try:
        request.ParseFromString(raw)
    except Exception as bad:  # protobuf's DecodeError
        message = f"forward_backward: the body is not a ForwardBackwardRequest ({bad})"
        raise WireError(message) from bad
    data = []
    for index, datum in enumerate(request.data):
        inputs = {name: decode_tensor(t, name) for name, t in datum.loss_fn_inputs.items()}
        data.append(Datum(_tokens(datum, index), inputs))
    return ForwardBackwardCall(
        model_id=request.model_id,
        seq_id=request.seq_id,
        loss_fn=request.loss_fn,
        config=_config(request),
        forward_only=request.forward_only,
        data=data,
    )


def encode_forward_backward_output(log_probs: list[Tensor], metrics: dict[str, float]) -> bytes:
    """``ForwardBackwardOutput``: each datum's target log-probs (N_i,) float32 as the
    ``logprobs`` field of one record, and ``metrics`` (keys ``name:reduction``)."""
    pb = protos()
    output = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    record = output.loss_fn_outputs.add()
    record.num_datums = len(log_probs)
    arrays = [lp.detach().to(torch.float32).cpu().numpy() for lp in log_probs]
    batched = record.fields["logprobs"]
    batched.dtype = pb.DTYPE_FLOAT32
    batched.data = b"".join(a.tobytes() for a in arrays)
    batched.offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64).tobytes()
    return output.SerializeToString()
