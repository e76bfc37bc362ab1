"""S3's responses shaped as botocore shapes them: header members and ``<Error>``.

Only the shapes of the operations :mod:`.s3` serves, copied from botocore's S3 model (a test
compares them with the model, so a botocore upgrade that adds a member shows up there). The
parsing rules are botocore's ``RestXMLParser``'s: a member appears only when its header does,
booleans are ``text == "true"``, integers ``int``, timestamps tz-aware ``datetime``s.

``xml.etree`` (3 ms of imports) is imported on first use: reads and writes, the S3 calls on a
chat function's path, parse no XML unless they fail.
"""

from __future__ import annotations

import http.client
from contextlib import suppress
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "DELETE_OBJECT_HEADERS",
    "GET_OBJECT_HEADERS",
    "PUT_OBJECT_HEADERS",
    "is_200_error",
    "parse_error",
    "parse_headers",
    "parse_timestamp",
]


def _headers(spec: str) -> tuple[tuple[str, str, str], ...]:
    """``"Member:header:kind ..."`` as ``(member, lower-case header, kind)`` triples."""
    return tuple((m, h, k) for m, h, k in (item.split(":") for item in spec.split()))


_CHECKSUMS = (
    "ChecksumCRC32:x-amz-checksum-crc32:s ChecksumCRC32C:x-amz-checksum-crc32c:s "
    "ChecksumCRC64NVME:x-amz-checksum-crc64nvme:s ChecksumSHA1:x-amz-checksum-sha1:s "
    "ChecksumSHA256:x-amz-checksum-sha256:s ChecksumSHA512:x-amz-checksum-sha512:s "
    "ChecksumMD5:x-amz-checksum-md5:s ChecksumXXHASH64:x-amz-checksum-xxhash64:s "
    "ChecksumXXHASH3:x-amz-checksum-xxhash3:s ChecksumXXHASH128:x-amz-checksum-xxhash128:s "
    "ChecksumType:x-amz-checksum-type:s"
)
_SSE = (
    "SSECustomerAlgorithm:x-amz-server-side-encryption-customer-algorithm:s "
    "SSECustomerKeyMD5:x-amz-server-side-encryption-customer-key-md5:s "
    "SSEKMSKeyId:x-amz-server-side-encryption-aws-kms-key-id:s"
)

PUT_OBJECT_HEADERS = _headers(
    f"Expiration:x-amz-expiration:s ETag:etag:s {_CHECKSUMS} "
    f"ServerSideEncryption:x-amz-server-side-encryption:s VersionId:x-amz-version-id:s {_SSE} "
    "SSEKMSEncryptionContext:x-amz-server-side-encryption-context:s "
    "BucketKeyEnabled:x-amz-server-side-encryption-bucket-key-enabled:b Size:x-amz-object-size:i "
    "RequestCharged:x-amz-request-charged:s"
)
"""PutObject's output members located in headers."""

GET_OBJECT_HEADERS = _headers(
    "DeleteMarker:x-amz-delete-marker:b AcceptRanges:accept-ranges:s Expiration:x-amz-expiration:s "
    "Restore:x-amz-restore:s LastModified:last-modified:t ContentLength:content-length:i ETag:etag:s "
    f"{_CHECKSUMS} MissingMeta:x-amz-missing-meta:i VersionId:x-amz-version-id:s "
    "CacheControl:cache-control:s ContentDisposition:content-disposition:s "
    "ContentEncoding:content-encoding:s ContentLanguage:content-language:s ContentRange:content-range:s "
    "ContentType:content-type:s Expires:expires:t WebsiteRedirectLocation:x-amz-website-redirect-location:s "
    f"ServerSideEncryption:x-amz-server-side-encryption:s Metadata:x-amz-meta-:m {_SSE} "
    "BucketKeyEnabled:x-amz-server-side-encryption-bucket-key-enabled:b StorageClass:x-amz-storage-class:s "
    "RequestCharged:x-amz-request-charged:s ReplicationStatus:x-amz-replication-status:s "
    "PartsCount:x-amz-mp-parts-count:i TagCount:x-amz-tagging-count:i ObjectLockMode:x-amz-object-lock-mode:s "
    "ObjectLockRetainUntilDate:x-amz-object-lock-retain-until-date:t "
    "ObjectLockLegalHoldStatus:x-amz-object-lock-legal-hold:s ObjectLockEventHold:x-amz-object-lock-event-hold:s "
    "ObjectLockEventHoldDurationDays:x-amz-object-lock-event-hold-duration-days:i "
    "ObjectLockEventHoldDurationYears:x-amz-object-lock-event-hold-duration-years:i"
)
"""GetObject's output members located in headers (``m``: the ``x-amz-meta-`` map)."""

