"""A harness program for the bridge tests: it writes what its stdin lines tell it to.

Each stdin line is a JSON object; the program writes its ``lines`` (objects as JSON, strings as
they are, ``{"rawHex": ...}`` as those bytes), after ``after`` seconds if given (a step that takes
that long), and with ``"env": true`` its environment. ``destroy`` makes it exit 0 (noting it in
the file ``--mark PATH``). ``--ignore-destroy`` and ``--ignore-eof``: a program that does not end when told to.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def write(out: object) -> None:
    if isinstance(out, dict) and "rawHex" in out:  # bytes as they are (e.g. not UTF-8)
        sys.stdout.buffer.write(bytes.fromhex(out["rawHex"]) + b"\n")
    else:
        sys.stdout.write((out if isinstance(out, str) else json.dumps(out)) + "\n")
    sys.stdout.flush()


def main() -> None:
    args = sys.argv[1:]
    mark = Path(args[args.index("--mark") + 1]) if "--mark" in args else None
    for raw in sys.stdin:
        line = json.loads(raw)
        if line["type"] == "destroy":
            if mark is not None:
                mark.write_text("destroyed")
            if "--ignore-destroy" not in args:
                sys.exit(0)
        if "after" in line:
            time.sleep(line["after"])  # the program's own work: a step that takes this long
        if line.get("env"):
            write({"type": "raw", "rawValue": dict(os.environ)})
        for out in line.get("lines", []):
            write(out)
    while "--ignore-eof" in args:
        time.sleep(3600)


if __name__ == "__main__":
    main()
