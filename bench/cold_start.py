"""Cold start: import time of each function, python3.12, from the ``sam build`` output; the chat
function's first request; the layer's size.

What is measured is what Lambda runs: ``.aws-sam/build`` (``make deploy-checks`` builds it), the
functions' code from ``.aws-sam/build/<Function>`` and the layer from
``.aws-sam/build/HarnessLayer/python``, imported by python3.12 (the template's runtime).

* The layer is copied to a temporary directory and made read-only, as Lambda's ``/opt`` is, and
  Python runs with ``-B``: nothing can be cached, every module not compiled into the layer is
  compiled from source at every cold start. The layer is built for arm64: its native extension
  modules (pydantic-core, wrapt) are replaced in the copy by this machine's build of the same
  distribution and version (downloaded once with pip into ``.aws-sam/bench-native``).
* Each function is imported in fresh processes (``-S``: no site-packages, ``sys.path`` = the
  function's directory, then the layer) with the environment the template gives it (parameters
  at their defaults, resources with dummy names, ``AWS_ENDPOINT_URL`` on a closed port) plus the
  variables Lambda sets. The chat function's start script runs ``python -m serve``; its import is
  ``serve.load()``: the app (and its AWS clients) and the HTTP server, everything before the
  server binds its port. (A build from before ``serve.py`` ran ``python -m uvicorn app:app``:
  there it is ``uvicorn.main`` plus ``uvicorn.Config(...).load()``.)
* Measured inside each process: the import, as CPU time and wall time, and for the other functions
  the CPU time of the first invocation's setup (``function.parts()``: AWS clients and the agent), which a
  cold start pays too; how many modules were loaded, and how many of them had no ``.pyc`` (compiled
  at import). The verdict uses the median CPU time of the import: on this shared machine the wall
  time adds whatever else runs (several times the CPU time at a load average of 5 on 2 cores),
  while on Lambda the function has its CPU share to itself. Both are printed.
* The chat function's first request: in fresh processes, the import, then ``POST /api/chat``
  handled in-process (the ASGI app called as the server calls it) against moto, which this script
  runs and serves over HTTP on loopback (``AWS_ENDPOINT_URL``; the runs table, the chunk bucket and
  the state machine created as deployed, ``MODEL_ID=demo``): the CPU and wall time from the call to
  the response's start, and to its first body bytes when they come within a few seconds (a run
  the chat function streams itself). Every process sends a new chat (a message id of its own), so
  every POST creates a run: none is a retry of an earlier process's run. So a cut in the import
  that only moved work into the first request would show.
* Also printed: slice and chat with the layer's ``.pyc`` removed (as the layer shipped before
  build_layer.py compiled it), ``-X importtime`` self time by package, and the network connections
  each function attempts at import: none, but for the chat function's (and the slice's setup's)
  read of the approval secret (``ApprovalSecret.check``: a secret under 32 bytes stops the start),
  which here fails on the closed port, is retried, logged and left to the first approval.

Layer size: the unzipped bytes of the built layer (the sum of its files' sizes, as Lambda counts
them), by distribution, and zipped.

    .venv/bin/python bench/cold_start.py [--runs 5] [--runs-nopyc 2] [--runs-first 3] [--python PATH]
                                         [--build DIR] [--baseline-build DIR]

``--build`` measures another ``sam build`` output; ``--baseline-build`` measures a second one side by
side with it, interleaved (a copy of an older ``.aws-sam/build``, to compare).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import REPO, machine, table
from _targets import CHAT_IMPORT_MS, LAYER_BYTES, SLICE_IMPORT_MS, report

BUILD = REPO / ".aws-sam" / "build"
NATIVE_CACHE = REPO / ".aws-sam" / "bench-native"
FIRST_BODY_WAIT = 3.0
"""Seconds the first request waits for its first body bytes after the response started."""
FIRST_DONE_WAIT = 10.0
"""Seconds it then waits for the turn's last chunk (``finish``)."""
FUNCTIONS = {"slice": "SliceFunction", "chat": "ChatFunction", "finalizer": "FinalizerFunction",
             "trigger": "TriggerFunction"}  # fmt: skip

