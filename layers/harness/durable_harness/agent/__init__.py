"""Agents: tools, the tool-loop agent (WorkflowAgent parity), approvals and loop control.

Most users need only what :mod:`durable_harness` re-exports: ``Agent``, ``tool``, ``Tool``.
"""
