"""The OpenAPI document of the chat app (served at ``/openapi.json``; used by the API fuzz tests)."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..ids import MAX_CHAT_ID


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    """The ``content`` of a JSON body with ``schema``."""
    return {"application/json": {"schema": schema}}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    """A required JSON request body with ``schema``."""
    return {"required": True, "content": _json(schema)}


def _object(required: list[str], properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An object schema with the ``required`` keys of its ``properties`` (then ``extra`` keywords)."""
    return {"type": "object", "required": required, "properties": properties, **extra}


def _param(name: str, where: str, schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A parameter ``name`` in the ``where`` (``path``, ``query``) of a request; a path one is required."""
    return {"name": name, "in": where, **({"required": True} if where == "path" else {}), **extra, "schema": schema}


_RUN_ID = {"type": "string", "pattern": "^wrun_[0-9a-z]{26}$", "description": "A run id (from x-workflow-run-id)."}
_ERROR = {
    "description": "An error; `code` names it, `message` says what to fix.",
    "content": _json(_object(["error"], {
        "error": _object(["code", "message"], {"code": {"type": "string"}, "message": {"type": "string"}}),
    })),
}  # fmt: skip
_SSE = {
    "description": "The run's UI message chunks as server-sent events, ending with `finish` (then `[DONE]`).",
    "headers": {
        "x-workflow-run-id": {"schema": {"type": "string"}},
        "x-workflow-stream-tail-index": {"schema": {"type": "integer"}},
    },
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}
_UNAVAILABLE = {
    **_ERROR,
    "description": "Storage is unavailable right now (code `storage_unavailable`); retry after `Retry-After` s.",
    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
}
_ERRORS = {**{str(code): _ERROR for code in (400, 401, 404, 405, 409, 413)}, "503": _UNAVAILABLE}
_PATH_RUN = [_param("runId", "path", _RUN_ID)]
_PATH_RUN_OR_CHAT = [_param(
    "runId", "path", {"type": "string", "minLength": 1, "maxLength": MAX_CHAT_ID},
    description="A run id, or a chat id (the `id` of its POSTs): the chat's latest run while it is in progress.",
)]  # fmt: skip
_UI_MESSAGE = {
    "type": "object",
    "description": "An AI SDK UIMessage.",
    "required": ["id", "role", "parts"],
    "properties": {
        "id": {"type": "string"},
        "role": {"enum": ["system", "user", "assistant"]},
        "metadata": {},
        "parts": {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string"}}}},
    },
}  # fmt: skip
_JSON_OBJECT = _json({"type": "object"})
_EVENT_NAME = _param("name", "path", {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"})
_EVENT_BODY = _body({"description": "Any JSON, at most 256 KB."})
_DELIVERED = {
    "description": "Recorded: `outcome` is `resumed` (the run waited for it) or `kept`; a duplicate is a 409 "
    "with the first delivery's outcome.",
    "content": _JSON_OBJECT,
}
_STRING = {"type": "string"}
_STATUS_FILTER = "Comma-separated run statuses (`finished`, `failed`, ...) or groups (`running`, `waiting`)."
_LIST_PARAMETERS = [
    _param("status", "query", _STRING, description=_STATUS_FILTER),
    _param("chat", "query", _STRING, description="Only the runs of this chat id."),
    _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 25}),
    _param("cursor", "query", _STRING, description="The `nextCursor` of the previous page (opaque)."),
]
_RUN_LIST = _json(_object(["runs", "nextCursor"], {
    "runs": {"type": "array", "items": _object(["runId", "status", "createdAt", "chatId"], {
        "runId": _RUN_ID,
        "status": {"type": "string"},
        "createdAt": {"type": "string", "description": "ISO 8601, UTC."},
        "chatId": {"type": ["string", "null"]},
        "agent": {"type": "string"},
    })},
    "nextCursor": {"type": ["string", "null"], "description": "The next page's cursor; null: the last."},
}))  # fmt: skip
_ANSWER = _object(
    ["approvalId", "approved"], {"approvalId": _STRING, "approved": {"type": "boolean"}, "reason": _STRING}
)
_TOKENS = ["inputTokens", "outputTokens", "totalTokens"]
_USAGE = _object(_TOKENS, {k: {"type": "integer"} for k in _TOKENS})
_RESULT = _json({
    "type": "object",
    "required": ["runId", "status", "text", "finishReason", "totalUsage", "steps", "responseMessages"],
    "properties": {
        "runId": _RUN_ID,
        "status": {"type": "string"},
        "text": {"type": "string", "description": "The last step's text."},
        "output": {"description": "The structured output, when the agent has one."},
        "finishReason": {"type": "string"},
        "totalUsage": _USAGE,
        "steps": {"type": "array", "items": _object(
            ["stepNumber", "finishReason", "usage", "text", "toolCalls", "toolResults"], {
                "stepNumber": {"type": "integer"},
                "finishReason": {"type": "string"},
                "usage": _USAGE,
                "text": {"type": "string"},
                "toolCalls": {"type": "array", "items": {"type": "object"}},
                "toolResults": {"type": "array", "items": {"type": "object"}},
            })},
        "responseMessages": {"type": "array", "items": {"type": "object"}, "description": "ModelMessage[]"},
        "pendingApprovals": {"type": "array", "items": {"type": "object"}},
        "error": {"type": "string"},
    },
})  # fmt: skip


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of every route."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "durable-harness chat API", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/health": {"get": {"security": [], "responses": {"200": {"description": "The app is up."}}}},
            "/api/chat": {
                "post": {
                    "summary": "Start a chat turn and stream it.",
                    "requestBody": _body(
                        {
                            "type": "object",
                            "required": ["messages"],
                            "properties": {
                                "id": {"type": "string", "minLength": 1, "maxLength": MAX_CHAT_ID},
                                "messages": {"type": "array", "minItems": 1, "items": _UI_MESSAGE},
                                "trigger": {
                                    "type": "string",
                                    "enum": ["submit-message", "regenerate-message"],
                                    "description": "A regenerate starts a new run for the last user "
                                    "message instead of returning the run a retried submit gets.",
                                },
                                "messageId": {
                                    "type": "string",
                                    "minLength": 1,
                                    "maxLength": MAX_CHAT_ID,
                                    "description": "With a regenerate: the assistant message it "
                                    "replaces (the same one again is a retry: the same run).",
                                },
                            },
                            "additionalProperties": {
                                "description": "Call options (the AI SDK's `body` fields), validated "
                                "by the agent's `call_options` model; a bad one is a 400 naming it."
                            },
                        }
                    ),
                    "responses": {"200": _SSE, **_ERRORS},
                }
            },
            "/api/chat/{runId}/stream": {
                "get": {
                    "summary": "Replay and follow a run's stream from an absolute (or, if negative, tail) index; "
                    "by chat id, the stream of the chat's run in progress.",
                    "parameters": [
                        *_PATH_RUN_OR_CHAT,
                        _param("startIndex", "query", {"type": "integer"}, required=False),
                    ],
                    "responses": {
                        "200": _SSE,
                        "204": {"description": "By chat id without startIndex: nothing to resume."},
                        **_ERRORS,
                    },
                }
            },
            "/api/runs": {
                "get": {
                    "summary": "The caller's runs, newest first, a page at a time (only the caller's own runs).",
                    "parameters": _LIST_PARAMETERS,
                    "responses": {
                        "200": {"description": "A page of runs.", "content": _RUN_LIST},
                        **_ERRORS,
                        "501": {**_ERROR, "description": "This server's run store cannot list runs."},
                    },
                }
            },
            "/api/runs/{runId}": {
                "get": {
                    "summary": "A run's status, result and pending approvals.",
                    "parameters": _PATH_RUN,
                    "responses": {"200": {"description": "The run.", "content": _JSON_OBJECT}, **_ERRORS},
                }
            },
            "/api/runs/{runId}/result": {
                "get": {
                    "summary": "The result of a run that ended or paused: response messages, steps, text, "
                    "structured output, total usage (409 while it runs).",
                    "parameters": _PATH_RUN,
                    "responses": {"200": {"description": "The run's result.", "content": _RESULT}, **_ERRORS},
                }
            },
            "/api/runs/{runId}/cancel": {
                "post": {
                    "summary": "Cancel a run; its stream ends with `finish`.",
                    "parameters": _PATH_RUN,
                    "responses": {"200": {"description": "Cancelled.", "content": _JSON_OBJECT}, **_ERRORS},
                }
            },
            "/api/runs/{runId}/approvals": {
                "post": {
                    "summary": "Answer a paused run's approvals; starts the continuation run.",
                    "parameters": _PATH_RUN,
                    "requestBody": _body(_object(["approvals"], {"approvals": {"type": "array", "items": _ANSWER}})),
                    "responses": {"202": {"description": "The continuation run.", "content": _JSON_OBJECT}, **_ERRORS},
                }
            },
            "/api/runs/{runId}/events/{name}": {
                "post": {
                    "summary": "Deliver an event to a run (kept until a tool waits for it; resumes a waiting run).",
                    "parameters": [*_PATH_RUN, _EVENT_NAME],
                    "requestBody": _EVENT_BODY,
                    "responses": {"202": _DELIVERED, **_ERRORS, "410": _ERROR},
                }
            },
            "/hooks/events/{token}": {
                "post": {
                    "summary": "Deliver an event through the signed URL a tool handed out (no other credentials).",
                    "security": [],
                    "parameters": [_param("token", "path", _STRING)],
                    "requestBody": _EVENT_BODY,
                    "responses": {"202": _DELIVERED, **_ERRORS, "410": _ERROR},
                }
            },
        },
    }