DELETE_OBJECT_HEADERS = _headers(
    "DeleteMarker:x-amz-delete-marker:b VersionId:x-amz-version-id:s RequestCharged:x-amz-request-charged:s"
)
"""DeleteObject's output members (all in headers)."""


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 (XML) or RFC 1123 (header) time as a tz-aware ``datetime`` (UTC when the text
    names no zone), equal to the ``datetime`` botocore's parser returns."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        try:
            value = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            value = datetime.fromtimestamp(float(text), UTC)  # botocore accepts epoch seconds too
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _scalar(kind: str, text: str) -> Any:
    if kind == "b":
        return text == "true"
    if kind == "i":
        return int(text)
    if kind == "t":
        return parse_timestamp(text)
    return text


def parse_headers(members: tuple[tuple[str, str, str], ...], headers: dict[str, str]) -> dict[str, Any]:
    """The output members ``members`` that ``headers`` (lower-case names) carry, typed.

    ``Expires`` follows botocore's S3 customisation: its raw text is also kept as
    ``ExpiresString``, and it is left out when it is not a valid time.
    """
    out: dict[str, Any] = {}
    for member, header, kind in members:
        if kind == "m":
            out[member] = {name[len(header) :]: value for name, value in headers.items() if name.startswith(header)}
            continue
        text = headers.get(header)
        if text is None:
            continue
        if member == "Expires":
            out["ExpiresString"] = text
            with suppress(ValueError, OverflowError):
                out[member] = parse_timestamp(text)
            continue
        out[member] = _scalar(kind, text)
    return out


def _tag(element: Any) -> str:
    tag: str = element.tag
    return tag.rsplit("}", 1)[-1]  # drop the namespace, as botocore does


def _xml(body: bytes) -> Any:
    """The root element of ``body``; raises ``ValueError`` for anything but well-formed XML."""
    import xml.etree.ElementTree as ET

    try:
        parser = ET.XMLParser(target=ET.TreeBuilder(), encoding="utf-8")
        parser.feed(body)
        return parser.close()
    except ET.ParseError as exc:
        raise ValueError(f"invalid XML from S3: {exc}") from None


def is_200_error(body: bytes) -> bool:
    """Whether a 200 answer to a call whose output is not a stream is an error in disguise: an
    ``<Error>`` document, or XML cut short (botocore turns both into a retryable 500)."""
    if not body:
        return False
    try:
        return _tag(_xml(body)) == "Error"
    except ValueError:
        return True


def _nodes(element: Any) -> dict[str, Any]:
    """botocore's ``_replace_nodes``: children as ``{tag: text}`` (nested elements as dicts; a
    repeated tag keeps its first occurrence's text; an empty element is ``None``)."""
    out: dict[str, Any] = {}
    for child in element:
        name = _tag(child)
        if name not in out:
            out[name] = _nodes(child) if len(child) else child.text
    return out


def parse_error(status: int, body: bytes) -> dict[str, Any]:
    """The ``Error`` of an S3 error answer, as botocore parses it.

    ``<Error>`` (S3's form): every child but ``RequestId``/``HostId`` (botocore keeps those in the
    ``ResponseMetadata`` only). ``<ErrorResponse><Error>`` (other rest-xml services): its fields
    over empty ``Code``/``Message``. No body, or not XML: the status as the code (``"404"``) and
    its reason as the message.
    """
    if body:
        try:
            root = _xml(body)
        except ValueError:
            root = None
        if root is not None:
            fields = _nodes(root)
            if _tag(root) == "Error":
                fields.pop("RequestId", None)
                fields.pop("HostId", None)
                return fields
            error: dict[str, Any] = {"Code": "", "Message": ""}
            nested = fields.get("Error")
            if isinstance(nested, dict):
                error.update(nested)
            return error
    return {"Code": str(status), "Message": http.client.responses.get(status, "")}
