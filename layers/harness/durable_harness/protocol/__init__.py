"""The wire protocol: harness stream parts in, AI SDK UI message chunks out, UI messages back.

- :mod:`.harness_parts`: the 19 ``HarnessV1StreamPart`` types (decode / encode).
- :mod:`.ui_chunks`: the UI message chunks ``useChat`` accepts (parse / encode).
- :mod:`.translate`: the stateful, checkpointable harness-to-UI translator.
- :mod:`.sse`: SSE framing and the client-side stream parsers.
- :mod:`.ui_messages`: the UI messages a client POSTs, and their conversion to model messages.
- :mod:`.assemble`: the assistant message a client builds from a chunk stream (for tests; imported
  on first use, as no server or Lambda function needs it).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .harness_parts import HarnessStreamPart, decode_part, encode_part
from .sse import SSE_DONE, SSE_KEEPALIVE, UI_MESSAGE_STREAM_HEADERS, SSEParser, encode_sse
from .translate import StreamTranslator, ToolCallInfo, TranslatorState
from .ui_chunks import UIMessageChunk, encode_ui_chunk, parse_ui_chunk
from .ui_messages import UIMessage, convert_to_model_messages, parse_ui_messages

if TYPE_CHECKING:
    from .assemble import UIMessageAssembler, assemble_ui_message

__getattr__ = lazy_exports(__name__, {"UIMessageAssembler": ".assemble", "assemble_ui_message": ".assemble"})

__all__ = [
    "SSE_DONE",
    "SSE_KEEPALIVE",
    "UI_MESSAGE_STREAM_HEADERS",
    "HarnessStreamPart",
    "SSEParser",
    "StreamTranslator",
    "ToolCallInfo",
    "TranslatorState",
    "UIMessage",
    "UIMessageAssembler",
    "UIMessageChunk",
    "assemble_ui_message",
    "convert_to_model_messages",
    "decode_part",
    "encode_part",
    "encode_sse",
    "encode_ui_chunk",
    "parse_ui_chunk",
    "parse_ui_messages",
]
