"""durable_harness: a durable AI-agent harness for AWS serverless.

Agent turns run as time-sliced executions, checkpointed and streamed through a chunk log, and
served to the Vercel AI SDK client (``useChat`` + ``WorkflowChatTransport``) unchanged.
"""

__version__ = "0.1.0"
