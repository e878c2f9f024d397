"""A mem0 platform user's script, for tests/it/mem0_compat.rs: what someone on mem0's hosted
API writes with `mem0ai`'s MemoryClient, unchanged but for where it points. The host comes
from MEM0_HOST and the key from MEM0_API_KEY (which MemoryClient reads itself).

Usage: mem0_user.py remember | change MEMORY_ID | forget MEMORY_ID: `remember` adds,
searches, lists and reads; `change` updates a memory and reads its history and the users;
`forget` deletes what `remember` wrote (the test reads our REST API between the steps).
Prints one JSON object of what each call returned.
"""

import json
import os
import sys

from mem0 import MemoryClient
from mem0.exceptions import MemoryNotFoundError

client = MemoryClient(host=os.environ["MEM0_HOST"])
out = {}

if sys.argv[1] == "change":
    colour_id = sys.argv[2]
    out["update"] = client.update(
        colour_id, text="Alex's favourite colour is blue", metadata={"topic": "colours"}
    )
    out["history"] = client.history(colour_id)
    out["users"] = client.users()
    print(json.dumps(out))
    sys.exit(0)

if sys.argv[1] == "forget":
    colour_id = sys.argv[2]
    out["delete"] = client.delete(colour_id)
    try:
        client.get(colour_id)
        out["get_deleted"] = "found"
    except MemoryNotFoundError as e:
        out["get_deleted"] = {"error": type(e).__name__, "message": e.message, "details": e.details}
    out["delete_all"] = client.delete_all(user_id="bob")
    out["delete_users"] = client.delete_users(user_id="alex")
    out["users_after"] = client.users()
    print(json.dumps(out))
    sys.exit(0)

messages = [
    {"role": "user", "content": "Hi, I'm Alex. I'm a vegetarian and I'm allergic to nuts."},
    {"role": "assistant", "content": "Hello Alex! I'll remember your dietary needs."},
]
out["add_infer"] = client.add(messages, user_id="alex")

out["add_raw"] = client.add(
    [{"role": "user", "content": "Alex's favourite colour is green"}],
    user_id="alex",
    agent_id="travel-bot",
    run_id="trip-1",
    metadata={"topic": "preferences"},
    infer=False,
)
out["add_bob"] = client.add(
    "Bob plays chess on Sundays", user_id="bob", infer=False, timestamp=1700000000
)
colour_id = out["add_raw"]["results"][0]["id"]

out["search_and"] = client.search(
    "What does Alex like?",
    filters={"AND": [{"user_id": "alex"}, {"agent_id": "travel-bot"}]},
    top_k=3,
)
out["search_or"] = client.search(
    "chess or colours",
    filters={"OR": [{"user_id": "bob"}, {"run_id": "trip-1"}]},
)
out["get_all"] = client.get_all(
    filters={"AND": [{"user_id": "alex"}, {"created_at": {"gte": "2020-01-01"}}]},
    page=1,
    page_size=50,
)
out["get_all_metadata"] = client.get_all(filters={"metadata": {"topic": "preferences"}})
out["get"] = client.get(colour_id)
print(json.dumps(out))
