"""Authentication, run isolation, and the run API (status, cancel, approvals without a chat client)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import ApprovalSecret
from durable_harness.demo import SAVED_NOTES, build_demo_agent
from durable_harness.errors import StorageError
from durable_harness.server.auth import IamAuth, TokenAuth, authenticator_from_env, parse_token_hashes
from durable_harness.server.local import LocalKit, build_local_kit
from durable_harness.server.resume import NOTHING_TO_RESUME

from tests.support import gated_agent, parse_sse_body, serve, user_message

ALICE, BOB = "alice-token-1234", "bob-token-5678"
HASHES = ",".join(
    f"{name}:{hashlib.sha256(token.encode()).hexdigest()}" for name, token in [("alice", ALICE), ("bob", BOB)]
)


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def kit(tmp_path: Path) -> LocalKit:
    agent = build_demo_agent(delay=0, approval_secret=ApprovalSecret.from_value("s3cret-" + "0" * 32))
    return build_local_kit(agent, tmp_path / "data", authenticator=TokenAuth.from_entries(HASHES))


@pytest.fixture
def url(kit: LocalKit) -> Iterator[str]:
    with serve(kit.app) as base:
        yield base


def chat(url: str, text: str, token: str = ALICE) -> httpx.Response:
    body = json.dumps({"messages": [user_message(text)]})
    return httpx.post(f"{url}/api/chat", content=body, headers=auth(token), timeout=10)


def test_token_entries_and_modes() -> None:
    assert set(parse_token_hashes(HASHES).values()) == {"alice", "bob"}
    with pytest.raises(ValueError, match="sha256"):
        parse_token_hashes("alice:not-a-digest")
    with pytest.raises(ValueError, match="AUTH_TOKENS_SECRET"):
        authenticator_from_env({"AUTH_MODE": "token"})
    with pytest.raises(ValueError, match="token, iam or none"):
        authenticator_from_env({"AUTH_MODE": "open"})


def test_requests_without_valid_credentials_get_401(url: str) -> None:
    body = json.dumps({"messages": [user_message("hi")]})
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {ALICE}"}):
        response = httpx.post(f"{url}/api/chat", content=body, headers=headers)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    run_id = chat(url, "hi").headers["x-workflow-run-id"]
    assert httpx.get(f"{url}/api/chat/{run_id}/stream").status_code == 401
    assert httpx.get(f"{url}/api/runs/{run_id}").status_code == 401
    assert httpx.get(f"{url}/health").status_code == 200  # the readiness check needs no token


def test_another_principals_run_is_not_found(url: str) -> None:
    run_id = chat(url, "hi", ALICE).headers["x-workflow-run-id"]
    assert httpx.get(f"{url}/api/chat/{run_id}/stream", headers=auth(ALICE)).status_code == 200
    for method, path in [
        ("GET", f"/api/chat/{run_id}/stream?startIndex=0"),
        ("GET", f"/api/runs/{run_id}"),
        ("POST", f"/api/runs/{run_id}/cancel"),
        ("POST", f"/api/runs/{run_id}/approvals"),
    ]:
        response = httpx.request(method, url + path, headers=auth(BOB), content=b'{"approvals":[]}')
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "run_not_found"


def test_status_of_a_finished_run(url: str) -> None:
    post = chat(url, "What is the weather in Rome?")
    run_id = post.headers["x-workflow-run-id"]
    status = httpx.get(f"{url}/api/runs/{run_id}", headers=auth(ALICE)).json()
    assert status["status"] == "finished" and status["finishReason"] == "stop"
    assert status["chunkCount"] == len(parse_sse_body(post.content)) and status["pendingApprovals"] == []
    assert httpx.get(f"{url}/api/runs/not-a-run", headers=auth(ALICE)).status_code == 400


def test_cancel_a_live_run(tmp_path: Path) -> None:
    kit = build_local_kit(build_demo_agent(delay=0.05), tmp_path / "slow")
    announced: list[tuple[str, str, str]] = []

    def announce(state: Any, kind: str) -> None:  # deployed: EventPublisher.publish
        announced.append((state.run_id, state.status, kind))
        raise StorageError("the bus is unavailable")  # best effort: the cancel stands anyway

    kit.service.announce = announce
    with (
        serve(kit.app) as url,
        httpx.stream(
            "POST", f"{url}/api/chat", content=json.dumps({"messages": [user_message("tell me something")]}), timeout=10
        ) as post,
    ):
        run_id = post.headers["x-workflow-run-id"]
        stream = post.iter_raw()
        next(stream)  # the run is streaming
        cancelled = httpx.post(f"{url}/api/runs/{run_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        rest = b"".join(stream)
        chunks = parse_sse_body(httpx.get(f"{url}/api/chat/{run_id}/stream").content)
        again = httpx.post(f"{url}/api/runs/{run_id}/cancel")
    assert chunks[-1] == {"type": "finish", "finishReason": "other"}
    assert [c["type"] for c in chunks].count("finish") == 1
    assert rest.endswith(b"data: [DONE]\n\n")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"  # idempotent
    assert announced == [(run_id, "cancelled", "Run Cancelled")]  # once: not for the second cancel


def test_approvals_of_a_run_without_a_chat_client(url: str) -> None:
    SAVED_NOTES.clear()
    paused = chat(url, "Please save a note: call the plumber").headers["x-workflow-run-id"]
    status = httpx.get(f"{url}/api/runs/{paused}", headers=auth(ALICE)).json()
    assert status["status"] == "awaiting_tool_approval"
    (pending,) = status["pendingApprovals"]
    assert pending["toolName"] == "save_note" and pending["approvalId"] == f"approval-{pending['toolCallId']}"

    def answer(body: Any) -> httpx.Response:
        return httpx.post(f"{url}/api/runs/{paused}/approvals", json=body, headers=auth(ALICE))

    assert answer({"approvals": [{"approvalId": "approval-nope", "approved": True}]}).json()["error"]["code"] == (
        "unknown_approval"
    )
    assert answer({"approvals": "yes"}).status_code == 400
    assert SAVED_NOTES == {}
    started = answer({"approvals": [{"approvalId": pending["approvalId"], "approved": True}]})
    assert started.status_code == 202
    new_run = started.json()["runId"]
    chunks = parse_sse_body(httpx.get(url + started.json()["stream"], headers=auth(ALICE)).content)
    assert chunks[0]["messageId"] == status["messageId"]  # streams into the same assistant message
    assert any(c["type"] == "tool-output-available" and c["toolCallId"] == pending["toolCallId"] for c in chunks)
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert SAVED_NOTES and httpx.get(f"{url}/api/runs/{new_run}", headers=auth(ALICE)).json()["status"] == "finished"
    assert answer({"approvals": [{"approvalId": pending["approvalId"], "approved": True}]}).status_code == 409


def test_openapi_document(url: str) -> None:
    document = httpx.get(f"{url}/openapi.json").json()
    assert document["openapi"].startswith("3.1") and "/api/runs/{runId}/approvals" in document["paths"]
    result = document["paths"]["/api/runs/{runId}/result"]["get"]["responses"]["200"]
    assert {"text", "steps", "responseMessages", "totalUsage"} <= set(
        result["content"]["application/json"]["schema"]["required"]
    )


def test_the_openapi_document_requires_the_message_fields_the_server_requires(url: str) -> None:
    post = httpx.get(f"{url}/openapi.json").json()["paths"]["/api/chat"]["post"]
    message = post["requestBody"]["content"]["application/json"]["schema"]["properties"]["messages"]["items"]
    assert set(message["required"]) == {"id", "role", "parts"}
    for field in message["required"]:  # each one the server refuses a message without
        sent = {k: v for k, v in user_message("hi").items() if k != field}
        response = httpx.post(f"{url}/api/chat", content=json.dumps({"messages": [sent]}), headers=auth(ALICE))
        assert response.status_code == 400 and field in response.json()["error"]["message"], field
    assert message["properties"]["parts"]["items"]["required"] == ["type"]


def test_a_405_names_the_allowed_methods(url: str) -> None:
    for method, path, allow in [
        ("GET", "/api/chat", "POST, OPTIONS"),
        ("DELETE", "/api/runs/wrun_" + "0" * 26, "GET, OPTIONS"),
        ("GET", "/api/runs/wrun_" + "0" * 26 + "/cancel", "POST, OPTIONS"),
        ("POST", "/health", "GET, OPTIONS"),
    ]:
        response = httpx.request(method, url + path, headers=auth(ALICE))
        assert response.status_code == 405 and response.headers["allow"] == allow, path
        assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_paused_run_can_be_cancelled_and_then_not_answered(url: str) -> None:
    paused = chat(url, "Please save a note: water the plants").headers["x-workflow-run-id"]
    before = httpx.get(f"{url}/api/chat/{paused}/stream", headers=auth(ALICE)).content
    cancelled = httpx.post(f"{url}/api/runs/{paused}/cancel", headers=auth(ALICE))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert httpx.get(f"{url}/api/chat/{paused}/stream", headers=auth(ALICE)).content == before  # log unchanged
    status = httpx.get(f"{url}/api/runs/{paused}", headers=auth(ALICE)).json()
    assert status["status"] == "cancelled" and status["pendingApprovals"] == []
    answer = {"approvals": [{"approvalId": "approval-call_demo_0", "approved": True}]}
    response = httpx.post(f"{url}/api/runs/{paused}/approvals", json=answer, headers=auth(ALICE))
    assert response.status_code == 409 and response.json()["error"]["code"] == "not_paused"


# --- iam mode ------------------------------------------------------------------------------------


def iam_context(**iam: Any) -> dict[str, str]:
    """The header the Lambda Web Adapter forwards for a SigV4-signed Function URL request."""
    return {"x-amzn-request-context": json.dumps({"authorizer": {"iam": iam}})}


def test_the_local_server_refuses_iam_mode_unless_a_test_allows_it(tmp_path: Path) -> None:
    # The real CLI: it exits before serving, and says why.
    env = {**os.environ, "AUTH_MODE": "iam"}
    for name in ("AUTH_IAM_ALLOW_LOCAL", "AGENT"):
        env.pop(name, None)
    command = [sys.executable, "-m", "durable_harness", "serve", "--data-dir", str(tmp_path), "--port", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "AUTH_MODE=iam" in done.stderr and "Function URL" in done.stderr
    # The chat function's local branch (no RUNS_TABLE) refuses it too; the deployed one does not.
    with pytest.raises(ValueError, match="AUTH_IAM_ALLOW_LOCAL"):
        authenticator_from_env({"AUTH_MODE": "iam"}, default_mode="none", local=True)
    assert isinstance(authenticator_from_env({"AUTH_MODE": "iam"}), IamAuth)
    allowed = {"AUTH_MODE": "iam", "AUTH_IAM_ALLOW_LOCAL": "1"}
    assert isinstance(authenticator_from_env(allowed, default_mode="none", local=True), IamAuth)


def test_the_local_server_refuses_an_approval_secret_under_32_bytes_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT", "TOOL_APPROVAL_SECRET_ARN")}
    env["TOOL_APPROVAL_SECRET"] = "not-32-bytes"
    command = [sys.executable, "-m", "durable_harness", "serve", "--data-dir", str(tmp_path), "--port", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "the approval secret (TOOL_APPROVAL_SECRET) is 12 bytes; it must be at least 32 random bytes "
        "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    ]
    assert "not-32-bytes" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "context",
    [
        '{"authorizer":{"iam":[1]}}',
        '{"authorizer":{"iam":"arn:aws:iam::1:user/x"}}',
        '{"authorizer":[{"iam":{}}]}',
        '{"authorizer":5}',
        "[1]",
        '"text"',
        "null",
        '{"authorizer":{"iam":{"userArn":5}}}',
        '{"authorizer":{"iam":{"userArn":["a"],"callerId":{"x":1}}}}',
        '{"authorizer":{"iam":{"userArn":"  "}}}',
    ],
)
def test_a_malformed_request_context_is_401_not_500(tmp_path: Path, context: str) -> None:
    kit = build_local_kit(build_demo_agent(delay=0), tmp_path / "data", authenticator=IamAuth())
    with serve(kit.app) as base:
        body = json.dumps({"messages": [user_message("hi")]})
        response = httpx.post(f"{base}/api/chat", content=body, headers={"x-amzn-request-context": context})
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthorized"


def test_assumed_role_sessions_are_principals_unless_keyed_by_role(tmp_path: Path) -> None:
    role = "arn:aws:sts::111122223333:assumed-role/Analysts"
    session_a, session_b = iam_context(userArn=f"{role}/alice"), iam_context(userArn=f"{role}/bob")
    other_role = iam_context(userArn="arn:aws:sts::111122223333:assumed-role/Admins/alice")
    for principal, b_sees_a in (("caller", False), ("role", True)):
        auth = authenticator_from_env({"AUTH_MODE": "iam", "AUTH_IAM_PRINCIPAL": principal})
        kit = build_local_kit(build_demo_agent(delay=0), tmp_path / principal, authenticator=auth)
        with serve(kit.app) as base:
            body = json.dumps({"messages": [user_message("hi")]})
            run_id = httpx.post(f"{base}/api/chat", content=body, headers=session_a).headers["x-workflow-run-id"]
            assert httpx.get(f"{base}/api/runs/{run_id}", headers=session_a).status_code == 200
            assert httpx.get(f"{base}/api/runs/{run_id}", headers=session_b).status_code == (200 if b_sees_a else 404)
            assert httpx.get(f"{base}/api/runs/{run_id}", headers=other_role).status_code == 404
        expected = role if principal == "role" else f"{role}/alice"
        assert kit.runner.load(run_id).principal == expected
    # A caller id of an assumed role is "<role id>:<session>"; keyed by role, the session goes.
    assert IamAuth("role").authenticate(iam_context(callerId="AROAEXAMPLE:alice")) == "AROAEXAMPLE"
    assert IamAuth().authenticate(iam_context(callerId="AROAEXAMPLE:alice")) == "AROAEXAMPLE:alice"
    user = "arn:aws:iam::111122223333:user/alice"
    assert IamAuth("role").authenticate(iam_context(userArn=user)) == user  # not a role: unchanged
    with pytest.raises(ValueError, match="AUTH_IAM_PRINCIPAL"):
        authenticator_from_env({"AUTH_MODE": "iam", "AUTH_IAM_PRINCIPAL": "session"})


def test_simultaneous_cancels_all_answer_200_and_the_run_has_one_finish(tmp_path: Path) -> None:
    kit = build_local_kit(build_demo_agent(delay=0.05), tmp_path / "slow")
    with (
        serve(kit.app) as url,
        httpx.stream(
            "POST", f"{url}/api/chat", content=json.dumps({"messages": [user_message("tell me something")]}), timeout=10
        ) as post,
    ):
        run_id = post.headers["x-workflow-run-id"]
        stream = post.iter_raw()
        next(stream)  # the run is streaming
        barrier = threading.Barrier(10)

        def cancel(_: int) -> httpx.Response:
            barrier.wait(timeout=10)  # all ten requests leave together
            return httpx.post(f"{url}/api/runs/{run_id}/cancel", timeout=30)

        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(cancel, range(10)))
        rest = b"".join(stream)
        chunks = parse_sse_body(httpx.get(f"{url}/api/chat/{run_id}/stream").content)
    assert [(a.status_code, a.json()["status"]) for a in answers] == [(200, "cancelled")] * 10
    assert [c["type"] for c in chunks].count("finish") == 1
    assert chunks[-1] == {"type": "finish", "finishReason": "other"}
    assert rest.endswith(b"data: [DONE]\n\n")


def test_another_principals_chat_never_resumes(tmp_path: Path) -> None:
    gate = threading.Event()
    kit = build_local_kit(gated_agent(gate), tmp_path / "gated", authenticator=TokenAuth.from_entries(HASHES))
    body = json.dumps({"id": "shared-chat", "messages": [user_message("hi")]})
    with (
        serve(kit.app) as url,
        httpx.stream("POST", f"{url}/api/chat", content=body, headers=auth(ALICE), timeout=10) as post,
    ):
        # Bob names the same chat id while Alice's run in it is in progress: his chat has nothing.
        bob = httpx.get(f"{url}/api/chat/shared-chat/stream?startIndex=0", headers=auth(BOB), timeout=10)
        bob_later = httpx.get(f"{url}/api/chat/shared-chat/stream?startIndex=2", headers=auth(BOB), timeout=10)
        with httpx.stream(
            "GET", f"{url}/api/chat/shared-chat/stream?startIndex=0", headers=auth(ALICE), timeout=10
        ) as alice:
            gate.set()
            assert parse_sse_body(alice.read()) == parse_sse_body(post.read())
        assert alice.headers["x-workflow-run-id"] == post.headers["x-workflow-run-id"]
    assert bob.status_code == 200 and bob.content == NOTHING_TO_RESUME
    assert bob_later.content == NOTHING_TO_RESUME and "x-workflow-run-id" not in bob.headers
