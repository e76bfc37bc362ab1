"""Cold start: import time of each handler module and the size of the built layer.

Import time. Each handler (functions/{slice,finalizer,trigger,chat}/app.py; the chat function's
start script runs ``python -m uvicorn app:app``, so uvicorn is imported with it) is imported in
fresh subprocesses, with the environment the template sets (dummy values) and the Lambda markers
(``AWS_LAMBDA_FUNCTION_NAME``, ``AWS_EXECUTION_ENV``) so Powertools behaves as in Lambda. The
library and its dependencies are put on ``sys.path`` as a layer would be (``-S``: no
site-packages; a copy of the layer's packages from this venv, as ``/opt/python``), in two forms:

* ``no .pyc``: as ``sam build`` ships the layer (no ``__pycache__``) on Lambda's read-only
  ``/opt``, where nothing can be cached: every cold start compiles every module it imports;
* ``with .pyc``: the same files with bytecode next to them (what shipping compiled files gives).

Printed: the median of ``--runs`` imports (measured inside the process, interpreter start-up
excluded, and the whole process), the packages that take the time (``-X importtime`` self time,
grouped), and a check that no handler opens a network connection at import.

Layer size. The unzipped bytes of ``.aws-sam/build/HarnessLayer`` (or, if absent or with
``--pip``, of the layer's requirements installed for arm64/py3.12 as ``sam build`` does), by
distribution, its zipped size, and what each remedy would bring it to.

    .venv/bin/python bench/cold_start.py [--runs 5] [--pip]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import REPO, machine, table, verdict

HANDLERS = ("slice", "finalizer", "trigger", "chat")
IMPORT_TARGET_MS = 400.0
LAYER_TARGET = 40_000_000  # "40 MB": decimal megabytes, the stricter reading (40 MiB = 41,943,040)
BUILT_LAYER = REPO / ".aws-sam" / "build" / "HarnessLayer" / "python"
LAYER_SRC = REPO / "layers" / "harness"
# The boto3 stack the Lambda Python runtime already provides.
RUNTIME_SDK = {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"}
TRACER_EXTRA = {"aws-xray-sdk", "wrapt"}
# botocore service models the harness (and Powertools' credential chain) uses.
USED_SERVICES = {"dynamodb", "s3", "stepfunctions", "events", "secretsmanager", "bedrock-runtime", "sts", "sso",
                 "sso-oidc"}  # fmt: skip


def handler_env(fn_dir: Path) -> dict[str, str]:
    """The environment of a deployed function, with dummy values (no AWS call can succeed)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT")}
    env |= {
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # any request would fail at once
        "AWS_LAMBDA_FUNCTION_NAME": f"bench-{fn_dir.name}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "LAMBDA_TASK_ROOT": str(fn_dir),
        "_HANDLER": "app.handler",
        "POWERTOOLS_SERVICE_NAME": "durable-harness",
        "POWERTOOLS_METRICS_NAMESPACE": "DurableHarness",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "RUNS_TABLE": "bench-runs",
        "CHUNK_BUCKET": "bench-chunks",
        "EVENT_BUS_NAME": "default",
        "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:bench-run",
        "MODEL_ID": "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "RUN_TTL_DAYS": "30",
        "TOOL_APPROVAL_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:bench-approval",
        "SLICE_SECONDS": "600",
        "AUTH_MODE": "token",
        "AUTH_TOKEN_HASHES": "bench:" + hashlib.sha256(b"bench").hexdigest(),
        "ALLOWED_ORIGINS": "*",
        "STREAM_WINDOW_SECONDS": "840",
        "AWS_LWA_PORT": "8000",
        "PYTHONHASHSEED": "0",
    }
    return env


DRIVER = """
import sys, time
sys.path[:0] = [{fn!r}, {layer!r}]
check = {check!r}
if check:
    import socket
    attempts = []
    real_connect = socket.socket.connect
    def connect(self, address):
        attempts.append(repr(address))
        raise OSError("bench: no network at import")
    socket.socket.connect = connect
t0 = time.perf_counter()
{pre}import app
t1 = time.perf_counter()
print("BENCH", (t1 - t0) * 1000, len(attempts) if check else -1, flush=True)
"""


def run_import(
    py: str, fn: str, layer: Path, *, check: bool = False, importtime: bool = False, write_pyc: bool = False
) -> dict[str, Any]:
    """One fresh interpreter importing one handler; its timings (and -X importtime output)."""
    fn_dir = REPO / "functions" / fn
    pre = "import uvicorn\n" if fn == "chat" else ""
    code = DRIVER.format(fn=str(fn_dir), layer=str(layer), check=check, pre=pre)
    args = [py, "-S", *([] if write_pyc else ["-B"]), *(["-X", "importtime"] if importtime else []), "-c", code]
    t0 = time.perf_counter()
    done = subprocess.run(args, env=handler_env(fn_dir), capture_output=True, text=True, cwd=fn_dir)
    wall = (time.perf_counter() - t0) * 1000
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"importing {fn} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    _, ms, attempts = line.split()
    return {"import_ms": float(ms), "wall_ms": wall, "attempts": int(attempts), "stderr": done.stderr}


