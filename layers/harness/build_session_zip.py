"""Build the code zip of the harness sessions' AgentCore runtime (``SessionRuntime=agentcore``).

    python3.12 layers/harness/build_session_zip.py --program DIR --command '["{python}", "prog.py"]' OUT.zip \\
        [--upload s3://BUCKET/PREFIX/]

``sam build`` cannot make it: SAM builds the code of functions and layers only, and neither it nor
``sam package`` knows ``AWS::BedrockAgentCore::Runtime``'s code location. So this step is run
before ``sam deploy``, and its output goes to the template's ``SessionCodeBucket`` and
``SessionCodeKey`` parameters. No container engine is needed: the runtime runs the zip with its
managed Python 3.12 on ARM64 Linux (direct code deployment).

The zip holds, at its root:

* ``agentcore_main.py`` (the entry point: ``session/agentcore_main.py``) and ``session.json``
  (``{"command": [...], "graceSeconds": N, "passEnv": [...]}``: the program's command, ``"{python}"``
  standing for the runtime's interpreter, run in ``program/``; the microVM's variables it may read);
* ``durable_harness``, ``lambda_fastpath`` (the bridge's HTTP server) and the layer's requirements
  (``requirements.txt``), installed as the layer's are (:func:`build_layer.install`: wheels for
  CPython 3.12 on aarch64) and pruned the same way; ``--requirements`` names another file, and an
  empty one installs nothing (the tests);
* ``program/``: the folder ``--program``, as it is (POSIX modes kept: AgentCore keeps them, so an
  executable program stays executable).

With ``--upload`` the zip goes to ``s3://BUCKET/PREFIX/session-<sha256 prefix>.zip`` (a new key
for new content, so that a deploy with it updates the runtime) and the two parameter values are
printed. docs/harness.md, "Deploying with AgentCore".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

import build_layer

HERE = Path(__file__).resolve().parent
ENTRY_POINT = HERE / "session" / "agentcore_main.py"
MAX_ZIP_BYTES = 250 * 1024 * 1024
"""AgentCore's limit for a direct code deployment's zip (750 MB uncompressed)."""


def stage(
    folder: Path, program: Path, command: list[str], requirements: Path, grace_seconds: float,
    pass_env: list[str] | None = None,
) -> None:
    """Lay out the zip's content in ``folder`` (emptied first)."""
    if any(line.split("#")[0].strip() for line in requirements.read_text().splitlines()):
        build_layer.install(folder, requirements)  # (also copies the library)
        build_layer.prune(folder)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        build_layer.copy_library(folder)
    shutil.copy2(ENTRY_POINT, folder / ENTRY_POINT.name)
    shutil.copytree(program, folder / "program", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    config = {"command": command, "graceSeconds": grace_seconds, "passEnv": list(pass_env or [])}
    (folder / "session.json").write_text(json.dumps(config) + "\n")


def write_zip(folder: Path, out: Path) -> str:
    """Zip ``folder`` into ``out`` with each file's POSIX mode; the zip's SHA-256."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                info = zipfile.ZipInfo(path.relative_to(folder).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (stat.S_IFREG | stat.S_IMODE(path.stat().st_mode)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())  # fixed dates: the same content, the same zip
    if out.stat().st_size > MAX_ZIP_BYTES:
        raise SystemExit(f"build_session_zip: {out} is over AgentCore's {MAX_ZIP_BYTES // 2**20} MB")
    return hashlib.sha256(out.read_bytes()).hexdigest()


def upload(out: Path, digest: str, target: str) -> tuple[str, str]:
    """Put the zip at ``target`` (``s3://BUCKET/PREFIX/``) under a key of its digest: (bucket, key)."""
    import boto3  # only for the upload

    bucket, _, prefix = target.removeprefix("s3://").partition("/")
    key = f"{prefix.strip('/') + '/' if prefix.strip('/') else ''}session-{digest[:16]}.zip"
    boto3.client("s3").upload_file(str(out), bucket, key)
    return bucket, key


def main(argv: list[str] | None = None) -> None:
    """Build (and upload) the session zip."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the zip to write")
    parser.add_argument("--program", type=Path, required=True, help="the harness program's folder")
    parser.add_argument(
        "--command", required=True, help='its command as a JSON list, run in program/ ("{python}": the interpreter)'
    )
    parser.add_argument("--requirements", type=Path, default=HERE / "requirements.txt")
    parser.add_argument(
        "--grace-seconds", type=float, default=10.0, help="how long the program has to exit after destroy"
    )
    parser.add_argument(
        "--pass-env", action="append", default=[], metavar="NAME",
        help="a variable of the microVM the program may read (repeatable; default none: a minimal environment)",
    )
    parser.add_argument("--upload", metavar="s3://BUCKET/PREFIX/", help="upload the zip there")
    args = parser.parse_args(argv)
    try:
        command = json.loads(args.command)
    except ValueError:
        command = None
    if not isinstance(command, list) or not command or not all(isinstance(part, str) for part in command):
        parser.error('--command must be a JSON list of strings, e.g. ["{python}", "notes_harness.py"]')
    if not args.program.is_dir():
        parser.error(f"--program {args.program} is not a folder")
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp) / "zip"
        stage(folder, args.program, command, args.requirements, args.grace_seconds, args.pass_env)
        digest = write_zip(folder, args.out)
    print(f"build_session_zip: {args.out}: {args.out.stat().st_size / 1e6:.1f} MB, sha256 {digest[:16]}")
    if args.upload:
        bucket, key = upload(args.out, digest, args.upload)
        print(f"SessionCodeBucket={bucket} SessionCodeKey={key}")


if __name__ == "__main__":
    main()
