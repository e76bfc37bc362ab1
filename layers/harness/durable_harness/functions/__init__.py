"""The Lambda functions' composition roots and handler bodies; each ``functions/*/app.py`` of the
repository only names its own (with the module-level Powertools Logger and Metrics, which these
receive). This package is above the adapters and the HTTP app (``aws``, ``server``): it composes
them.

Each is built from one :class:`~durable_harness.settings.Settings` over
:func:`durable_harness.aws.runtime.function_parts` (the adapters, the agent, its runner):

* :class:`.handlers.SliceFunction`: one time slice of a run (the state machine's ``RunSlice``);
* :class:`.handlers.FinalizerFunction`: the failure path, which ends a run as ``failed`` (decision D2);
* :class:`.trigger.TriggerFunction`: a run per "Start Run" event (decision D9), and "Run Event"
  deliveries to waiting runs (decision D16);
* :func:`.chat.chat_app`: the deployed chat function's ASGI app (locally
  :func:`durable_harness.server.local.local_kit`).

A handler body's settings, adapters and runner are built at the container's first invocation (an
import without ``RUNS_TABLE``, as tests and tools do, builds nothing); what it runs is imported
with its module, at the function's INIT (the functions freeze what their load made,
``gc.freeze``), not at its first invocation.
"""
