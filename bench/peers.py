"""The kit beside its peers: the same paced model, the same tool-loop turn, the same measurements.

Systems (versions of ``/work/shared/reference/peers-bench.md``, ``bench/requirements-peers.txt``):

* **the kit**: ``ToolLoopAgent`` on ``OpenAIChatModel``, durable on the local kit's storage (SQLite +
  file log) against ``agent.generate()`` in memory;
* **LangGraph** with ``SqliteSaver`` (``durability="async"``, its default, and ``"sync"``) against
  the same graph without a checkpointer;
* **DBOS with Pydantic AI** on PostgreSQL (Debian's, started here on loopback in a temporary data
  folder, ``fsync=on``, stopped after whatever happens) against ``agent.run()`` outside a workflow.

The peers run in their own virtual environment, ``bench/.venv-peers`` (made by ``make
bench-peers-setup``, or by this script when missing); a peer that cannot be installed or started
is reported so, and the others go on. The model is the paced OpenAI-compatible server
(``_paced_model.py``) in its own process; every system reads it over loopback HTTP. Measured per
system: the durable overhead per step ((durable - non-durable) / steps, medians of ABBA rounds),
storage writes and bytes per step. Each system's guarantee is printed next to its figures. The
best peer's overhead is recorded for ``make bench``'s "best peer" column (``report_peer``).

Not measured here (see bench/README.md): per-chunk latency of a peer's durable stream, and what
repeats after a kill mid-turn (peers-bench.md has both from the independent measurement).

    .venv/bin/python bench/peers.py [--steps 20] [--deltas 20] [--rate 1000] [--rounds 5] [--only kit,langgraph]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import machine, median, table
from _paced_model import model_name, model_requests, paced_server
from _peer_drivers import KILL_AT, TOOL_LOG_ENV, note_tool_call, repeats
from _targets import report_peer

BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".venv-peers"
REQUIREMENTS = BENCH / "requirements-peers.txt"
PG_PORT = 8185  # within this worktree's port range (PORTBASE 8180)
CRASH_STEPS = 9  # the crash test's turn: 8 tool calls, then the answer
GUARANTEES = {
    "kit": "every chunk is durable before a client sees it; a crash repeats only the step in flight; "
    "finished tools are never re-run",
    "LangGraph (async)": "checkpoints written while the next step runs: the last step can be lost on a crash; "
    "tokens are not persisted (no resumable stream)",
    "LangGraph (sync)": "a checkpoint per superstep before the next starts; tokens not persisted",
    "DBOS + Pydantic AI": "model requests are DBOS steps (recorded in Postgres); plain function tools are "
    "re-run on recovery unless made steps; streams only through write_stream (not measured)",
}


def ensure_venv() -> str | None:
    """Create ``bench/.venv-peers`` from ``requirements-peers.txt`` when missing; None if it works,
    else what failed."""
    marker = VENV / ".installed"
    if marker.exists() and marker.read_text() == REQUIREMENTS.read_text():
        return None
    print(f"installing the peers into {VENV} (once) ...", flush=True)
    steps = [[sys.executable, "-m", "venv", str(VENV)],
             [str(VENV / "bin/python"), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)]]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode:
            return f"{' '.join(step[:4])} failed: {(done.stderr or done.stdout).strip()[-400:]}"
    (VENV / ".gitignore").write_text("*\n")
    marker.write_text(REQUIREMENTS.read_text())
    return None


def pg_bin() -> Path | None:
    """Debian's PostgreSQL server binaries (installed with apt when missing and root)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing Debian's postgresql ...", flush=True)
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], env=env, capture_output=True, check=False)
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """PostgreSQL on loopback in a temporary data folder (as the ``postgres`` user when root: it
    refuses to run as root); yields its URL; stopped and removed after, whatever happens."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    tmp = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data = tmp / "data"
    try:
        if as_user:
            shutil.chown(tmp, "postgres", "postgres")

        def run(*cmd: str) -> None:
            done = subprocess.run([*as_user, *cmd], capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"{cmd[0]} failed: {(done.stderr or done.stdout).strip()[-400:]}")

        run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-c listen_addresses=127.0.0.1 -p {PG_PORT} -k {tmp} -c fsync=on -c synchronous_commit=on"
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(tmp / "log"), "-w", "-o", options, "start")
        try:
            yield f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kit(base: str, args: argparse.Namespace) -> dict[str, Any]:
    """The kit's arms (step_cost.py's code: the same turn, memory against the local kit)."""
    from _common import MotoAws
    from step_cost import Arms, http_agent

    with MotoAws() as aws, tempfile.TemporaryDirectory() as tmp:
        arms = Arms(lambda: http_agent(base, args.steps, args.deltas, args.rate), aws, Path(tmp))
        try:
            order = ["memory", "local"]
            for arm in order:
                arms.run(arm, counted=False)
            for r in range(args.rounds):
                for arm in order if r % 2 == 0 else order[::-1]:
                    arms.run(arm, counted=True)
        finally:
            arms.close()
        calls = arms.calls["local"]
        seconds = {arm: [turn["seconds"] for turn in arms.turns[arm]] for arm in order}
    # step_cost's timer labels an append by where it happened ("log.append (at a boundary)"): count them all
    written = ("store.save", "log.append", "store.create", "store.claim")
    writes = sum(v for k, v in calls.items() if k.split(" (")[0] in written)
    return {"system": "kit", "steps": args.steps,
            "medians": {"plain": median(seconds["memory"]), "durable": median(seconds["local"])},
            "rows_per_step": writes / args.rounds / args.steps, "bytes_per_step": None}  # fmt: skip


def kit_crash(phase: str, data: Path, base: str) -> None:
    """``--kit-crash``: the crash test's kit side, a durable turn on the local kit's storage in
    ``data``: ``run`` creates it (the tool kills this process), ``resume`` drives it to its end."""
    import asyncio

    from _common import lookup_tool, user_turn
    from durable_harness import ToolLoopAgent, step_count_is
    from durable_harness.models.openai import OpenAIChatModel
    from durable_harness.runner.runner import Runner
    from durable_harness.storage.files import FileChunkLog
    from durable_harness.storage.sqlite import SqliteCheckpointStore

    model = OpenAIChatModel(model_name(deltas=20, rate=1000, tools=CRASH_STEPS - 1), base_url=base, api_key="bench")
    agent = ToolLoopAgent(model=model, tools=[lookup_tool(200, on_call=note_tool_call)],
                          stop_when=[step_count_is(CRASH_STEPS)])  # fmt: skip
    runner = Runner(agent, SqliteCheckpointStore(data / "runs.sqlite3"), FileChunkLog(data / "chunks"),
                    flush_interval=0.01, flush_burst=2)  # fmt: skip
    if phase == "run":
        run_id = runner.create_run(user_turn()).run_id
        (data / "run_id").write_text(run_id)
    else:
        run_id = (data / "run_id").read_text()

    async def drive() -> None:
        while not (await runner.run_slice(run_id, budget_seconds=None)).terminal:
            pass

    asyncio.run(drive())


def crash_test(system: str, base: str, db: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Kill ``system``'s process as its 6th tool call starts (5 finished), resume it in a new
    process, and count what ran again."""
    tool_log = tmp / f"{system}-tools.log"
    env = os.environ | {TOOL_LOG_ENV: str(tool_log)}

    def cmd(phase: str) -> list[str]:
        if system == "kit":
            me = str(Path(__file__).resolve())
            return [sys.executable, me, "--kit-crash", phase, "--data", db, "--base-url", base]
        return [str(VENV / "bin/python"), str(BENCH / "_peer_drivers.py"), system, "--base-url", base, "--db", db,
                "--steps", str(CRASH_STEPS), "--crash", phase]  # fmt: skip

    model_requests(base, reset=True)
    run = subprocess.run(cmd("run"), env=env | {"BENCH_CRASH": "run"}, capture_output=True, text=True,
                         timeout=args.timeout, check=False, cwd=BENCH)  # fmt: skip
    if run.returncode != -9:
        raise RuntimeError(f"the run was not killed by its tool (exit {run.returncode}): {run.stderr.strip()[-400:]}")
    resume = subprocess.run(cmd("resume"), env=env, capture_output=True, text=True, timeout=args.timeout,
                            check=False, cwd=BENCH)  # fmt: skip
    if resume.returncode:
        raise RuntimeError(f"the resume failed (exit {resume.returncode}): {resume.stderr.strip()[-400:]}")
    return repeats(str(tool_log), [int(r["step"]) for r in model_requests(base)])


