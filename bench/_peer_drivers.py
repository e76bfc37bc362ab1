"""The peers' side of ``peers.py`` (not a benchmark itself): runs in ``bench/.venv-peers``.

    bench/.venv-peers/bin/python bench/_peer_drivers.py langgraph --base-url URL --db FILE ...
    bench/.venv-peers/bin/python bench/_peer_drivers.py dbos --base-url URL --db postgresql://...

Each measures the same tool-loop turn on the paced model (``_paced_model.py``): the system's
durable arm against its own non-durable arm, in ABBA rounds, and what its storage wrote. The last
line printed is one JSON object of the figures (``peers.py`` reads it).

* ``langgraph``: ``create_react_agent`` over ``ChatOpenAI`` with ``SqliteSaver`` on a file
  (``durability="async"``, the default, and ``"sync"``) against the same graph without a
  checkpointer; rows and bytes of the ``checkpoints`` and ``writes`` tables per step.
* ``dbos``: Pydantic AI's ``DBOSAgent`` (model requests as DBOS steps) on PostgreSQL against
  ``agent.run()`` outside a workflow; write transactions (transaction ids assigned) and WAL bytes
  per step, DBOS's idle background writes (measured over a second) subtracted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import statistics
import sys
import time
from typing import Any

from _paced_model import model_name

TOOL_LOG_ENV = "BENCH_TOOL_LOG"
KILL_AT = 6  # the crash test kills the process as the 6th tool call starts: 5 finished, 1 in flight


def note_tool_call(query: str) -> None:
    """The crash test's record of a tool execution (``$BENCH_TOOL_LOG``, one line each, appended
    before the tool does anything); as the ``KILL_AT``-th execution of the first process starts,
    the process is SIGKILLed (a crash mid-turn, no clean-up)."""
    path = os.environ.get(TOOL_LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(query + "\n")
        f.flush()
        os.fsync(f.fileno())
    with open(path, encoding="utf-8") as f:
        n = sum(1 for _ in f)
    if os.environ.get("BENCH_CRASH") == "run" and n >= KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


def repeats(tool_log: str, model_steps: list[int]) -> dict[str, Any]:
    """What a crash made run again: finished tool calls executed again, whether the tool call in
    flight ran again, and model calls made again (their step index seen before)."""
    with open(tool_log, encoding="utf-8") as f:
        calls = [line.strip() for line in f if line.strip()]
    first, later = calls[:KILL_AT], calls[KILL_AT:]
    finished, in_flight = first[: KILL_AT - 1], first[KILL_AT - 1]
    seen: set[int] = set()
    again = 0
    for step in model_steps:
        again += step in seen
        seen.add(step)
    return {"finished_tools_rerun": sum(1 for q in later if q in finished), "in_flight_rerun": in_flight in later,
            "model_calls_repeated": again, "tool_calls": len(calls)}  # fmt: skip


def lookup(query: str, limit: int = 5) -> dict[str, Any]:
    """Look something up (about 200 bytes of JSON, as the kit's ``lookup``)."""
    note_tool_call(query)
    return {"query": query, "answer": "x" * 140, "source": "bench"}


def abba(arms: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Wall seconds of each arm's turns, ABBA order, after one warm-up turn each."""
    out: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for name in names:
        arms[name]()
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            began = time.perf_counter()
            arms[name]()
            out[name].append(time.perf_counter() - began)
    return out


def langgraph(args: argparse.Namespace) -> dict[str, Any]:
    """LangGraph with its SQLite checkpointer."""
    import langgraph
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.prebuilt import create_react_agent

    name = model_name(deltas=args.deltas, rate=args.rate, tools=args.steps - 1)
    llm = ChatOpenAI(model=name, base_url=args.base_url, api_key="bench", streaming=True, max_retries=0)
    conn = sqlite3.connect(args.db, check_same_thread=False)
    saver = SqliteSaver(conn)
    durable = create_react_agent(llm, [lookup], checkpointer=saver)
    plain = create_react_agent(llm, [lookup])
    turn = {"messages": [("user", "Go.")]}
    count = [0]

    def run(graph: Any, durability: str | None) -> None:
        count[0] += 1
        config: dict[str, Any] = {"recursion_limit": 4 * args.steps + 10}
        if durability:
            config["configurable"] = {"thread_id": f"t{count[0]}"}
            graph.invoke(turn, config, durability=durability)
        else:
            graph.invoke(turn, config)

    def storage() -> tuple[int, int]:
        rows = bytes_ = 0
        for sql in ("SELECT count(*), coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints",
                    "SELECT count(*), coalesce(sum(length(value)), 0) FROM writes"):  # fmt: skip
            n, b = conn.execute(sql).fetchone()
            rows, bytes_ = rows + n, bytes_ + b
        return rows, bytes_

    times = abba({"plain": lambda: run(plain, None), "async": lambda: run(durable, "async"),
                  "sync": lambda: run(durable, "sync")}, args.rounds)  # fmt: skip
    before = storage()
    run(durable, "sync")
    after = storage()
    return {
        "system": "LangGraph", "version": langgraph_version(langgraph),
        "times": times, "steps": args.steps,
        "rows_per_step": (after[0] - before[0]) / args.steps, "bytes_per_step": (after[1] - before[1]) / args.steps,
    }  # fmt: skip


def langgraph_version(module: Any) -> str:
    """The installed LangGraph's version."""
    from importlib.metadata import version

    return version("langgraph")


def dbos(args: argparse.Namespace) -> dict[str, Any]:
    """DBOS with Pydantic AI on PostgreSQL."""
    import psycopg
    from dbos import DBOS
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    name = model_name(deltas=args.deltas, rate=args.rate, tools=args.steps - 1)
    model = OpenAIChatModel(name, provider=OpenAIProvider(base_url=args.base_url, api_key="bench"))
    agent = Agent(model, name="bench", tools=[lookup])
    durable = DBOSAgent(agent)
    DBOS(config={"name": "bench", "system_database_url": args.db})
    DBOS.launch()
    loop = asyncio.new_event_loop()

    def stats() -> tuple[int, int]:
        """(the next transaction id, the WAL position): write transactions and WAL bytes, exact and at once."""
        with psycopg.connect(args.db, autocommit=True) as c:
            row = c.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, "
                            "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()  # fmt: skip
            assert row is not None
            return int(row[0]), int(row[1])

    times = abba({"plain": lambda: loop.run_until_complete(agent.run("Go.")),
                  "durable": lambda: loop.run_until_complete(durable.run("Go."))}, args.rounds)  # fmt: skip
    a = stats()
    time.sleep(1.0)
    b = stats()
    idle = ((b[0] - a[0]) / 1.0, (b[1] - a[1]) / 1.0)  # DBOS's own background writes, per second
    began = time.perf_counter()
    loop.run_until_complete(durable.run("Go."))
    spent = time.perf_counter() - began
    c = stats()
    commits = c[0] - b[0] - idle[0] * spent
    wal = c[1] - b[1] - idle[1] * spent
    DBOS.destroy()
    from importlib.metadata import version

    return {
        "system": "DBOS + Pydantic AI",
        "version": f"dbos {version('dbos')}, pydantic-ai-slim {version('pydantic-ai-slim')}",
        "times": times, "steps": args.steps, "idle_commits_per_s": idle[0],
        "rows_per_step": commits / args.steps, "bytes_per_step": wal / args.steps,
    }  # fmt: skip


def langgraph_crash(args: argparse.Namespace) -> dict[str, Any]:
    """The crash test's LangGraph side: ``run`` (killed by the tool) or ``resume`` the same thread."""
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.prebuilt import create_react_agent

    name = model_name(deltas=args.deltas, rate=args.rate, tools=args.steps - 1)
    llm = ChatOpenAI(model=name, base_url=args.base_url, api_key="bench", streaming=True, max_retries=0)
    saver = SqliteSaver(sqlite3.connect(args.db, check_same_thread=False))  # it writes from another thread
    graph = create_react_agent(llm, [lookup], checkpointer=saver)
    config: dict[str, Any] = {"recursion_limit": 4 * args.steps + 10, "configurable": {"thread_id": "crash"}}
    graph.invoke({"messages": [("user", "Go.")]} if args.crash == "run" else None, config)  # async durability
    return {"done": True}


def dbos_crash(args: argparse.Namespace) -> dict[str, Any]:
    """The crash test's DBOS side: ``run`` a workflow (killed by the tool), or launch again and let
    DBOS recover it, then wait for its result."""
    from dbos import DBOS, SetWorkflowID
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    name = model_name(deltas=args.deltas, rate=args.rate, tools=args.steps - 1)
    model = OpenAIChatModel(name, provider=OpenAIProvider(base_url=args.base_url, api_key="bench"))
    durable = DBOSAgent(Agent(model, name="crash", tools=[lookup]))
    DBOS(config={"name": "bench-crash", "system_database_url": args.db})
    DBOS.launch()  # on the resume, this recovers the pending workflow
    if args.crash == "run":
        with SetWorkflowID("crash-1"):
            asyncio.run(durable.run("Go."))
    else:
        DBOS.retrieve_workflow("crash-1").get_result()
    DBOS.destroy()
    return {"done": True}


def main() -> None:
    """Run one peer and print its figures as the last line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", choices=["langgraph", "dbos"])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--crash", choices=["run", "resume"], help="the crash test's phases (BENCH_CRASH=run)")
    args = parser.parse_args()
    if args.crash:
        print(json.dumps((langgraph_crash if args.system == "langgraph" else dbos_crash)(args)), flush=True)
        return
    result = (langgraph if args.system == "langgraph" else dbos)(args)
    result["medians"] = {k: statistics.median(v) for k, v in result["times"].items()}
    print(json.dumps(result), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
