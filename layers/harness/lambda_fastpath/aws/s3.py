"""The S3 calls of the harness (REST-XML), with boto3's method names, arguments and results.

``put_object``, ``get_object`` and ``delete_object``: what the chunk log and
the checkpoint store call (``aws/chunklog/segments.py``, ``checkpoints/objects.py``), with the
arguments they pass and a few neighbours, and results equal to a botocore client's (the tests
compare them on the same moto). What botocore does on top of the model, done here too:

- integrity: a put sends the body's CRC32 (``x-amz-checksum-crc32``, botocore's default
  "when supported" request checksum), a get asks for the stored checksum (``x-amz-checksum-mode``)
  and checks the bytes against it; a mismatch is read again (botocore raises at ``read()``
  instead), and ``FlexibleChecksumError`` when it persists to the last attempt;
- a 200 answer holding an ``<Error>`` document, or XML cut short, is retried like a 500;
- addressing: virtual-hosted (``https://{bucket}.s3.{region}.amazonaws.com/{key}``) on AWS for a
  bucket name that is a DNS label, path-style (``{endpoint}/{bucket}/{key}``) otherwise and on a
  custom endpoint (moto, LocalStack: botocore does the same for an IP endpoint).

Not done (the harness's buckets are in its own Region and account): S3's redirects to another
Region, access points, S3 Express, multipart uploads.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO, ClassVar
from urllib.parse import quote, urlsplit

from botocore.exceptions import ClientError, FlexibleChecksumError, ParamValidationError

from . import _s3xml
from ._client import LiteClient, Response

__all__ = ["ObjectBody", "S3Client"]

_VALID_BUCKET = re.compile(r"^[a-zA-Z0-9.\-_]{1,255}$")  # botocore's check (handlers.VALID_BUCKET)
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]$")  # a bucket that can be a host label
# The response checksums botocore can check without the CRT, in its order of preference.
_RESPONSE_CHECKSUMS = ("crc32", "sha1", "sha256", "sha512")


class ObjectBody:
    """An object's bytes, read like botocore's ``StreamingBody`` (``read``, ``iter_chunks``,
    ``iter_lines``, iteration, ``close``). The bytes are already here: they were read, checked
    against their length and checksum, inside the call (so that a dropped read is retried)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._position = 0

    def read(self, amt: int | None = None) -> bytes:
        """Up to ``amt`` bytes (all that is left when ``None``); ``b""`` at the end."""
        end = len(self._data) if amt is None else min(len(self._data), self._position + amt)
        chunk = self._data[self._position : end]
        self._position = end
        return chunk

    def iter_chunks(self, chunk_size: int = 1024) -> Iterator[bytes]:
        """The rest of the bytes in chunks of ``chunk_size``."""
        while chunk := self.read(chunk_size):
            yield chunk

    def iter_lines(self, chunk_size: int = 1024, keepends: bool = False) -> Iterator[bytes]:
        """The rest of the bytes, line by line."""
        yield from self.read().splitlines(keepends)

    def __iter__(self) -> Iterator[bytes]:
        return self.iter_chunks()

    def tell(self) -> int:
        """How many bytes were read."""
        return self._position

    def close(self) -> None:
        """Nothing to release: the connection went back to its pool when the call returned."""

    def __enter__(self) -> ObjectBody:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class S3Client(LiteClient):
    """The S3 operations the harness calls, as a botocore S3 client serves them.

    ``virtual_hosted``: address buckets by host name; ``None`` decides from the endpoint as botocore
    does: by host name on AWS's own (``s3.{region}.amazonaws.com[.cn]``), path-style on any other.
    """

    _s3_signing = True
    # An object is read whole, inside its attempt (ObjectBody): the harness's objects are chunk
    # log segments (sealed at a few MB) and checkpoints, far below; a listing page (1000 keys of
    # 1 KB at most) stays under the default.
    _body_limits: ClassVar[dict[str, int]] = {"GetObject": 256 * 1024 * 1024}

    def __init__(self, *, virtual_hosted: bool | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("signing_name", "s3")
        super().__init__(**kwargs)
        parts = urlsplit(self.endpoint_url)
        if virtual_hosted is None:
            virtual_hosted = (parts.hostname or "") in (
                f"s3.{self.region}.amazonaws.com",
                f"s3.{self.region}.amazonaws.com.cn",
            )
        self._virtual_hosted = virtual_hosted
        self._scheme, self._netloc = parts.scheme, parts.netloc
        # The operation in flight on this thread, for the response checks below (the base's hooks
        # see the response only; a call runs on one thread from start to end).
        self._calls = threading.local()

    def put_object(
        self,
        *,
        Bucket: str,
        Key: str,
        Body: bytes | bytearray | memoryview | str | BinaryIO = b"",
        ContentType: str | None = None,
        IfNoneMatch: str | None = None,
        IfMatch: str | None = None,
    ) -> dict[str, Any]:
        """Write an object; ``IfNoneMatch="*"`` / ``IfMatch=etag`` make the write conditional
        (``PreconditionFailed`` when the condition does not hold)."""
        data = _bytes(Body)
        headers = {
            # botocore's default request checksum: S3 refuses the write if the bytes it got differ.
            "x-amz-checksum-crc32": base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode(),
            "x-amz-sdk-checksum-algorithm": "CRC32",
        }
        _optional(headers, "content-type", ContentType, "ContentType")
        _optional(headers, "if-none-match", IfNoneMatch, "IfNoneMatch")
        _optional(headers, "if-match", IfMatch, "IfMatch")
        response = self._call("PutObject", "PUT", Bucket, _key_path(Key), headers=headers, body=data)
        return self._result(response, _s3xml.parse_headers(_s3xml.PUT_OBJECT_HEADERS, response.headers))

    def get_object(
        self,
        *,
        Bucket: str,
        Key: str,
        Range: str | None = None,
        IfMatch: str | None = None,
        IfNoneMatch: str | None = None,
    ) -> dict[str, Any]:
        """Read an object: ``Body`` (an :class:`ObjectBody`), ``ContentLength``, ``ETag``,
        ``LastModified`` ...; ``NoSuchKey`` when there is none."""
        headers = {"x-amz-checksum-mode": "ENABLED"}  # S3 then sends the checksum it stored
        _optional(headers, "range", Range, "Range")
        _optional(headers, "if-match", IfMatch, "IfMatch")
        _optional(headers, "if-none-match", IfNoneMatch, "IfNoneMatch")
        response = self._call("GetObject", "GET", Bucket, _key_path(Key), headers=headers)
        result = self._result(response, _s3xml.parse_headers(_s3xml.GET_OBJECT_HEADERS, response.headers))
        checked = getattr(self._calls, "checksum", None)
        if checked is not None:
            result["ResponseMetadata"]["ChecksumAlgorithm"] = checked  # as botocore reports it
        result["Body"] = ObjectBody(response.body)
        return result

    def delete_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        """Delete an object (no error when there is none)."""
        response = self._call("DeleteObject", "DELETE", Bucket, _key_path(Key))
        return self._result(response, _s3xml.parse_headers(_s3xml.DELETE_OBJECT_HEADERS, response.headers))

    # --- requests ----------------------------------------------------------------------------------

    def _call(
        self,
        operation: str,
        method: str,
        bucket: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> Response:
        """One S3 request for ``bucket``, ``path`` (percent-encoded, no leading slash) in it."""
        if not isinstance(bucket, str) or not _VALID_BUCKET.match(bucket):
            raise ParamValidationError(
                report=f'Invalid bucket name "{bucket}": Bucket name must match the regex "{_VALID_BUCKET.pattern}"'
            )
        self._calls.operation, self._calls.checksum = operation, None
        if self._virtual_hosted and _DNS_BUCKET.match(bucket):
            endpoint: str | None = f"{self._scheme}://{bucket}.{self._netloc}"
            target = f"/{path}"
        else:  # path-style: a custom endpoint, or a bucket name that is no host label (dots, capitals)
            endpoint, target = None, f"/{quote(bucket, safe='')}" + (f"/{path}" if path else "")
        return self._request(operation, method, target, headers=headers, body=body, endpoint=endpoint)

    def _result(self, response: Response, parsed: dict[str, Any]) -> dict[str, Any]:
        parsed["ResponseMetadata"] = self._response_metadata(response)
        return parsed

    def _response_ok(self, response: Response) -> bool:
        """A 2xx answer is retried when an object's bytes do not match their checksum (botocore
        would raise at ``read()``; a second read is likely sound) or when a non-object answer is
        an error in disguise (botocore's ``_handle_200_error``)."""
        if self._calls.operation == "GetObject":
            try:
                self._calls.checksum = _checked_checksum(response)
            except FlexibleChecksumError:
                return False
            return True
        return not _s3xml.is_200_error(response.body)

    def _response_failed(self, response: Response) -> None:
        """After the last attempt: the checksum error, or the disguised error as the 500 botocore
        turns it into."""
        operation = self._calls.operation
        if operation == "GetObject":
            _checked_checksum(response)
        metadata = self._response_metadata(response)
        metadata["HTTPStatusCode"] = 500
        raise ClientError({"Error": _s3xml.parse_error(500, response.body), "ResponseMetadata": metadata}, operation)

    def _error_response(self, response: Response) -> dict[str, Any]:
        """botocore's S3 error: the ``<Error>`` document's fields, or the status when there is none."""
        return {"Error": _s3xml.parse_error(response.status, response.body)}


def _key_path(key: object) -> str:
    """An object key as botocore puts it in the path: ``{Key+}``, a greedy label whose ``/`` stay."""
    if not isinstance(key, str) or not key:
        raise ParamValidationError(report=f"Invalid length for parameter Key, value: {key!r}, valid min length: 1")
    return quote(key, safe="/~")


def _bytes(body: object) -> bytes:
    """A ``Body`` as bytes: bytes-like, ``str`` (UTF-8) or a readable file, as botocore takes it."""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    read = getattr(body, "read", None)
    if callable(read):
        data = read()
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)
    raise ParamValidationError(report=f"Invalid type for parameter Body, value: {body!r}, type: {type(body)}")


def _optional(headers: dict[str, str], name: str, value: object, member: str) -> None:
    if value is not None:
        headers[name] = _string(member, value)


def _string(member: str, value: object) -> str:
    if not isinstance(value, str):
        raise ParamValidationError(report=f"Invalid type for parameter {member}, value: {value!r}, type: {type(value)}")
    return value


def _checked_checksum(response: Response) -> str | None:
    """Check an object's bytes against the first checksum S3 sent that botocore checks without the
    CRT (``crc32``, ``sha1``, ``sha256``, ``sha512``): the algorithm checked, or None when none
    was sent; ``FlexibleChecksumError`` on a mismatch."""
    for algorithm in _RESPONSE_CHECKSUMS:
        expected = response.headers.get(f"x-amz-checksum-{algorithm}")
        if expected is None or "-" in expected:  # "...-3": a checksum of part checksums, not of the bytes
            continue
        if algorithm == "crc32":
            digest = zlib.crc32(response.body).to_bytes(4, "big")
        else:
            digest = hashlib.new(algorithm, response.body).digest()
        if digest != base64.b64decode(expected):
            raise FlexibleChecksumError(
                error_msg=f"Expected checksum {expected} did not match calculated checksum: "
                f"{base64.b64encode(digest).decode()}"
            )
        return algorithm
    return None