DRIVER = """
import sys, time
sys.path[:0] = [{fn!r}, {layer!r}]
import socket
attempts = []
allowed = {allowed!r}
connect_ = socket.socket.connect
def connect(self, address):
    if address in allowed:  # the first request's AWS endpoint (moto over loopback)
        return connect_(self, address)
    attempts.append(repr(address))
    raise OSError("bench: no network at import")
socket.socket.connect = connect
c0, t0 = time.process_time(), time.perf_counter()
if {chat!r} == "serve":  # run.sh: python -m serve
    import serve
    loaded = serve.load()
    import app
elif {chat!r} == "uvicorn":  # the start script before serve.py: python -m uvicorn app:app
    import uvicorn.main, uvicorn
    uvicorn.Config("app:app", host="127.0.0.1", port=8000, lifespan="on").load()
    import app
    loaded = app.app
else:
    import app
c1, t1 = time.process_time(), time.perf_counter()
setup = getattr(getattr(app, "function", None), "parts", None)  # the handler's parts, built at the first call
if setup is not None:
    setup()
c2, t2 = time.process_time(), time.perf_counter()
import importlib.util, os
files = [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
compiled = sum(1 for f in files if f.endswith(".py") and not os.path.exists(importlib.util.cache_from_source(f)))
print("BENCH", (t1 - t0) * 1000, (c2 - c1) * 1000 if setup else -1, len(attempts), len(sys.modules), compiled,
      (c1 - c0) * 1000, flush=True)
if {first!r}:
    import asyncio, json
    text = {{"type": "text", "text": "What is the weather in Paris?"}}
    # A message id of its own: the run id derives from the last message, and a run that exists (from an
    # earlier process) would make this POST a retry, which streams the stored run instead of a new one.
    body = json.dumps({{"messages": [{{"id": "u-" + os.urandom(8).hex(), "role": "user", "parts": [text]}}]}}).encode()
    scope = {{"type": "http", "asgi": {{"version": "3.0"}}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/api/chat", "raw_path": b"/api/chat", "query_string": b"", "root_path": "",
             "headers": [(b"authorization", b"Bearer bench"), (b"content-type", b"text/plain;charset=UTF-8")],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000)}}
    marks = {{}}
    async def post():
        started, first_body, done, gone = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
        given = []
        async def receive():
            if not given:
                given.append(1)
                return {{"type": "http.request", "body": body, "more_body": False}}
            await gone.wait()
            return {{"type": "http.disconnect"}}
        async def send(message):
            now = (time.process_time(), time.perf_counter())
            if message["type"] == "http.response.start":
                marks["start"], marks["status"] = now, message["status"]
                started.set()
            elif message.get("body"):
                if "body" not in marks:
                    marks["body"] = now
                    first_body.set()
                if b'"type":"finish"' in message["body"]:  # the turn's last chunk (its slice sealed the log with it)
                    marks["done"] = now
                    done.set()
        c, t = time.process_time(), time.perf_counter()
        task = asyncio.ensure_future(loaded(scope, receive, send))
        await asyncio.wait_for(started.wait(), 60)
        try:
            await asyncio.wait_for(first_body.wait(), {body_wait!r})
            await asyncio.wait_for(done.wait(), {done_wait!r})
        except TimeoutError:
            pass
        gone.set()  # the client goes: what the app does next (announce the slice, hand it over) is not measured
        task.cancel()
        await asyncio.wait({{task}}, timeout=5)
        return c, t
    c, t = asyncio.run(post())
    body_ms, body_cpu = ((marks["body"][1] - t) * 1000, (marks["body"][0] - c) * 1000) if "body" in marks else (-1, -1)
    done_ms, done_cpu = ((marks["done"][1] - t) * 1000, (marks["done"][0] - c) * 1000) if "done" in marks else (-1, -1)
    print("FIRST", marks["status"], (marks["start"][0] - c) * 1000, (marks["start"][1] - t) * 1000, body_ms, body_cpu,
          done_ms, done_cpu, flush=True)
    os._exit(0)  # not waiting for the threads of a run that was cut short
"""


