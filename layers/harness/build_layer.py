"""Build the HarnessLayer for ``sam build`` (template.yaml: ``BuildMethod: makefile``, see ``Makefile``).

    python3.12 build_layer.py OUT       # OUT is the layer's python/ folder ($ARTIFACTS_DIR/python)

1. ``pip install -r requirements.txt`` for the Lambda runtime (CPython 3.12 on arm64, wheels only,
   no bytecode) into ``OUT``, and the library (``durable_harness``, the Lambda fast path
   ``lambda_fastpath``, ``my_agent.py``) next to it.
2. Prune what no function loads (:func:`prune`): botocore's models of the AWS services the harness
   does not call (:data:`BOTOCORE_SERVICES` are kept; the template's ``AWS_DATA_PATH`` lets any other
   service load from the Lambda runtime's own botocore models), the models' documentation examples,
   and Powertools' bundled Swagger UI (the harness serves its own HTTP API).
3. Compact the kept botocore data (:func:`compact_models`): every JSON file re-written without
   indentation, and the service models without their documentation strings (botocore reads them
   only for docstrings, but those of :data:`KEPT_DOCUMENTATION`). A client's creation parses its
   service's model, its endpoint rules and botocore's endpoint data: with the text a fifth of its
   size, a cold start that makes the chat function's clients spends about 20 ms less
   (``bench/cold_start.py``). Then write botocore's endpoint data once more, with only the kept
   services' entries (:func:`trim_endpoints`), for the harness's own botocore session
   (``lambda_fastpath/botocore_session.py``): a twentieth of the full data, which the first client
   of every process parses.
4. Compile every module the functions import to bytecode (:func:`compile_layer`), with the runtime's
   Python and ``unchecked-hash`` invalidation. The layer lands on Lambda's read-only ``/opt``, where
   Python can neither write a ``.pyc`` nor trust a timestamp-based one (zip round trips do not keep
   mtimes exactly), so without this every cold start compiles every module it imports from source;
   an ``unchecked-hash`` ``.pyc`` is used as it is, and the layer never changes once published.
   Subtrees that no function imports (:data:`NOT_COMPILED`) keep their source only: they still work,
   and compile when first imported, but do not double their size in the layer.

Needs python3.12 (the runtime's version: bytecode is version-specific) and pip's access to PyPI.
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import json
import py_compile
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME = (3, 12)
# AL2023 (the python3.12 runtime) has glibc 2.34: wheels for any manylinux up to 2.34 run there.
PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64", "manylinux_2_34_aarch64")
LIBRARY = ("durable_harness", "lambda_fastpath", "my_agent.py")
"""What the layer ships of this folder: the harness, its Lambda fast path (the functions' own AWS
client, the chat function's HTTP server, the shared botocore session) and the agent file."""
RUNTIMES = "runtimes"
"""An optional folder of harness programs (``ProcessHarness``) shipped in the layer as they are
(executable bits kept); the agent file finds them at ``Path(__file__).parent / "runtimes"``."""

BOTOCORE_SERVICES = frozenset({
    "dynamodb", "s3",  # run records, checkpoints, chunk-log items; sealed segments, large appends (aws/)
    "stepfunctions", "events",  # starting and stopping runs; lifecycle events (aws/)
    "secretsmanager",  # the approval key and the auth tokens (Powertools' get_secret)
    "bedrock-runtime",  # the default model provider (models/bedrock.py)
    "sts",  # credential providers that assume a role
})  # fmt: skip
"""The AWS services whose botocore models the layer keeps (everything the harness itself calls)."""

DROPPED = (
    "aws_lambda_powertools/event_handler/openapi/swagger_ui/swagger-ui-bundle.min.js",
    "aws_lambda_powertools/event_handler/openapi/swagger_ui/swagger-ui.min.css",
)
"""Files removed from the layer: Powertools' bundled Swagger UI (1.7 MB; it is served from a CDN
when ``enable_swagger`` is given a ``swagger_base_url``)."""

NOT_COMPILED = re.compile(
    r"^(aws_lambda_powertools/event_handler/"  # Powertools' REST/GraphQL resolvers
    r"|aws_lambda_powertools/utilities/(?!parameters/|typing/|jmespath_utils/|__init__\.py)"  # all but these
    r"|pydantic/(v1|deprecated|experimental)/"  # pydantic's v1 and legacy APIs
    r"|aws_xray_sdk/|wrapt/"  # X-Ray tracing, imported only when it is on (durable_harness/aws/tracing.py)
    r")"
)
"""Paths (relative to the layer) left as source only: no function imports them."""


def install(out: Path, requirements: Path) -> None:
    """The requirements, as the runtime's wheels, and the library, into ``out`` (emptied first)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
         "--only-binary=:all:", "--implementation", "cp", "--python-version", ".".join(map(str, RUNTIME)),
         *platforms, "--target", str(out), "-r", str(requirements)],
        check=True,
    )  # fmt: skip
    copy_library(out)


def copy_library(out: Path, root: Path = HERE) -> None:
    """The library, the agent file and, when there is one, the ``runtimes/`` folder, into ``out``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*LIBRARY, RUNTIMES):
        src = root / name
        if src.is_dir():
            shutil.copytree(src, out / name, ignore=ignore)  # copy2: modes (the executable bit) kept
        elif src.exists() or name != RUNTIMES:
            shutil.copy2(src, out / name)


