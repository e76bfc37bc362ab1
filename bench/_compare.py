"""``make bench-compare BASE=<commit>``: every benchmark in this tree and in BASE, side by side, one table.

BASE is checked out with ``git worktree add --detach`` into a temporary directory. Each ``bench/*.py``
of this tree (``_run_all.scripts``) then runs in both trees, one after the other, the order alternating
from script to script (base then head, head then base, ...) so that the machine's drift falls on both
alike: each run with its default options, in its own process, with ``cwd`` in its tree,
``PYTHONPATH=<tree>/layers/harness:<tree>`` (the tree's own library, checked before the first run) and
``BENCH_RESULTS`` pointing at that tree's results directory (``_targets.py``'s contract). For
``cold_start.py`` the base tree gets its own ``sam build``; its chat page (gitignored) and the peers' venv
are this tree's when ``web/`` and ``bench/requirements-peers.txt`` did not change.

The table pairs the k-th report of a target in either tree: both measured texts, head/base of their
leading numbers, and a verdict in the target's direction. ``_targets.py`` records no direction, so it is
inferred from the target text: "≥" means higher is better; "≤", and any other target (a count, "do not
grow", "0 while it waits"), lower. Within the noise band (``--band``, ±15 % of the base figure by
default) the verdict is "same"; a MET/MISSED flip is shown next to it. With ``--rounds N`` each script
runs N times per tree (each round flips the order): the table shows the median round with the rounds'
range, and two ranges that overlap are "same" too (the scripts' own spread as the band).

    .venv/bin/python bench/_compare.py --base a005047 [--only cold_start,relay_latency] [--skip peers] [--rounds 2]

Exit status: 1 if a script failed in either tree, else 0.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, table
from _run_all import add_selection, read_rows, selected
from _targets import RESULTS_ENV, TARGETS

HEAD = Path(__file__).resolve().parents[1]
BAND = 0.15
MINUS, TIMES = "\u2212", "\u00d7"  # the scripts write "\u22124.95 ms" and "1.53\u00d7"
NUMBER = re.compile(rf"[-+{MINUS}]?(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?")  # 13,171 / +38.3 / 0.00089
WIDTH = 60  # measured texts are cut to this in the table (the scripts' own output has them whole)


def leading_number(text: str) -> float | None:
    """The first number in a measured text ("+38.3 ms p50" → 38.3, "$0.00089" → 0.00089), or None."""
    match = NUMBER.search(text)
    return float(match.group().replace(MINUS, "-").replace(",", "")) if match else None


def direction(target: str) -> tuple[int, str]:
    """+1 if a higher figure is better, -1 if lower; and what that was inferred from."""
    if "≥" in target or ">=" in target:
        return 1, "higher (≥)"
    if "≤" in target or "<=" in target:
        return -1, "lower (≤)"
    return -1, "lower (assumed)"


def ratio(base: float | None, head: float | None) -> str:
    """head/base, or "—" when either is missing, base is 0 or the signs differ."""
    if base is None or head is None or base == 0 or (base < 0) != (head < 0):
        return "—"
    return f"{head / base:.2f}{TIMES}"


def verdict(base: float | None, head: float | None, sign: int, band: float = BAND,
            spread: tuple[list[float], list[float]] = ([], [])) -> str:  # fmt: skip
    """The verdict: "same" within ``band`` (a fraction of |base|), or when ``spread`` (every round's
    figure of base, of head; two rounds or more each) overlaps; else "better"/"worse" in direction ``sign``."""
    if base is None or head is None:
        return "—"
    scale = abs(base) or abs(head)
    change = (head - base) / scale if scale else 0.0
    (bs, hs) = spread
    if abs(change) <= band or (len(bs) > 1 and len(hs) > 1 and min(hs) <= max(bs) and min(bs) <= max(hs)):
        return "same"
    return "better" if change * sign > 0 else "worse"


def cut(text: str) -> str:
    """``text`` on one line, at most WIDTH characters."""
    text = " ".join(text.split())
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def median_report(reports: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[float]]:
    """The report of the median round (lower median, by leading number) and every round's number."""
    numbered = sorted((n, i) for i, r in enumerate(reports) if (n := leading_number(r["measured"])) is not None)
    if not numbered:
        return (reports[0] if reports else None), []
    return reports[numbered[(len(numbered) - 1) // 2][1]], [n for n, _ in numbered]


def shown(report: dict[str, Any] | None, numbers: list[float]) -> str:
    """A measured text for the table, with the rounds' range when there are several."""
    if report is None:
        return "not measured"
    return cut(report["measured"]) + (f" [{min(numbers):g} to {max(numbers):g}]" if len(numbers) > 1 else "")


Rows = list[dict[str, Any]]


def compare(base_runs: list[Rows], head_runs: list[Rows], band: float) -> list[list[str]]:
    """One row per target report: the k-th of a target in base beside the k-th in head (each the median
    of the rounds)."""
    out = []
    for target in TARGETS:
        mine = {side: [[r for r in rows if r["id"] == target.id] for rows in runs]
                for side, runs in (("b", base_runs), ("h", head_runs))}  # fmt: skip
        sign, why = direction(target.target)
        for k in range(max(len(run) for run in mine["b"] + mine["h"]) or 1):
            b, bs = median_report([run[k] for run in mine["b"] if k < len(run)])
            h, hs = median_report([run[k] for run in mine["h"] if k < len(run)])
            nb = leading_number(b["measured"]) if b else None
            nh = leading_number(h["measured"]) if h else None
            said = verdict(nb, nh, sign, band, (bs, hs)) if b and h and b["measured"] != h["measured"] else "same"
            if b is None or h is None:
                said = "—"
            elif b["met"] != h["met"]:
                said += f" ({'MET' if b['met'] else 'MISSED'}→{'MET' if h['met'] else 'MISSED'})"
            out.append([target.metric, target.target, shown(b, bs), shown(h, hs), ratio(nb, nh), said, why,
                        (h or b or {}).get("script", "-")])  # fmt: skip
    return out


def git(*args: str, cwd: Path = HEAD) -> str:
    """The output of a git command in ``cwd``."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def prepare_base(base: Path, rev: str, sam: Path, need_build: bool) -> None:
    """Give the base worktree what make bench builds: the chat page, the peers' venv, ``sam build``."""
    static = Path("layers/harness/durable_harness/server/static")
    unchanged = subprocess.run(["git", "diff", "--quiet", rev, "--", "web"], cwd=HEAD, check=False).returncode == 0
    if (HEAD / static).is_dir() and unchanged:
        shutil.copytree(HEAD / static, base / static, dirs_exist_ok=True)
    elif (HEAD / static).is_dir():  # web/ changed since BASE: its own page, as make builds it
        subprocess.run(["make", "--no-print-directory", "web"], cwd=base, check=True)
    peers = Path("bench/.venv-peers")
    pins = Path("bench/requirements-peers.txt")
    same_pins = (HEAD / pins).read_bytes() == (base / pins).read_bytes()
    if (HEAD / peers).is_dir() and same_pins:
        (base / peers).symlink_to(HEAD / peers)
    if need_build:  # the Makefile's deploy-checks' sam build, with this tree's SAM CLI
        py312 = os.environ.get("PYTHON312", "")
        path = f"{Path(py312).parent}:{os.environ['PATH']}" if py312 else os.environ["PATH"]
        env = os.environ | {"SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1", "PATH": path}
        subprocess.run([str(sam), "build", "--cached", "--parallel", "--template", "template.yaml", "--build-dir",
                        ".aws-sam/build", "--cache-dir", ".aws-sam/cache"], cwd=base, env=env, check=True)  # fmt: skip


def tree_env(tree: Path, results: Path) -> dict[str, str]:
    """The environment of a script run in ``tree``: its own library first, its results directory."""
    path = f"{tree / 'layers' / 'harness'}:{tree}"
    return os.environ | {RESULTS_ENV: str(results), "PYTHONPATH": path}


def check_library(tree: Path, env: dict[str, str]) -> None:
    """Exit unless a process started as the runs are imports ``tree``'s durable_harness."""
    code = "import durable_harness; print(durable_harness.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True, text=True)
    found = Path(where.stdout.strip()).resolve()
    print(f"  {tree}: durable_harness from {found}")
    if not found.is_relative_to(tree.resolve()):
        sys.exit(f"bench-compare: the runs in {tree} would import {found}, not that tree's library")


def main() -> None:
    """Run every script in both trees, alternating, then print the table side by side."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the git revision compared with this tree")
    add_selection(parser)
    parser.add_argument("--band", type=float, default=BAND, help="the noise band, a fraction of the base figure")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each script per tree (median, range)")
    parser.add_argument("--sam", type=Path, default=HEAD / ".venv-sam/bin/sam", help="the SAM CLI for the base build")
    args = parser.parse_args()
    todo = selected(args)
    rev = git("rev-parse", "--short", args.base)
    head_rev = git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if git("status", "--porcelain") else "")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the base worktree
    failed: list[list[Any]] = []
    timings: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        base = Path(tmp) / "base"
        git("worktree", "add", "--detach", str(base), rev)
        try:
            prepare_base(base, rev, args.sam, any(s.stem == "cold_start" for s in todo))
            trees = {"base": base, "head": HEAD}
            results = {(side, r): Path(tmp) / f"results-{side}-{r}" for side in trees for r in range(args.rounds)}
            print(f"bench-compare: base {rev} ({base}), head {head_rev} ({HEAD})")
            for (side, r), path in results.items():
                path.mkdir()
                if r == 0:
                    check_library(trees[side], tree_env(trees[side], path))
            for r, (i, script) in itertools.product(range(args.rounds), enumerate(todo)):
                seconds: dict[str, Any] = {}
                for side in ("base", "head") if (i + r) % 2 == 0 else ("head", "base"):  # round 2 flips each order
                    path = trees[side] / "bench" / script.name
                    if not path.exists():
                        seconds[side] = "not in tree"
                        continue
                    env = tree_env(trees[side], results[side, r])
                    print(f"\n{'=' * 100}\n$ [{side}, round {r + 1}] python bench/{script.name}\n", flush=True)
                    t0 = time.perf_counter()
                    code = subprocess.run([sys.executable, str(path)], env=env, cwd=trees[side],
                                          check=False).returncode  # fmt: skip
                    seconds[side] = f"{time.perf_counter() - t0:.0f}" + ("" if code == 0 else f" (exit {code})")
                    if code != 0:
                        failed.append([f"{script.name} failed in {side} (exit {code})", side])
                timings.append([script.name, r + 1, seconds.get("base", "-"), seconds.get("head", "-")])
            runs = {side: [read_rows(results[side, r]) for r in range(args.rounds)] for side in trees}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=HEAD, check=False)

    rows = compare(runs["base"], runs["head"], args.band)
    counts = {v: sum(r[5].startswith(v) for r in rows) for v in ("same", "better", "worse")}
    print(f"\n{'=' * 100}\nmake bench-compare: base {rev}, head {head_rev}; {machine()}\n")
    print(table(["script", "round", "base seconds", "head seconds"], timings))
    print(f"\ntargets side by side: {counts['same']} same, {counts['better']} better, {counts['worse']} worse "
          f"(noise band ±{args.band:.0%} of the base's leading number; "
          "direction inferred from the target text)\n")  # fmt: skip
    errors = [[name, "-", "-", "-", "—", "ERROR", "-", side] for name, side in failed]
    print(table(["metric", "target", "base measured", "head measured", "head/base", "verdict", "better is",
                 "script"], rows + errors))  # fmt: skip
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
