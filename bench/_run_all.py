"""``make bench``: run every benchmark under bench/, then print one table of every target.

Each ``bench/*.py`` not starting with ``_`` runs with its default options in its own process
(its output goes straight through), with ``BENCH_RESULTS`` pointing at a fresh directory where
the script's :func:`_targets.report` calls leave their rows. The table that ends the run has one
row per reported measurement of each target of :data:`_targets.TARGETS`, in that order; a target
no script reported is ``not measured`` (MISSED). See ``bench/_targets.py`` for the contract.

    .venv/bin/python bench/_run_all.py [--only cold_start,relay_latency] [--skip throughput]

Exit status: 1 if a script failed (its rows so far are still shown), else 0, MET or MISSED alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, table
from _targets import BY_ID, PEERS_FILE, RESULTS_ENV, TARGETS

BENCH = Path(__file__).resolve().parent


def scripts(only: set[str], skip: set[str]) -> list[Path]:
    """The benchmark scripts to run, by name."""
    found = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    return [p for p in found if (not only or p.stem in only) and p.stem not in skip]


def read_rows(results: Path) -> list[dict[str, Any]]:
    """Every row the scripts reported, in the order they were written (script by script)."""
    rows: list[dict[str, Any]] = []
    for path in sorted(results.glob("*.jsonl")):
        if path.name == PEERS_FILE:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


def read_peers(results: Path) -> dict[str, str]:
    """The best peer's figure by target id, as ``bench/peers.py`` recorded it in this run."""
    path = results / PEERS_FILE
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return {row["peer_of"]: row["best"] for row in map(json.loads, filter(str.strip, lines))}


def summary(rows: list[dict[str, Any]], failed: dict[str, int], peers: dict[str, str]) -> tuple[str, int, int]:
    """The final table, then each MISSED row's reason, and the counts of MET and MISSED rows.
    ``peers``: the best peer's figure by target id (``bench/peers.py``, when it ran in the same
    ``make bench``); "—" where none."""
    out, whys, met, missed = [], [], 0, 0
    for target in TARGETS:
        mine = [r for r in rows if r["id"] == target.id]
        peer = peers.get(target.id, "—")
        if not mine:
            out.append([target.metric, target.target, "not measured", "MISSED", peer, "-"])
            whys.append(f"{target.metric}: not measured (no script reported it: one failed, or was not run)")
            missed += 1
            continue
        for r in mine:
            ok = bool(r["met"])
            met, missed = met + ok, missed + (not ok)
            out.append([target.metric, target.target, r["measured"], "MET" if ok else "MISSED", peer, r["script"]])
            if not ok:
                whys.append(f"{target.metric} ({r['script']}): {r.get('why') or 'no reason recorded'}")
    unknown = [r for r in rows if r["id"] not in BY_ID]
    for r in unknown:  # report() refuses unknown ids; a script writing its own rows may not
        out.append([f"unknown target id {r['id']!r}", "-", r.get("measured", ""), "ERROR", "—", r.get("script", "?")])
    for name, code in failed.items():
        out.append([f"{name} failed (exit {code})", "-", "its remaining rows are missing", "ERROR", "—", name])
    text = table(["metric", "target", "measured", "status", "best peer", "script"], out)
    if whys:
        text += "\n\nWhy each MISSED row misses (the reason, and where it goes, stage by stage):\n\n"
        text += "\n".join(f"{i}. {why}" for i, why in enumerate(whys, 1))
    return text, met, missed


def add_selection(parser: argparse.ArgumentParser) -> None:
    """The ``--only`` / ``--skip`` options that :func:`selected` reads."""
    parser.add_argument("--only", default="", help="comma-separated script names (without .py) to run")
    parser.add_argument("--skip", default="", help="comma-separated script names (without .py) to skip")


def selected(args: argparse.Namespace) -> list[Path]:
    """The scripts ``--only`` / ``--skip`` select; exits saying so when none is left."""
    names = {n.strip().removesuffix(".py") for n in args.only.split(",") if n.strip()}
    skipped = {n.strip().removesuffix(".py") for n in args.skip.split(",") if n.strip()}
    todo = scripts(names, skipped)
    if not todo:
        sys.exit(f"no benchmark script matches --only {args.only!r} / --skip {args.skip!r}")
    return todo


def main() -> None:
    """Run the scripts and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_selection(parser)
    todo = selected(parser.parse_args())

    failed: dict[str, int] = {}
    timings: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-results-") as results:
        env = os.environ | {RESULTS_ENV: results}
        for script in todo:
            print(f"\n{'=' * 100}\n$ {Path(sys.executable).name} bench/{script.name}\n", flush=True)
            t0 = time.perf_counter()
            code = subprocess.run([sys.executable, str(script)], env=env, cwd=BENCH.parent, check=False).returncode
            timings.append([script.name, time.perf_counter() - t0, "ok" if code == 0 else f"exit {code}"])
            if code != 0:
                failed[script.name] = code
        rows, peers = read_rows(Path(results)), read_peers(Path(results))

    text, met, missed = summary(rows, failed, peers)
    print(f"\n{'=' * 100}\nmake bench: {machine()}\n")
    print(table(["script", "seconds", "result"], timings))
    print(f"\ntargets (bench/_targets.py): {met} MET, {missed} MISSED\n")
    print(text)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
