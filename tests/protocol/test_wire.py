"""The wire models' build policy: the chunk and part types marked ``RARE`` are built on first use, and
a turn that goes well (text, reasoning, a tool call, over real HTTP) never needs one of them, so that
deferring them cuts cold-start work instead of moving it into the first request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol import ui_chunks as uc
from durable_harness.wire import RARE

ROOT = Path(__file__).resolve().parents[2]

TURN = """
import json, sys, tempfile, httpx
from durable_harness.demo import build_demo_agent
from durable_harness.protocol import harness_parts as hp, ui_chunks as uc
from durable_harness.server.local import build_local_kit
from tests.support import parse_sse_body, serve

kinds = [*uc.UIChunkModel.__subclasses__(), *hp.HarnessPartModel.__subclasses__()]
rare = [c for c in kinds if c.model_config.get("defer_build")]
built_at_import = [c.__name__ for c in rare if c.__pydantic_complete__]
kit = build_local_kit(build_demo_agent(delay=0), tempfile.mkdtemp())
question = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What is the weather in Paris?"}]}
with serve(kit.app) as url:
    body = httpx.post(f"{url}/api/chat", content=json.dumps({"messages": [question]}), timeout=30).content
types = sorted({c["type"] for c in parse_sse_body(body)})
print(json.dumps({"rare": len(rare), "built_at_import": built_at_import, "types": types,
                  "built_by_the_turn": [c.__name__ for c in rare if c.__pydantic_complete__]}))
"""


def test_rare_types_are_built_on_first_use_and_a_good_turn_needs_none() -> None:
    done = subprocess.run([sys.executable, "-c", TURN], capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["rare"] >= 15 and result["built_at_import"] == []
    assert {"reasoning-delta", "tool-input-available", "tool-output-available", "text-delta", "finish"} <= set(
        result["types"]
    )
    assert result["built_by_the_turn"] == []


def test_a_rare_type_validates_and_encodes_like_any_other() -> None:
    assert uc.ErrorChunk.model_config == {**uc.StrictWireModel.model_config, **RARE}
    chunk = uc.parse_ui_chunk({"type": "error", "errorText": "boom"})
    assert isinstance(chunk, uc.ErrorChunk) and uc.encode_ui_chunk(chunk) == '{"type":"error","errorText":"boom"}'
    part = hp.decode_part('{"type":"error","error":"boom"}')
    assert isinstance(part, hp.ErrorPart) and json.loads(hp.encode_part(part)) == {"type": "error", "error": "boom"}
