"""A Python client of the durable-harness chat server, with ``WorkflowChatTransport``'s semantics.

- :class:`ChatClient` / :class:`AsyncChatClient`: ``send()`` POSTs a turn and yields typed UI
  chunks, resuming a dropped stream with ``GET …/stream?startIndex=<chunks received>`` (bounded
  exponential backoff, never a tight loop); ``resume()`` follows a run from any index (negative:
  from the tail); ``run_status()``, ``cancel()``, ``approve_run()``: the run API.
- :class:`Conversation` / :class:`AsyncConversation`: the UI message history as ``useChat`` keeps
  it, the assistant message assembled as chunks arrive, approvals that continue the same message.

::

    with ChatClient("http://127.0.0.1:8000", token=TOKEN) as client:
        chat = client.conversation()
        for chunk in chat.send("Save a note: buy milk"):
            ...
        for pending in chat.pending_approvals():
            chat.answer_approval(pending["approvalId"], True).collect()
        print(chat.last_assistant_message)
"""

from ._common import DEFAULT_URL, ConversationState, generate_id, user_message
from ._cursor import ReconnectEvent, RetryPolicy, StreamCursor
from .aio import AsyncChatClient, AsyncChunkStream, AsyncConversation, AsyncTurnStream
from .errors import ChatClientError, NetworkError, ReconnectLimitError, ResponseError, StreamError
from .sync import ChatClient, ChunkStream, Conversation, TurnStream

__all__ = [
    "DEFAULT_URL",
    "AsyncChatClient",
    "AsyncChunkStream",
    "AsyncConversation",
    "AsyncTurnStream",
    "ChatClient",
    "ChatClientError",
    "ChunkStream",
    "Conversation",
    "ConversationState",
    "NetworkError",
    "ReconnectEvent",
    "ReconnectLimitError",
    "ResponseError",
    "RetryPolicy",
    "StreamCursor",
    "StreamError",
    "TurnStream",
    "generate_id",
    "user_message",
]