def prune(out: Path, services: frozenset[str] = BOTOCORE_SERVICES) -> list[str]:
    """Remove what no function loads (see the module docstring); the removed paths, relative to ``out``."""
    removed: list[str] = []

    def remove(path: Path) -> None:
        removed.append(path.relative_to(out).as_posix())
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    for cache in sorted(out.rglob("__pycache__")):  # bytecode of other interpreters, if any came in
        remove(cache)
    models = out / "botocore" / "data"
    if models.is_dir():
        for service in sorted(p for p in models.iterdir() if p.is_dir()):
            if service.name not in services:
                remove(service)
        for example in sorted(models.glob("*/*/examples-1.json")):  # documentation only
            remove(example)
    if (out / "bin").is_dir():  # console scripts pip writes (uvicorn, jp.py): nothing runs them
        remove(out / "bin")
    for rel in DROPPED:
        if (out / rel).exists():
            remove(out / rel)
    return removed


def compact_models(out: Path) -> int:
    """Re-write botocore's JSON data in ``out`` compactly, service models without documentation; the
    bytes saved. The data stays what botocore reads: same files, same keys but the ``documentation``
    and ``documentationUrl`` strings (outside :data:`KEPT_DOCUMENTATION`)."""
    saved = 0
    for path in sorted((out / "botocore" / "data").rglob("*.json*")):
        gz = path.name.endswith(".json.gz")
        if not (gz or path.name.endswith(".json")):
            continue
        before = path.stat().st_size
        data = json.loads(gzip.decompress(path.read_bytes()) if gz else path.read_bytes())
        if path.name.startswith("service-2."):
            data = _without_documentation(data)
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        path.write_bytes(gzip.compress(text, mtime=0) if gz else text)  # mtime 0: a reproducible layer
        saved += before - path.stat().st_size
    return saved


TRIMMED_ENDPOINTS = "lambda_fastpath/botocore-data/endpoints.json"
"""Where :func:`trim_endpoints` writes the endpoint data of the kept services, relative to the
layer's python/ folder (``lambda_fastpath.botocore_session`` reads it from there)."""


def trim_endpoints(out: Path) -> int:
    """Write :data:`TRIMMED_ENDPOINTS`: botocore's endpoint data in ``out`` (every partition with its
    Regions and defaults) keeping the entries of only the services whose models ``out`` keeps; its size.

    botocore keys a service's endpoint entries by the ``endpointPrefix`` of its model. The full data
    stays where it is, for every other service (any client not made by the harness's own session)."""
    models = out / "botocore" / "data"
    prefixes = set()
    for model in sorted(models.glob("*/*/service-2.json*")):
        raw = model.read_bytes()
        metadata = json.loads(gzip.decompress(raw) if model.name.endswith(".gz") else raw)["metadata"]
        prefixes.add(metadata.get("endpointPrefix") or model.parent.parent.name)
    data = json.loads((models / "endpoints.json").read_bytes())
    for partition in data["partitions"]:
        partition["services"] = {name: entry for name, entry in partition["services"].items() if name in prefixes}
    target = out / TRIMMED_ENDPOINTS
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
    return target.stat().st_size


KEPT_DOCUMENTATION = frozenset({"clientContextParams"})
"""Parts of a service model whose documentation strings botocore reads, not just shows: a client
parameter's ``documentation`` is a required key (``botocore.model.ServiceModel.client_context_parameters``
indexes it, when the endpoint ruleset of S3's every call is resolved)."""


def _without_documentation(value: object) -> object:
    # A documentation string is dropped; a member or shape *named* "documentation" (a dict) is kept.
    if isinstance(value, dict):
        return {k: v if k in KEPT_DOCUMENTATION else _without_documentation(v) for k, v in value.items()
                if not (k in ("documentation", "documentationUrl") and isinstance(v, str))}  # fmt: skip
    if isinstance(value, list):
        return [_without_documentation(v) for v in value]
    return value


def compile_layer(out: Path) -> int:
    """Write ``unchecked-hash`` bytecode next to every module outside :data:`NOT_COMPILED`; the count."""
    if sys.version_info[:2] != RUNTIME:
        raise SystemExit(
            f"build_layer: bytecode must be compiled by the runtime's Python {RUNTIME[0]}.{RUNTIME[1]}, "
            f"not {sys.version_info.major}.{sys.version_info.minor} ({sys.executable}); put python3.12 on PATH"
        )
    root = re.escape(out.as_posix().rstrip("/") + "/")
    skip = re.compile(root + NOT_COMPILED.pattern.removeprefix("^"))
    ok = compileall.compile_dir(
        str(out), quiet=1, workers=0, rx=skip, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        stripdir=str(out), prependdir="/opt/python",  # the path in tracebacks, and a build-path-free .pyc
    )  # fmt: skip
    if not ok:
        raise SystemExit("build_layer: some modules failed to compile (see above)")
    return sum(1 for _ in out.rglob("*.pyc"))


def main(argv: list[str] | None = None) -> None:
    """Install, prune, compact and compile the layer into the given folder."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the layer's python/ folder")
    parser.add_argument("--requirements", type=Path, default=HERE / "requirements.txt")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    install(out, args.requirements)
    removed = prune(out)
    saved = compact_models(out)
    trimmed = trim_endpoints(out)
    compiled = compile_layer(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"build_layer: {out}: {size / 1e6:.1f} MB, {compiled} .pyc, {len(removed)} paths pruned, "
          f"botocore data {saved / 1e6:.1f} MB smaller, the harness's endpoint data {trimmed / 1e3:.0f} KB")


if __name__ == "__main__":
    main()