def peer(system: str, base: str, db: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one peer's driver in the peers' environment; its figures."""
    cmd = [str(VENV / "bin/python"), str(BENCH / "_peer_drivers.py"), system, "--base-url", base, "--db", db,
           "--steps", str(args.steps), "--deltas", str(args.deltas), "--rate", str(args.rate),
           "--rounds", str(args.rounds)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False, cwd=BENCH)
    if done.returncode:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-600:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def rows_of(result: dict[str, Any]) -> list[tuple[str, float, float, Any, Any]]:
    """(arm, ms/step, added ms/step, writes/step, bytes/step) of one system."""
    m, steps = result["medians"], result["steps"]
    plain = m["plain"]
    arms = [(k, v) for k, v in m.items() if k != "plain"]
    out = []
    for arm, seconds in arms:
        name = result["system"] if len(arms) == 1 else f"{result['system']} ({arm})"
        out.append((name, seconds * 1000 / steps, (seconds - plain) * 1000 / steps,
                    result.get("rows_per_step"), result.get("bytes_per_step")))  # fmt: skip
    return out


def main() -> None:
    """Measure every system that runs; print the table; record the best peer."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds for each peer's driver")
    parser.add_argument("--only", default="kit,langgraph,dbos")
    parser.add_argument("--no-crash", action="store_true", help="skip the kill-mid-turn test")
    parser.add_argument("--kit-crash", choices=["run", "resume"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kit_crash:
        kit_crash(args.kit_crash, Path(args.data), args.base_url)
        return
    only = set(args.only.split(","))
    print(f"peers: {machine()}")
    results: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    venv_error = ensure_venv() if only - {"kit"} else None
    with paced_server() as base, tempfile.TemporaryDirectory() as tmp:
        crashes: dict[str, dict[str, Any]] = {}

        def crash(name: str, system: str, db: str) -> None:
            if args.no_crash:
                return
            try:
                crashes[name] = crash_test(system, base, db, Path(tmp), args)
            except Exception as exc:  # reported, the others go on
                failures[f"{name}, kill mid-turn"] = str(exc)

        if "kit" in only:
            results.append(kit(base, args))
            (Path(tmp) / "kit").mkdir()
            crash("kit", "kit", str(Path(tmp) / "kit"))
        if "langgraph" in only:
            try:
                if venv_error:
                    raise RuntimeError(venv_error)
                results.append(peer("langgraph", base, str(Path(tmp) / "checkpoints.sqlite"), args))
                crash("LangGraph (async)", "langgraph", str(Path(tmp) / "crash.sqlite"))
            except Exception as exc:  # a peer that fails is reported, the others go on
                failures["LangGraph"] = str(exc)
        if "dbos" in only:
            try:
                if venv_error:
                    raise RuntimeError(venv_error)
                with postgres() as url:
                    results.append(peer("dbos", base, url, args))
                    crash("DBOS + Pydantic AI", "dbos", url)
            except Exception as exc:
                failures["DBOS + Pydantic AI"] = str(exc)
    print(f"\n{args.steps}-step tool-loop turn, {args.deltas} deltas per step at {args.rate:g}/s from the "
          f"paced HTTP model; each system against its own non-durable arm, {args.rounds} ABBA rounds, "
          "medians:\n")  # fmt: skip
    rows = [row for r in results for row in rows_of(r)]
    print(table(["system", "ms/step", "added ms/step", "writes/step", "bytes/step", "guarantee"],
                [[*r[:3], "—" if r[3] is None else r[3], "—" if r[4] is None else r[4], GUARANTEES.get(r[0], "")]
                 for r in rows]))  # fmt: skip
    print(
        "\nwrites/step: the kit, its storage write calls (checkpoint saves and log appends); LangGraph, rows "
        "added to checkpoints + writes; DBOS, Postgres write transactions (its idle background ones "
        "subtracted); bytes/step: LangGraph's rows, DBOS's WAL."
    )
    for r in results:
        if "version" in r:
            print(f"  {r['system']}: {r['version']}" + (f"; idle write transactions/s {r['idle_commits_per_s']:.0f}"
                                                        if "idle_commits_per_s" in r else ""))  # fmt: skip
    if crashes:
        print(f"\nkilled (SIGKILL) as the {KILL_AT}th tool call of a {CRASH_STEPS}-step turn starts ({KILL_AT - 1} "
              "finished, 1 in flight), then resumed in a new process; what ran again:\n")  # fmt: skip
        print(table(["system", "finished tool calls run again", "the one in flight run again",
                     "model calls repeated", "tool executions in all"],
                    [[name, c["finished_tools_rerun"], "yes" if c["in_flight_rerun"] else "no",
                      c["model_calls_repeated"], c["tool_calls"]] for name, c in crashes.items()]))  # fmt: skip
    for name, why in failures.items():
        print(f"\n{name}: NOT MEASURED: {why}")
    peers = [r for r in rows if not r[0].startswith("kit")]
    if peers:
        best = min(peers, key=lambda r: r[2])
        report_peer("step.overhead.local", f"{best[0]} {best[2]:+.1f} ms/step")


if __name__ == "__main__":
    main()