def importtime_by_package(stderr: str) -> list[tuple[str, float]]:
    """Self time of ``-X importtime`` grouped by top-level package (stdlib grouped as one), in ms."""
    stdlib = set(sys.stdlib_module_names)
    groups: Counter[str] = Counter()
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if not m:
            continue
        top = m.group(4).split(".")[0]
        name = "(stdlib)" if top in stdlib or top.startswith("_") else top
        groups[name] += int(m.group(1)) / 1000
    return groups.most_common()


def make_layer_copy(dest: Path, layer_names: list[str]) -> None:
    """Copy the layer's top-level packages from this venv (no __pycache__) plus this repo's library."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in layer_names:
        src = site / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)
    shutil.copytree(LAYER_SRC / "durable_harness", dest / "durable_harness", ignore=ignore)
    shutil.copy2(LAYER_SRC / "my_agent.py", dest / "my_agent.py")


# --- layer size -------------------------------------------------------------------------------------


def build_layer_with_pip(dest: Path) -> None:
    """The layer's requirements for arm64 / Python 3.12, as sam build installs them (no .pyc), plus the library."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile", "-r",
         str(LAYER_SRC / "requirements.txt"), "--platform", "manylinux2014_aarch64", "--only-binary=:all:",
         "--python-version", "3.12", "--target", str(dest)],
        check=True,
    )  # fmt: skip
    shutil.copytree(LAYER_SRC / "durable_harness", dest / "durable_harness",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    shutil.copy2(LAYER_SRC / "my_agent.py", dest / "my_agent.py")


def sizes_by_distribution(root: Path) -> dict[str, int]:
    """Unzipped bytes per distribution (files mapped through the dist-infos' RECORD files)."""
    owner: dict[str, str] = {}
    for info in root.glob("*.dist-info"):
        dist = info.name.split("-")[0].replace("_", "-").lower()
        record = info / "RECORD"
        if record.exists():
            for row in record.read_text().splitlines():
                path = row.split(",")[0]
                owner[os.path.normpath(path)] = dist
    sizes: dict[str, int] = defaultdict(int)
    for path in root.rglob("*"):
        if path.is_file():
            rel = os.path.normpath(str(path.relative_to(root)))
            dist = owner.get(rel)
            if dist is None:
                top = rel.split(os.sep)[0]
                dist = "durable-harness (this repo)" if top in ("durable_harness", "my_agent.py") else f"other: {top}"
            sizes[dist] += path.stat().st_size
    return dict(sizes)


def botocore_data(root: Path) -> tuple[int, int]:
    """(bytes of botocore/data, bytes of the parts the harness needs: its services + top-level files)."""
    data = root / "botocore" / "data"
    total = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    used = sum(p.stat().st_size for p in data.iterdir() if p.is_file())
    for service in USED_SERVICES:
        used += sum(p.stat().st_size for p in (data / service).rglob("*") if p.is_file())
    return total, used


def zipped_size(root: Path) -> int:
    """Bytes of the layer zipped with deflate (what is uploaded)."""
    with tempfile.TemporaryFile() as f:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    z.write(path, Path("python") / path.relative_to(root))
        return f.tell()


def pyc_bytes(root: Path, py: str) -> int:
    """Bytes that compiling every module of the layer adds (compileall into a copy)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "python"
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        subprocess.run([py, "-m", "compileall", "-q", "-j", "0", str(copy)], check=False, capture_output=True)
        return sum(p.stat().st_size for p in copy.rglob("*.pyc"))


def mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


def main() -> None:
    """Measure both and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="imports per handler with .pyc (median)")
    parser.add_argument("--runs-nopyc", type=int, default=3, help="imports per handler without .pyc (median)")
    parser.add_argument("--pip", action="store_true", help="measure a pip-built layer even if .aws-sam has one")
    args = parser.parse_args()
    py = sys.executable

    with tempfile.TemporaryDirectory() as tmp:
        # --- the layer to measure ---
        if BUILT_LAYER.is_dir() and not args.pip:
            layer_dir, layer_source = BUILT_LAYER, ".aws-sam/build/HarnessLayer (sam build, arm64, py3.12)"
        else:
            layer_dir = Path(tmp) / "pip-layer"
            build_layer_with_pip(layer_dir)
            layer_source = "pip install --platform manylinux2014_aarch64 --python-version 3.12 (as sam build)"
        names = sorted(p.name for p in layer_dir.iterdir()
                       if not p.name.endswith(".dist-info") and p.name not in ("durable_harness", "my_agent.py")
                       and not p.name.endswith(".data") and p.name != "requirements.txt")  # fmt: skip

        # --- imports ---
        sim = Path(tmp) / "opt-python"
        make_layer_copy(sim, names)
        sim_pyc = Path(tmp) / "opt-python-pyc"
        make_layer_copy(sim_pyc, names)
        rows, imports, checks = [], {}, {}
        for fn in HANDLERS:
            # The first import writes the .pyc of what the handler imports (and checks the network).
            checks[fn] = run_import(py, fn, sim_pyc, check=True, write_pyc=True)["attempts"]
            forms = (("no .pyc (as shipped)", sim, args.runs_nopyc), ("with .pyc", sim_pyc, args.runs))
            for form, layer, runs in forms:
                results = [run_import(py, fn, layer) for _ in range(runs)]
                imp = statistics.median(r["import_ms"] for r in results)
                wall = statistics.median(r["wall_ms"] for r in results)
                imports[(fn, form)] = imp
                rows.append([fn, form, imp, min(r["import_ms"] for r in results), wall])
        profile = importtime_by_package(run_import(py, "slice", sim_pyc, importtime=True)["stderr"])
        profile_nopyc = dict(importtime_by_package(run_import(py, "slice", sim, importtime=True)["stderr"]))

        # --- layer size ---
        dists = sizes_by_distribution(layer_dir)
        total = sum(dists.values())
        zipped = zipped_size(layer_dir)
        disk = sum(p.lstat().st_blocks * 512 for p in layer_dir.rglob("*")) + layer_dir.stat().st_blocks * 512
        data_total, data_used = botocore_data(layer_dir)
        sdk = sum(v for k, v in dists.items() if k in RUNTIME_SDK)
        tracer = sum(v for k, v in dists.items() if k in TRACER_EXTRA)
        boto3_data = sum(p.stat().st_size for p in (layer_dir / "boto3" / "data").rglob("*") if p.is_file())
        pyc_all = pyc_bytes(layer_dir, py)
        pyc_imported = sum(p.stat().st_size for p in sim_pyc.rglob("*.pyc"))

    print(f"cold_start: {machine()}")
    print(f"interpreter {py} (Lambda runs Python 3.12 on arm64: expect other absolute figures there)\n")
    print(f"import time of each handler module, median of {args.runs} (with .pyc) / {args.runs_nopyc} (no .pyc) "
          "fresh processes:\n")  # fmt: skip
    print(table(["handler", "layer form", "import ms p50", "import ms min", "process ms p50 (incl. start-up)"], rows))
    print(f"\nnetwork connections attempted at import: {checks} (any AWS call would show here)")
    print("\nslice handler import, -X importtime self time by package (ms):")
    prof_rows = [[name, ms, profile_nopyc.get(name, 0.0)] for name, ms in profile[:12]]
    print(table(["package", "with .pyc", "no .pyc"], prof_rows))

    print(f"\nlayer: {layer_source}")
    print(f"unzipped {total:,} bytes of files = {total / 1e6:.1f} MB = {mib(total)} (target 40 MB); zipped "
          f"{zipped / 1e6:.1f} MB; disk usage (du: 4 KiB blocks per file and directory) {disk / 1e6:.1f} MB, "
          "which Lambda does not count\n")  # fmt: skip
    top = sorted(dists.items(), key=lambda kv: -kv[1])[:12]
    print(table(["distribution", "bytes", "MiB", "share"], [[k, v, v / 1048576, f"{v / total:.0%}"] for k, v in top]))
    print(f"botocore/data (service models) {data_total / 1e6:.1f} MB, of which the services used "
          f"({', '.join(sorted(USED_SERVICES))}) + top-level files {data_used / 1e6:.1f} MB; "
          f"boto3/data {boto3_data / 1e6:.1f} MB")  # fmt: skip

    options = [
        ("as built", total),
        ("without the runtime-provided SDK (boto3, botocore, s3transfer, jmespath, dateutil, six, urllib3)",
         total - sdk),
        ("botocore/data pruned to the services used, boto3/data dropped",
         total - (data_total - data_used) - boto3_data),
        ("without the [tracer] extra (aws-xray-sdk, wrapt)", total - tracer),
        ("runtime SDK + no tracer extra", total - sdk - tracer),
        ("pruned botocore/data + .pyc for every module", total - (data_total - data_used) - boto3_data + pyc_all),
        ("as built + .pyc for every module", total + pyc_all),
    ]  # fmt: skip
    print("\nwhat would bring the layer under the target:")
    print(table(["layer", "unzipped MB", "MiB", "vs 40 MB"],
                [[k, v / 1e6, v / 1048576, verdict(v <= LAYER_TARGET)] for k, v in options]))  # fmt: skip
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    print(f".pyc of every module in the layer: {pyc_all / 1e6:.1f} MB; of the modules the four handlers import: "
          f"{pyc_imported / 1e6:.1f} MB (compiled here by Python {version})")  # fmt: skip

    print("\ntargets:")
    for form in ("no .pyc (as shipped)", "with .pyc"):
        ms = imports[("slice", form)]
        why = f"{ms:.0f} ms, x{ms / IMPORT_TARGET_MS:.2f} the target"
        print(f"  slice handler import <= {IMPORT_TARGET_MS:.0f} ms, {form}: {verdict(ms <= IMPORT_TARGET_MS, why)}")
    room, with_pyc = (LAYER_TARGET - total) / 1e6, (total + pyc_all) / 1e6
    why = f"{total / 1e6:.2f} MB, {room:.2f} MB of room; {with_pyc:.1f} MB with .pyc of every module"
    print(f"  layer <= 40 MB unzipped: {verdict(total <= LAYER_TARGET, why)}")


if __name__ == "__main__":
    main()