STAGES = """
import gc, sys, time
sys.path[:0] = [{fn!r}, {layer!r}]
gc.disable()  # as serve.load() does
marks = [time.process_time()]
def stage():
    marks.append(time.process_time())
import asyncio
stage()
import pydantic, pydantic.main
stage()
{aws_imports}
stage()
import durable_harness, durable_harness.cli, durable_harness.server.app, durable_harness.server.service
stage()
import durable_harness.aws.runtime
stage()
import my_agent
stage()
import app
stage()
import h11, {httpd}
stage()
print("STAGES", *[(b - a) * 1000 for a, b in zip(marks, marks[1:])], flush=True)
"""
STAGE_NAMES = (
    "asyncio (and the stdlib it imports)",
    "pydantic",
    "{aws}",
    "durable_harness: the agent, messages, protocol, runner, server (their pydantic models)",
    "durable_harness.aws: the adapters",
    "the agent file (my_agent)",
    "app.py: build_app() (the AWS clients, the agent, the service)",
    "the HTTP server (h11, httpd)",
)
"""The chat function's load, cut into stages imported in this order (each stage's CPU is what it
adds to the ones before)."""
AWS_STAGES = {
    "lite": ("import http.client, botocore.exceptions",
             "the AWS clients' imports: http.client, botocore's exception classes (lambda_fastpath.aws)"),
    "botocore": ("import botocore.session, botocore.client, botocore.config", "botocore (and urllib3)"),
}  # fmt: skip
"""The third stage: what the build's AWS clients import (a build from before the lite client: botocore)."""
LITE_CLIENT_DIRS = ("lambda_fastpath/aws", "durable_harness/aws/lite")
"""Where a build's layer has the lite AWS client (the second: builds from before ``lambda_fastpath``)."""


def aws_stage(layer: Path) -> tuple[str, str]:
    """The imports and the name of the AWS-client stage of the chat function in ``layer``."""
    return AWS_STAGES["lite" if any((layer / d).is_dir() for d in LITE_CLIENT_DIRS) else "botocore"]


def httpd_module(layer: Path) -> str:
    """The chat function's HTTP server in ``layer`` (``durable_harness.server.httpd`` in a build from
    before ``lambda_fastpath``)."""
    return "lambda_fastpath.httpd" if (layer / "lambda_fastpath").is_dir() else "durable_harness.server.httpd"


def chat_stages(py: str, build: Path, layer: Path, runs: int) -> list[float]:
    """Median CPU ms of each of :data:`STAGE_NAMES`, in fresh processes."""
    fn_dir = build / FUNCTIONS["chat"]
    samples = []
    for _ in range(runs):
        code = STAGES.format(fn=str(fn_dir), layer=str(layer), aws_imports=aws_stage(layer)[0],
                             httpd=httpd_module(layer))  # fmt: skip
        done = subprocess.run([py, "-S", "-B", "-c", code], env=function_env("chat", build), capture_output=True,
                              text=True, cwd=fn_dir)  # fmt: skip
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith("STAGES ")), None)
        if done.returncode != 0 or line is None:
            raise RuntimeError(f"the chat's stages failed:\n{done.stdout}\n{done.stderr[-3000:]}")
        samples.append([float(x) for x in line.split()[1:]])
    return [statistics.median(column) for column in zip(*samples, strict=True)]


