"""Drives auditmem's MCP tools with the official MCP Python SDK, for tests/it/mcp.rs.

Usage: mcp_client.py PLAN_JSON

PLAN_JSON is an object:
  {"transport": "http", "url": ".../mcp", "headers": {...},
   "sessions": [[step, ...], ...]}
or
  {"transport": "stdio", "command": "auditmem", "args": [...],
   "sessions": [[step, ...], ...]}

Each session is one MCP client session (initialize first); the sessions run concurrently.
A step is {"call": tool, "args": {...}} or {"list_tools": true}. A string argument value
"$N.path.to.field" is replaced by that field of the N-th step's structured result in the same
session, so a step can name the id an earlier one got.

Prints one JSON object: {"initialize": {...}, "sessions": [[result, ...], ...]} where a call's
result is {"structured": ..., "text": ..., "is_error": ...} or {"error": {"code", "message",
"data"}}, and list_tools gives {"tools": [{"name", "inputSchema", ...}]}.
"""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError


def resolve(value, results):
    if isinstance(value, str) and value.startswith("$"):
        index, _, path = value[1:].partition(".")
        current = results[int(index)].get("structured")
        if current is None:
            return None
        for part in path.split(".") if path else []:
            current = current[int(part)] if isinstance(current, list) else current[part]
        return current
    if isinstance(value, dict):
        return {k: resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, results) for v in value]
    return value


async def run_session(session, steps):
    results = []
    for step in steps:
        if step.get("list_tools"):
            listed = await session.list_tools()
            results.append(
                {
                    "tools": [
                        {
                            "name": t.name,
                            "description": t.description,
                            "inputSchema": t.inputSchema,
                        }
                        for t in listed.tools
                    ]
                }
            )
            continue
        args = resolve(step.get("args", {}), results)
        try:
            r = await session.call_tool(step["call"], args)
            texts = [c.text for c in r.content if c.type == "text"]
            results.append(
                {
                    "structured": r.structuredContent,
                    "text": texts[0] if texts else None,
                    "is_error": r.isError,
                }
            )
        except McpError as e:
            results.append(
                {
                    "error": {
                        "code": e.error.code,
                        "message": e.error.message,
                        "data": e.error.data,
                    }
                }
            )
    return results


async def start(session, out, index, init_out):
    """Initializes the session; False (and the refusal in `out`) when it is refused."""
    try:
        init = await session.initialize()
    except McpError as e:
        out[index] = f"initialize refused: {e.error.code} {e.error.message}"
        return False
    init_out[index] = init.model_dump(mode="json", exclude_none=True)
    return True


async def one(plan, steps, out, index, init_out):
    if plan["transport"] == "http":
        async with streamablehttp_client(plan["url"], headers=plan.get("headers", {})) as (
            read,
            write,
            _,
        ):
            async with ClientSession(read, write) as session:
                if await start(session, out, index, init_out):
                    out[index] = await run_session(session, steps)
    else:
        params = StdioServerParameters(command=plan["command"], args=plan["args"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                if await start(session, out, index, init_out):
                    out[index] = await run_session(session, steps)


async def main():
    plan = json.loads(sys.argv[1])
    sessions = plan["sessions"]
    out = [None] * len(sessions)
    init_out = [None] * len(sessions)
    async with anyio.create_task_group() as tg:
        for i, steps in enumerate(sessions):
            tg.start_soon(one, plan, steps, out, i, init_out)
    print(json.dumps({"initialize": init_out[0], "sessions": out}))


if __name__ == "__main__":
    anyio.run(main)
