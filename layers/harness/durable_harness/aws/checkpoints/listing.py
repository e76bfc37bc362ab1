"""A principal's runs, newest first, from the runs table's index on (principal, created_at).

The index (:data:`..table.PRINCIPAL_INDEX`, ``template.yaml``'s ``RunsTable``) holds only items with
both attributes: the run heads (records and chunk-log items have neither). It projects what a list shows
(status, chat id, meta, expiry), so a page is one ``Query`` of the caller's own partition, with no
read of a run's state. Filters (status, chat, the approval ledger's records, expired heads) are a
``FilterExpression``: DynamoDB applies ``Limit`` before it, so a filtered page may take a few
requests, and at most :data:`MAX_REQUESTS` before it returns what it has with its position.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...ports import AGENT_META, ListPosition, ListQuery, RunListing
from .._errors import aws_errors
from ..table import EXPIRES_AT, PK, PRINCIPAL_INDEX, RUN_SK, Head, item_key

MAX_REQUESTS = 5
"""Queries one page may take when filters skip many runs."""


def query_principal_runs(
    ddb: Any,
    table: str,
    principal: str,
    query: ListQuery,
    *,
    clock: Callable[[], float] = time.time,
) -> tuple[list[RunListing], ListPosition | None]:
    """The page of :meth:`~durable_harness.ports.PrincipalRuns.runs_of` through ``ddb`` (boto3)."""
    limit, after, statuses, chat_id = query.limit, query.after, query.statuses, query.chat_id
    if limit <= 0:
        return [], None
    names = {"#principal": Head.PRINCIPAL, "#pk": PK, "#expires_at": EXPIRES_AT}
    values: dict[str, Any] = {":principal": {"S": principal}, ":wrun": {"S": "wrun_"}, ":now": {"N": str(int(clock()))}}
    conditions = ["begins_with(#pk, :wrun)", "(attribute_not_exists(#expires_at) OR #expires_at > :now)"]
    if statuses is not None:
        names["#status"] = Head.STATUS
        marks = []
        for i, status in enumerate(sorted(statuses)):
            values[f":s{i}"] = {"S": status}
            marks.append(f":s{i}")
        conditions.append(f"#status IN ({', '.join(marks)})")
    if chat_id is not None:
        names["#chat_id"] = Head.CHAT_ID
        values[":chat"] = {"S": chat_id}
        conditions.append("#chat_id = :chat")
    filtered = statuses is not None or chat_id is not None
    request: dict[str, Any] = {
        "TableName": table,
        "IndexName": PRINCIPAL_INDEX,
        "KeyConditionExpression": "#principal = :principal",
        "FilterExpression": " AND ".join(conditions),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
        # One more than asked tells whether another page exists; a filter makes a read find fewer.
        "Limit": min(1000, (limit + 1) * (4 if filtered else 1)),
    }
    if after is not None:
        created_at, run_id = after
        request["ExclusiveStartKey"] = {
            Head.PRINCIPAL: {"S": principal}, Head.CREATED_AT: {"S": created_at}, **item_key(run_id, RUN_SK)
        }  # fmt: skip
    found: list[RunListing] = []
    last: dict[str, Any] | None = None
    with aws_errors(f"listing the runs of {principal!r}"):
        for _ in range(MAX_REQUESTS):
            page = ddb.query(**request)
            found += [_listing(item) for item in page.get("Items", [])]
            last = page.get("LastEvaluatedKey")
            if len(found) > limit or last is None:
                break
            request["ExclusiveStartKey"] = last
    if len(found) > limit:
        listed = found[:limit]
        return listed, (listed[-1].created_at, listed[-1].run_id)
    if last is None:
        return found, None
    return found, (last[Head.CREATED_AT]["S"], last[PK]["S"])  # the requests ran out: go on from there


def _listing(item: dict[str, Any]) -> RunListing:
    meta = item.get(Head.META, {}).get("M", {})
    agent = meta.get(AGENT_META, {}).get("S")
    return RunListing(
        run_id=item[PK]["S"],
        status=item[Head.STATUS]["S"],
        created_at=item[Head.CREATED_AT]["S"],
        chat_id=item[Head.CHAT_ID]["S"] if Head.CHAT_ID in item else None,
        agent=agent or None,
    )
