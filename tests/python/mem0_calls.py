"""Runs MemoryClient calls one by one, for tests/it/mem0_compat.rs's refusals and isolation.

Usage: mem0_calls.py PLAN_JSON, PLAN_JSON being {"host": ..., "api_key": ..., "calls":
[{"method": "get_all", "args": [...], "kwargs": {...}}, ...]}.

Prints {"init": ..., "results": [...]}: each call's return value as {"ok": value}, or the
exception it raised as {"error": class name, "message": ..., "details": ...} (and
"retry_after", the seconds the client read from Retry-After, when it read some); `init` is the
exception building the client raised, or null.
"""

import json
import sys

from mem0 import MemoryClient


def caught(e):
    out = {
        "error": type(e).__name__,
        "message": getattr(e, "message", str(e)),
        "details": getattr(e, "details", None),
    }
    debug = getattr(e, "debug_info", None)
    if isinstance(debug, dict) and "retry_after" in debug:
        out["retry_after"] = debug["retry_after"]
    return out


plan = json.loads(sys.argv[1])
try:
    client = MemoryClient(api_key=plan["api_key"], host=plan["host"])
except Exception as e:  # noqa: BLE001 - the test compares what the client raised
    print(json.dumps({"init": caught(e), "results": []}))
    sys.exit(0)
results = []
for call in plan["calls"]:
    try:
        value = getattr(client, call["method"])(*call.get("args", []), **call.get("kwargs", {}))
        results.append({"ok": value})
    except Exception as e:  # noqa: BLE001
        results.append(caught(e))
print(json.dumps({"init": None, "results": results}))