def find_python312(given: str | None) -> str:
    """A python3.12 interpreter: ``--python``, ``$PYTHON312``, pyenv's, or ``python3.12`` on PATH."""
    candidates = [given, os.environ.get("PYTHON312"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
                  shutil.which("python3.12")]  # fmt: skip
    for c in candidates:
        if c and os.path.exists(c):
            out = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
            if out.stdout.strip() == "(3, 12)":
                return c
    sys.exit("cold_start: python3.12 not found (--python PATH or PYTHON312=...): the layer is compiled for it")


def layer_of(build: Path) -> Path:
    """The layer's python/ folder in a build folder."""
    return build / "HarnessLayer" / "python"


def function_env(name: str, build: Path) -> dict[str, str]:
    """The environment of a deployed function: the template's variables plus Lambda's own (dummy values)."""
    from tests.deploy.cfn import Resolver, function_properties, load_template

    fn_dir = build / FUNCTIONS[name]
    template = load_template(build / "template.yaml")
    resolver = Resolver(template, {"AuthTokenHashes": "bench:" + hashlib.sha256(b"bench").hexdigest()})
    resolver.physical |= {
        "RunsTable": "bench-runs",
        "ChunkBucket": "bench-chunks",
        "HarnessLayer": "bench-layer",
        "ApprovalSecret": "bench-approval",  # by name: measure_first creates it in moto (any ARN gets a suffix)
    }
    resolver.attributes[("ChatFunctionUrl", "FunctionUrl")] = "https://bench.lambda-url.us-east-1.on.aws/"
    props = function_properties(template, FUNCTIONS[name])
    variables = resolver.resolve(props.get("Environment", {}).get("Variables", {}))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env |= {k: str(v) for k, v in variables.items()}
    env |= {
        "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_SESSION_TOKEN": "bench",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # any request would fail at once
        "AWS_LAMBDA_FUNCTION_NAME": f"bench-{name}", "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(props.get("MemorySize", 128)),
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12", "LAMBDA_TASK_ROOT": str(fn_dir),
        "LAMBDA_RUNTIME_DIR": "/var/runtime", "_HANDLER": str(props.get("Handler", "")),
        "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000", "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "PYTHONHASHSEED": "0",
    }  # fmt: skip
    return env


# --- the layer, as /opt/python on this machine ---------------------------------------------------


def record_owners(root: Path) -> dict[str, tuple[str, str]]:
    """Relative path -> (distribution, version), from the dist-infos' RECORD files."""
    owner: dict[str, tuple[str, str]] = {}
    for info in root.glob("*.dist-info"):
        dist, version = info.name.removesuffix(".dist-info").rsplit("-", 1)
        record = info / "RECORD"
        for row in record.read_text().splitlines() if record.exists() else []:
            owner[os.path.normpath(row.split(",")[0])] = (dist.replace("_", "-").lower(), version)
    return owner


def host_native(dist: str, version: str, py: str) -> Path:
    """This machine's wheel of ``dist==version`` for ``py``, unpacked (cached)."""
    dest = NATIVE_CACHE / f"{dist}-{version}-{platform.machine()}"
    if not dest.is_dir():
        wheels = Path(tempfile.mkdtemp(prefix="bench-native-"))
        args = ["--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:", f"{dist}=={version}"]
        subprocess.run([py, "-m", "pip", "download", *args, "-d", str(wheels)], check=True, capture_output=True)
        (wheel,) = wheels.glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest)
        shutil.rmtree(wheels)
    return dest


def layer_copy(build: Path, dest: Path, py: str, *, keep_pyc: bool = True) -> list[str]:
    """The built layer copied to ``dest``, read-only, with host-native extension modules; what was swapped."""
    ignore = None if keep_pyc else shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(layer_of(build), dest, ignore=ignore)
    arch = platform.machine()
    owners, swapped = record_owners(layer_of(build)), []
    for so in sorted(dest.rglob("*.so")):
        if arch in so.name:
            continue
        rel = os.path.normpath(str(so.relative_to(dest)))
        dist, version = owners[rel]
        stem = so.name.split(".", 1)[0]
        native = host_native(dist, version, py)
        (match,) = (native / Path(rel).parent).glob(f"{stem}.*{arch}*.so")
        so.unlink()
        shutil.copy2(match, so.parent / match.name)
        swapped.append(f"{dist} {version}")
    for path in [dest, *dest.rglob("*")]:  # read-only, like /opt
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return sorted(set(swapped))


def make_writable(root: Path) -> None:
    """Undo :func:`layer_copy`'s read-only mode, so the copy can be deleted."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


# --- imports --------------------------------------------------------------------------------------


def chat_launcher(fn_dir: Path) -> str:
    """How the chat function's start script loads the app: ``serve`` (serve.py) or, in older builds, ``uvicorn``."""
    return "serve" if (fn_dir / "serve.py").exists() else "uvicorn"


