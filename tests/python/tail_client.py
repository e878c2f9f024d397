"""Tails auditmem's audit stream with httpx-sse, a Server-Sent Events client we did not write.

Reads a random number of events per connection, then drops it and reconnects with
Last-Event-ID set to the last id it got, until it has seen an event whose entry's action is
the stop action. Prints one JSON line per event: {"id": <position>, "data": <entry>}.

Usage: tail_client.py URL KEY STOP_ACTION SEED
"""

import json
import random
import signal
import sys
import time

import httpx
from httpx_sse import connect_sse


def main() -> int:
    url, key, stop_action, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    last = 0
    reconnects = 0
    # A stream that never brings the stop action is a failure, not a hang.
    signal.signal(signal.SIGALRM, lambda *_: sys.exit(f"no {stop_action} entry within 120 s; last id {last}"))
    signal.alarm(120)
    with httpx.Client(timeout=httpx.Timeout(60.0)) as client:
        while True:
            headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": str(last)}
            take = rng.randint(1, 12)
            try:
                with connect_sse(client, "GET", f"{url}/v1/audit/logs/stream", headers=headers) as source:
                    source.response.raise_for_status()
                    for sse in source.iter_sse():
                        if not sse.id:
                            continue
                        position = int(sse.id)
                        data = json.loads(sse.data)
                        print(json.dumps({"id": position, "data": data}), flush=True)
                        last = position
                        if data.get("action") == stop_action:
                            print(json.dumps({"reconnects": reconnects}), flush=True)
                            return 0
                        take -= 1
                        if take == 0:
                            break
            except httpx.TransportError:
                time.sleep(0.05)
            reconnects += 1


if __name__ == "__main__":
    sys.exit(main())
