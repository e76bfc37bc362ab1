"""``make deploy``: build the stack with python3.12 and deploy it with the kit's own SAM CLI.

    python scripts/deploy.py [--dry-run] [--guided] [--sam PATH] [--config samconfig.toml]

1. Finds a python3.12 (``sam build`` needs the functions' runtime on ``PATH``): ``$PYTHON312``,
   then ``python3.12`` on ``PATH``, then ``~/.pyenv/versions/3.12*/bin/python3.12``.
2. ``sam build`` (its options from ``samconfig.toml``: cached, parallel, no container).
3. ``sam deploy --guided`` the first time, ``sam deploy`` after: "the first time" is a
   ``samconfig.toml`` whose ``[default.deploy.parameters]`` records no ``region``, which the
   guided deploy saves there with the stack's other answers (``--guided`` forces it).

``sam`` is the one ``make sam-setup`` installs in ``.venv-sam`` (the versions the deploy checks
use). ``--dry-run`` prints the commands instead of running them. Exit status: that of the first
command that fails, 1 when something is missing (said on stderr).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Missing(Exception):
    """Something the deploy needs is not there; the message says what to do."""


def python312(environ: dict[str, str]) -> Path:
    """The python3.12 to build with (see the module docstring)."""
    candidates = [environ.get("PYTHON312", "")]
    candidates.append(shutil.which("python3.12", path=environ.get("PATH")) or "")
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True)
    for candidate in filter(None, candidates):
        try:
            version = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
        except OSError:
            continue
        if version.returncode == 0 and version.stdout.strip() == "3.12":
            return Path(candidate)
    raise Missing(
        "no python3.12 found (sam build needs the functions' runtime on PATH): install Python 3.12, "
        "or set PYTHON312=/path/to/python3.12"
    )


def first_deploy(config: Path) -> bool:
    """True when ``config`` records no deployed Region yet (no guided deploy has saved one)."""
    if not config.exists():
        return True
    with config.open("rb") as handle:
        settings = tomllib.load(handle)
    deploy = settings.get("default", {}).get("deploy", {}).get("parameters", {})
    return not deploy.get("region")


def commands(sam: Path, config: Path, guided: bool) -> list[list[str]]:
    """``sam build`` and ``sam deploy [--guided]`` with this config file."""
    deploy = [str(sam), "deploy", "--config-file", str(config)] + (["--guided"] if guided else [])
    return [[str(sam), "build", "--config-file", str(config), "--template", str(ROOT / "template.yaml")], deploy]


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """Build and deploy (or print what would run); the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--guided", action="store_true", help="sam deploy --guided even if a Region is recorded")
    parser.add_argument("--sam", type=Path, default=ROOT / ".venv-sam" / "bin" / "sam", help="the SAM CLI")
    parser.add_argument("--config", type=Path, default=ROOT / "samconfig.toml", help="the SAM CLI config file")
    args = parser.parse_args(argv)
    env = dict(os.environ if environ is None else environ)
    try:
        if not args.sam.exists():
            raise Missing(f"no SAM CLI at {args.sam}: run `make sam-setup` first (make deploy does)")
        python = python312(env)
    except Missing as exc:
        print(f"deploy: {exc}", file=sys.stderr)
        return 1
    guided = args.guided or first_deploy(args.config)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("SAM_CLI_TELEMETRY", "0")
    print(f"deploy: python3.12 {python}; " + ("first deploy: guided (the answers are saved to "
          f"{args.config.name})" if guided else f"Region recorded in {args.config.name}: sam deploy"))  # fmt: skip
    for command in commands(args.sam, args.config, guided):
        print(f"deploy: PATH={python.parent}:$PATH " + " ".join(command), flush=True)
        if args.dry_run:
            continue
        status = subprocess.run(command, env=env, cwd=ROOT, check=False).returncode
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