def run_import(py: str, name: str, build: Path, layer: Path, *, importtime: bool = False,
               endpoint: str | None = None) -> dict[str, Any]:  # fmt: skip
    """One fresh interpreter importing one function; its timings. With ``endpoint`` (the chat only),
    it then handles its first POST /api/chat in-process, against that AWS endpoint."""
    fn_dir = build / FUNCTIONS[name]
    env = function_env(name, build)
    allowed: list[tuple[str, int]] = []
    if endpoint is not None:
        host, port = endpoint.removeprefix("http://").split(":")
        env["AWS_ENDPOINT_URL"], allowed = endpoint, [(host, int(port))]
        env["MODEL_ID"] = "demo"  # a turn the chat function runs itself needs no model provider
    code = DRIVER.format(fn=str(fn_dir), layer=str(layer), chat=chat_launcher(fn_dir) if name == "chat" else "",
                         allowed=allowed, first=endpoint is not None, body_wait=FIRST_BODY_WAIT,
                         done_wait=FIRST_DONE_WAIT)  # fmt: skip
    args = [py, "-S", "-B", *(["-X", "importtime"] if importtime else []), "-c", code]
    t0 = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=fn_dir)
    wall = (time.perf_counter() - t0) * 1000
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"importing {name} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    _, ms, setup, attempts, modules, compiled, cpu = line.split()
    result = {"import": float(ms), "cpu": float(cpu), "setup": float(setup), "wall": wall, "attempts": int(attempts),
              "modules": int(modules), "compiled": int(compiled), "stderr": done.stderr}  # fmt: skip
    first = next((ln for ln in done.stdout.splitlines() if ln.startswith("FIRST ")), None)
    if endpoint is not None:
        if first is None:
            raise RuntimeError(f"the first request of {name} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
        _, status, post_cpu, post_ms, body_ms, body_cpu, done_ms, done_cpu = first.split()
        result |= {"status": int(status), "post_cpu": float(post_cpu), "post_ms": float(post_ms),
                   "body_ms": float(body_ms), "body_cpu": float(body_cpu), "done_ms": float(done_ms),
                   "done_cpu": float(done_cpu)}  # fmt: skip
    return result


def importtime_by_package(stderr: str) -> list[tuple[str, float]]:
    """Self time of ``-X importtime`` grouped by top-level package (stdlib as one), in ms."""
    stdlib = set(sys.stdlib_module_names)
    groups: Counter[str] = Counter()
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m:
            top = m.group(4).split(".")[0]
            groups["(stdlib)" if top in stdlib or top.startswith("_") else top] += int(m.group(1)) / 1000
    return groups.most_common()


def summary(got: list[dict[str, Any]]) -> dict[str, float]:
    """Median (and min) figures of several runs of one function."""
    return {"import": statistics.median(s["import"] for s in got), "min": min(s["import"] for s in got),
            "cpu": statistics.median(s["cpu"] for s in got), "cpu_min": min(s["cpu"] for s in got),
            "setup": statistics.median(s["setup"] for s in got), "wall": statistics.median(s["wall"] for s in got),
            "attempts": max(s["attempts"] for s in got), "modules": got[0]["modules"],
            "compiled": got[0]["compiled"]}  # fmt: skip


def measure(py: str, builds: dict[str, tuple[Path, Path]], runs: int, names: tuple[str, ...]
            ) -> dict[str, dict[str, dict[str, float]]]:  # fmt: skip
    """Median (and min) figures of ``runs`` imports of each function of each build (label to
    ``(build, layer copy)``), interleaved: build -> function -> figures."""
    samples: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for _ in range(runs):
        for label, (build, layer) in builds.items():
            for name in names:
                samples[label, name].append(run_import(py, name, build, layer))
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for (label, name), got in samples.items():
        out[label][name] = summary(got)
    return out


def measure_first(py: str, builds: dict[str, tuple[Path, Path]], runs: int) -> dict[str, dict[str, float]]:
    """The chat function's cold start through its first request, for each build (interleaved): the
    import, then POST /api/chat handled in-process against moto over loopback (the runs table, the
    chunk bucket and the state machine created as deployed; the run's execution is started, not run)."""
    from _common import MotoAws, MotoEndpoint

    samples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with MotoAws() as aws, MotoEndpoint() as endpoint:
        import boto3

        env = function_env("chat", next(iter(builds.values()))[0])
        name = env["STATE_MACHINE_ARN"].rsplit(":", 1)[1]
        definition = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}
        boto3.client("stepfunctions", region_name="us-east-1").create_state_machine(
            name=name, definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/bench")
        # The chat function reads its approval secret at start-up, as deployed (a random 48-byte key).
        boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name=env["TOOL_APPROVAL_SECRET_ARN"], SecretString=secrets.token_urlsafe(48))
        for _ in range(runs):
            for label, (build, layer) in builds.items():
                samples[label].append(run_import(py, "chat", build, layer, endpoint=endpoint.url))
        del aws
    out = {}
    for label, got in samples.items():
        out[label] = summary(got) | {
            "status": got[0]["status"],
            "post_cpu": statistics.median(s["post_cpu"] for s in got),
            "post_ms": statistics.median(s["post_ms"] for s in got),
            "total_cpu": statistics.median(s["cpu"] + s["post_cpu"] for s in got),
            "first_cpu": statistics.median(s["cpu"] + s["body_cpu"] for s in got)
            if all(s["body_ms"] >= 0 for s in got) else -1,
            "body_ms": statistics.median(s["body_ms"] for s in got) if all(s["body_ms"] >= 0 for s in got) else -1,
            "body_cpu": statistics.median(s["body_cpu"] for s in got) if all(s["body_ms"] >= 0 for s in got) else -1,
            "done_ms": statistics.median(s["done_ms"] for s in got) if all(s["done_ms"] >= 0 for s in got) else -1,
            "done_cpu": statistics.median(s["done_cpu"] for s in got) if all(s["done_ms"] >= 0 for s in got) else -1,
        }
    return out


