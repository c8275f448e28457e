"""The Batch record that flows between the controller and the workers.

``Batch`` holds B samples: a TensorDict of (B, ...) tensors, per-sample non-tensor lists
and a JSON-able step ``meta``. It is immutable; every operation returns a new Batch.
``PackedTokens`` and ``pack_tokens`` / ``unpack_tokens`` convert padded (B, T, ...) token
fields to packed (N, ...) ones and back.
"""

from ascent.batch.fields import Padding
from ascent.batch.packing import PackedTokens, pack_tokens, unpack_tokens
from ascent.batch.record import Batch

__all__ = ["Batch", "PackedTokens", "Padding", "pack_tokens", "unpack_tokens"]
