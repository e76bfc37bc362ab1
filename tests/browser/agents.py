"""Agents the browser suite serves (``--agent tests.browser.agents:<name>``).

``markdown_agent`` answers every message with the same Markdown: bold, inline and fenced code, a
list, a link, and model text that must never become HTML (a ``<script>``, an ``<img onerror>``, a
``javascript:`` link), streamed a few characters at a time as a real model would.
"""

from __future__ import annotations

from durable_harness import Agent
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step

MARKDOWN = """Here is **bold text** and `inline code`.

- first item
- second item with [a link](https://example.com/docs)

```
fenced code
```

<script>window.pwned = 'script'</script> and <img src="x" onerror="window.pwned = 'img'"> stay text.

[a bad link](javascript:window.pwned='link')"""


def _markdown(request: ModelRequest, step: int) -> list[ModelStreamPart]:
    return text_step(MARKDOWN, pieces=40)


def markdown_agent() -> Agent:
    """An agent whose every reply is :data:`MARKDOWN`, streamed in 40 pieces."""
    return Agent(model=FunctionModel(_markdown, model_id="markdown", delay=0.01))
