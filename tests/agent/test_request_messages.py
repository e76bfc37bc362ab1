"""request_messages (issue 20): the turn's messages go into a model request as they are (no
validation of the whole history at every step); anything else is validated as before."""

from __future__ import annotations

import pytest
from durable_harness.agent.calls import request_messages
from durable_harness.messages import AssistantMessage, TextPart, UserMessage
from pydantic import ValidationError


def test_message_models_are_passed_as_they_are() -> None:
    messages = [UserMessage(content=[TextPart(text="go")]), AssistantMessage(content=[TextPart(text="ok")])]
    assert request_messages(messages) is messages


def test_messages_given_as_json_are_validated_into_models() -> None:
    reply = {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    given = [UserMessage(content=[TextPart(text="go")]), reply]
    out = request_messages(given)
    assert isinstance(out[1], AssistantMessage) and out[1].content == [TextPart(text="ok")]
    with pytest.raises(ValidationError):
        request_messages([{"role": "nobody"}])