# --- size -----------------------------------------------------------------------------------------


def sizes_by_distribution(root: Path) -> dict[str, int]:
    """Unzipped bytes per distribution (files mapped through RECORD; .pyc to their module's owner)."""
    owners = record_owners(root)
    sizes: dict[str, int] = defaultdict(int)
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        rel = os.path.normpath(str(path.relative_to(root)))
        if path.suffix == ".pyc":  # pkg/__pycache__/mod.cpython-312.pyc -> pkg/mod.py
            rel = os.path.join(os.path.dirname(os.path.dirname(rel)), path.name.split(".")[0] + ".py")
        dist = owners.get(rel, (None, ""))[0]
        if dist is None:
            top = rel.split(os.sep)[0]
            ours = top in ("durable_harness", "lambda_fastpath", "my_agent.py")
            dist = "durable-harness (this repo)" if ours else f"other: {top}"
        sizes[dist] += path.stat().st_size
    return dict(sizes)


def zipped_size(root: Path) -> int:
    """Bytes of the layer zipped with deflate (what is uploaded)."""
    with tempfile.TemporaryFile() as f:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    z.write(path, Path("python") / path.relative_to(root))
        return f.tell()


def main() -> None:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="imports per function, layer as built (median)")
    parser.add_argument("--runs-nopyc", type=int, default=2, help="imports of slice and chat, .pyc removed (median)")
    parser.add_argument("--runs-first", type=int, default=3, help="chat imports followed by a first POST (median)")
    parser.add_argument("--python", help="the python3.12 interpreter (default: found as the Makefile does)")
    parser.add_argument("--build", type=Path, default=BUILD, help="the sam build folder (default .aws-sam/build)")
    parser.add_argument("--baseline-build", type=Path, help="another sam build folder, measured side by side")
    args = parser.parse_args()
    build = args.build.resolve()
    baseline = args.baseline_build.resolve() if args.baseline_build else None
    for b in (build, baseline):
        if b is not None and not (layer_of(b).is_dir() and (b / "template.yaml").exists()):
            sys.exit(f"cold_start: no sam build output in {b}: run `make deploy-checks` (sam build) first")
    py = find_python312(args.python)

    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        built, nopyc, old = Path(tmp) / "opt-python", Path(tmp) / "opt-python-nopyc", Path(tmp) / "opt-baseline"
        swapped = layer_copy(build, built, py)
        layer_copy(build, nopyc, py, keep_pyc=False)
        builds = {"this build": (build, built)}
        if baseline is not None:
            layer_copy(baseline, old, py)
            builds = {"baseline": (baseline, old), **builds}
        try:
            measured = measure(py, builds, args.runs, tuple(FUNCTIONS))
            figures = measured["this build"]
            figures_nopyc = (measure(py, {"nopyc": (build, nopyc)}, args.runs_nopyc, ("slice", "chat"))["nopyc"]
                             if args.runs_nopyc else {})  # fmt: skip
            first = measure_first(py, builds, args.runs_first) if args.runs_first else {}
            stages = chat_stages(py, build, built, args.runs)
            profiles = {n: importtime_by_package(run_import(py, n, build, built, importtime=True)["stderr"])
                        for n in ("slice", "chat")}  # fmt: skip
        finally:
            for layer in (built, nopyc, old):
                if layer.exists():
                    make_writable(layer)

    print(f"cold_start: {machine()}")
    print(f"interpreter {py}; layer {layer_of(build)} with this machine's build of: {', '.join(swapped)}\n")
    print(f"import of each function, median of {args.runs} fresh processes (layer as built) and of "
          f"{args.runs_nopyc} for slice and chat with the layer's .pyc removed:\n")  # fmt: skip
    rows = []
    for name in FUNCTIONS:
        f, n = figures[name], figures_nopyc.get(name, {})
        rows.append([name, f["cpu"], f["import"], f["min"], f["setup"] if f["setup"] >= 0 else "-", f["wall"],
                     f"{f['modules']} ({f['compiled']})", n.get("cpu", "-"), n.get("import", "-")])  # fmt: skip
    print(table(["function", "import CPU ms p50", "import ms p50", "import ms min", "first-call setup CPU ms",
                 "process ms (incl. start-up)", "modules (compiled at import)", "no .pyc: CPU ms", "no .pyc: ms"],
                rows))  # fmt: skip
    print("\n(first-call setup: function.parts(): AWS clients and the agent, paid by the first invocation; "
          f"the chat app makes its clients at import; the chat is loaded as its start script does: "
          f"{chat_launcher(build / FUNCTIONS['chat'])})")  # fmt: skip
    print(f"network connections attempted at import: { ({n: f['attempts'] for n, f in figures.items()}) }")
    if baseline is not None:
        print(f"\nside by side, interleaved (baseline: {baseline}, chat loaded by "
              f"{chat_launcher(baseline / FUNCTIONS['chat'])}):\n")  # fmt: skip
        rows = [[name, *(f"{measured[label][name]['cpu']:.0f} (min {measured[label][name]['cpu_min']:.0f})"
                         for label in builds),
                 *(measured[label][name]["setup"] if measured[label][name]["setup"] >= 0 else "-" for label in builds),
                 *(measured[label][name]["modules"] for label in builds)]
                for name in FUNCTIONS]  # fmt: skip
        print(table(["function", *(f"{label}: import CPU ms p50" for label in builds),
                     *(f"{label}: first-call setup CPU ms" for label in builds),
                     *(f"{label}: modules" for label in builds)], rows))  # fmt: skip
    if first:
        print(f"\nchat: cold start through the first request, median of {args.runs_first} fresh processes: the import, "
              "then POST /api/chat (a new chat) handled in-process against moto over loopback (real HTTP, the "
              "process's own AWS clients), CPU and wall time from the app's call: to its response's start (the run "
              "record written), to the first body bytes (the first chunk of the run's first slice, which the "
              "function runs itself; it starts the run's execution after that chunk), and to the turn's last "
              "chunk (`finish`: the demo turn's one slice ends with it, its log sealed to S3 as it is committed):\n"
              )  # fmt: skip
        none = f"none in {FIRST_BODY_WAIT:.0f} s"

        def cell(f: dict[str, float], key: str, ms: str) -> Any:
            return f[key] if f[ms] >= 0 else none

        rows = [[label, f["cpu"], f["post_cpu"], f["post_ms"], f["status"], cell(f, "body_cpu", "body_ms"),
                 cell(f, "body_ms", "body_ms"), cell(f, "first_cpu", "body_ms"),
                 cell(f, "done_cpu", "done_ms"), cell(f, "done_ms", "done_ms")]
                for label, f in first.items()]  # fmt: skip
        print(table(["build", "import CPU ms", "to response start: CPU ms", "ms", "status",
                     "to first body bytes: CPU ms", "ms", "import + CPU to first body bytes", "to finish: CPU ms",
                     "ms"], rows))  # fmt: skip
    print(f"\nchat: where its load goes, stage by stage (garbage collector off, as serve.load() runs it; median "
          f"CPU ms of {args.runs} fresh processes):\n")  # fmt: skip
    names = [name.format(aws=aws_stage(layer_of(build))[1]) for name in STAGE_NAMES]
    print(table(["stage", "CPU ms"], [*zip(names, stages, strict=True), ["total", sum(stages)]]))
    for name, profile in profiles.items():
        print(f"\n{name}: -X importtime self time by package, ms (layer as built):")
        print(table(["package", "ms"], [[k, v] for k, v in profile[:10]]))

    layer = layer_of(build)
    dists = sizes_by_distribution(layer)
    total = sum(dists.values())
    pyc = sum(p.stat().st_size for p in layer.rglob("*.pyc"))
    n_pyc = sum(1 for _ in layer.rglob("*.pyc"))
    data = layer / "botocore" / "data"
    services = sorted(p.name for p in data.iterdir() if p.is_dir()) if data.is_dir() else []
    print(f"\nlayer: {total:,} bytes of files = {total / 1e6:.1f} MB ({total / 1048576:.1f} MiB); zipped "
          f"{zipped_size(layer) / 1e6:.1f} MB; {n_pyc:,} .pyc files, {pyc / 1e6:.1f} MB; botocore models for "
          f"{len(services)} services{': ' + ', '.join(services) if len(services) < 20 else ''}\n")  # fmt: skip
    top = sorted(dists.items(), key=lambda kv: -kv[1])[:12]
    rows = [[k, v, v / 1e6, f"{v / total:.0%}"] for k, v in top]
    print(table(["distribution", "bytes (with .pyc)", "MB", "share"], rows))

    print("\ntargets:")
    for target, name, limit, what in (
        ("cold_import.slice", "slice", SLICE_IMPORT_MS, "the handler module"),
        ("cold_import.chat", "chat", CHAT_IMPORT_MS, "the start script's load: the app, its clients, its server"),
    ):
        f = figures[name]
        detail = (f"{f['cpu']:.0f} ms CPU p50 ({what}); wall {f['import']:.0f} ms p50, {f['min']:.0f} ms min"
                  + (f"; then {f['setup']:.0f} ms CPU of first-call setup" if f["setup"] >= 0 else ""))  # fmt: skip
        if name == "chat" and "this build" in first:
            detail += f"; then {first['this build']['post_cpu']:.0f} ms CPU to answer the first POST"
        heaviest = ", ".join(f"{k} {v:.0f}" for k, v in profiles.get(name, [])[:5])
        why = f"-X importtime self time (wall, waits included), ms, the heaviest packages: {heaviest}"
        if name == "chat":  # its load cut into stages, CPU ms each (the table above)
            cut = ", ".join(f"{n.split(':')[0].split(' (')[0]} {ms:.0f}" for n, ms in zip(names, stages, strict=True))
            why = f"the chat's load by stage, CPU ms p50: {cut}; {why}"
        report(target, detail, f["cpu"] <= limit, why)
    biggest = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in top[:5])
    report("layer.size", f"{total / 1e6:.1f} MB ({total:,} bytes)", total <= LAYER_BYTES,
           f"the largest distributions: {biggest}")  # fmt: skip


if __name__ == "__main__":
    main()
