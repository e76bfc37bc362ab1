"""The lite DynamoDB client returns and raises what boto3 does, operation by operation.

Two identical tables on one moto (served over loopback HTTP): boto3 works on one, the lite
client on the other, with the same arguments; results and errors must be equal once the table
name is swapped back (and ``ResponseMetadata``, which carries per-request ids, left aside).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from durable_harness.aws import DynamoCheckpointStore
from durable_harness.ports import StoredRun

from tests.lambda_fastpath.aws.conftest import REGION
from tests.motoserver import create_runs_table

A, B = "runs-boto3", "runs-lite"


@pytest.fixture
def pair(make_lite: Callable[[str], Any]) -> tuple[Any, Any]:
    """(boto3 client, lite client), each with its own copy of the runs table."""
    ddb = boto3.client("dynamodb", region_name=REGION)
    for table in (A, B):
        create_runs_table(ddb, table)
    return ddb, make_lite("dynamodb")


def swap(value: Any, old: str, new: str) -> Any:
    """``value`` with every string mentioning table ``old`` mentioning ``new`` instead."""
    if isinstance(value, dict):
        return {key: swap(item, old, new) for key, item in value.items() if key != "ResponseMetadata"}
    if isinstance(value, list):
        return [swap(item, old, new) for item in value]
    return value.replace(old, new) if isinstance(value, str) else value


def outcome(client: Any, operation: str, table: str, kwargs: dict[str, Any]) -> tuple[str, Any]:
    """What ``client.<operation>(**kwargs on table)`` gives: ("ok", result) or ("error", response),
    in table A's names."""
    try:
        return "ok", swap(getattr(client, operation)(**swap(kwargs, A, table)), table, A)
    except ClientError as exc:
        assert exc.operation_name == operation.title().replace("_", "")
        return "error", swap(exc.response, table, A)


def same(pair: tuple[Any, Any], operation: str, **kwargs: Any) -> tuple[str, Any]:
    """Run ``operation`` with boto3 on table A and the lite client on table B: the outcomes must be equal."""
    expected = outcome(pair[0], operation, A, kwargs)
    actual = outcome(pair[1], operation, B, kwargs)
    assert actual == expected
    return actual


def item(pk: str, sk: str, **attrs: Any) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **attrs}


def test_writes_reads_and_binary_values(pair: tuple[Any, Any]) -> None:
    """put/get/update with bytes in B and BS (sent base64, returned as bytes), maps, lists and numbers."""
    blob = bytes(range(256))
    attrs = {"data": {"B": blob}, "set": {"BS": [b"a", b"\x00\xff"]}, "n": {"N": "42"},
             "m": {"M": {"inner": {"B": b"x"}, "B": {"S": "a key named B"}}},
             "l": {"L": [{"B": b"y"}, {"S": "s"}]}}  # fmt: skip
    assert same(pair, "put_item", TableName=A, Item=item("r1", "head", **attrs)) == ("ok", {})
    _, got = same(pair, "get_item", TableName=A, Key=item("r1", "head"), ConsistentRead=True)
    assert got["Item"]["data"] == {"B": blob} and got["Item"]["m"]["M"]["B"] == {"S": "a key named B"}
    assert same(pair, "get_item", TableName=A, Key=item("r1", "missing")) == ("ok", {})
    same(pair, "put_item", TableName=A, Item=item("r1", "head", n={"N": "1"}), ReturnValues="ALL_OLD")
    _, got = same(
        pair, "update_item", TableName=A, Key=item("r1", "head"), UpdateExpression="SET #n = #n + :one, #b = :b",
        ExpressionAttributeNames={"#n": "n", "#b": "b"},
        ExpressionAttributeValues={":one": {"N": "1"}, ":b": {"B": b"z"}},
        ReturnValues="UPDATED_NEW",
    )  # fmt: skip
    assert got["Attributes"] == {"n": {"N": "2"}, "b": {"B": b"z"}}


def test_query_pages_and_order(pair: tuple[Any, Any]) -> None:
    """A paged query (Limit, LastEvaluatedKey, ExclusiveStartKey) in both directions."""
    for i in range(5):
        same(pair, "put_item", TableName=A, Item=item("r2", f"c#{i:03d}", d={"B": bytes([i])}))
    query = {"TableName": A, "KeyConditionExpression": "pk = :pk AND begins_with(sk, :c)",
             "ExpressionAttributeValues": {":pk": {"S": "r2"}, ":c": {"S": "c#"}}, "Limit": 2}  # fmt: skip
    _, first = same(pair, "query", **query, ConsistentRead=True)
    assert first["Count"] == 2 and "LastEvaluatedKey" in first
    _, second = same(pair, "query", **query, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert [i["d"]["B"] for i in second["Items"]] == [b"\x02", b"\x03"]
    same(pair, "query", **query, ScanIndexForward=False, ReturnConsumedCapacity="TOTAL")


def test_failed_condition_returns_the_item(pair: tuple[Any, Any]) -> None:
    """ConditionalCheckFailedException carries the item (ALL_OLD), binary values decoded."""
    same(pair, "put_item", TableName=A, Item=item("r3", "head", v={"N": "1"}, b={"B": b"old"}))
    status, error = same(
        pair, "put_item", TableName=A, Item=item("r3", "head"), ConditionExpression="attribute_not_exists(pk)",
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )  # fmt: skip
    assert status == "error" and error["Error"]["Code"] == "ConditionalCheckFailedException"
    assert error["Item"]["b"] == {"B": b"old"}
    same(pair, "update_item", TableName=A, Key=item("r3", "none"), UpdateExpression="SET v = :v",
         ConditionExpression="attribute_exists(pk)", ExpressionAttributeValues={":v": {"N": "2"}})  # fmt: skip


def test_cancelled_transaction_carries_its_reasons(pair: tuple[Any, Any]) -> None:
    """TransactionCanceledException with CancellationReasons (the failed item's Item decoded)."""
    same(pair, "put_item", TableName=A, Item=item("r4", "head", b={"B": b"old"}))
    writes = [
        {"Put": {"TableName": A, "Item": item("r4", "c#1")}},
        {"Update": {"TableName": A, "Key": item("r4", "head"), "UpdateExpression": "SET v = :v",
                    "ConditionExpression": "attribute_not_exists(pk)", "ExpressionAttributeValues": {":v": {"N": "1"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
    ]  # fmt: skip
    status, error = same(pair, "transact_write_items", TransactItems=writes, ClientRequestToken="t" * 32)
    assert status == "error" and error["Error"]["Code"] == "TransactionCanceledException"
    assert error["CancellationReasons"][1]["Item"]["b"] == {"B": b"old"}
    writes.pop()
    assert same(pair, "transact_write_items", TransactItems=writes)[0] == "ok"  # a token made as botocore does


def test_service_errors_and_metadata(pair: tuple[Any, Any]) -> None:
    """A missing table is the same ClientError; ResponseMetadata has botocore's keys."""
    _, error = same(pair, "get_item", TableName="nope", Key=item("x", "y"))
    assert error["Error"]["Code"] == "ResourceNotFoundException"
    metadata = pair[1].put_item(TableName=B, Item=item("r5", "head"))["ResponseMetadata"]
    assert set(metadata) == {"RequestId", "HTTPStatusCode", "HTTPHeaders", "RetryAttempts"}
    assert metadata["HTTPStatusCode"] == 200 and metadata["RetryAttempts"] == 0
    assert all(name == name.lower() for name in metadata["HTTPHeaders"])


def test_unknown_arguments_are_a_type_error(pair: tuple[Any, Any]) -> None:
    """A misspelt keyword is not dropped silently."""
    with pytest.raises(TypeError, match="Tablename"):
        pair[1].get_item(Tablename=B, Key=item("x", "y"))


def test_accepted_arguments_are_botocore_models(pair: tuple[Any, Any]) -> None:
    """Each method accepts exactly its operation's input members (botocore's model)."""
    from lambda_fastpath.aws import dynamodb as lite_ddb

    model = pair[0].meta.service_model
    for name, members in [("GetItem", lite_ddb._GET_ITEM), ("PutItem", lite_ddb._PUT_ITEM),
                          ("UpdateItem", lite_ddb._UPDATE_ITEM), ("Query", lite_ddb._QUERY),
                          ("TransactWriteItems", lite_ddb._TRANSACT_WRITE_ITEMS)]:  # fmt: skip
        assert members == set(model.operation_model(name).input_shape.members), name


def test_a_compressed_checkpoint_record_round_trips_through_the_lite_client(pair: tuple[Any, Any]) -> None:
    """Deployed, the checkpoint store runs on the lite client: a step record whose body is stored
    as zlib bytes (``B``, in a transaction) loads back the same, through either client (issue 20)."""
    boto, lite_ddb = pair
    store = DynamoCheckpointStore(B, client=lite_ddb)

    def state(steps: int) -> str:
        return json.dumps({"history": [f"{i}:" + "x" * 1_300 for i in range(steps)]}, separators=(",", ":"))

    first = store.create(StoredRun(run_id="run-1", state=state(1), status="running", version=0))
    saved = store.save(StoredRun(run_id="run-1", state=state(2), status="running", version=0), first.version)
    record = boto.get_item(TableName=B, Key={"pk": {"S": "run-1"}, "sk": {"S": "run#00000002"}})["Item"]
    assert set(record["body"]) == {"B"}
    assert DynamoCheckpointStore(B, client=lite_ddb).load("run-1") == saved
    assert DynamoCheckpointStore(B, client=boto).load("run-1") == saved
