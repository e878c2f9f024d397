"""A webhook receiver for tests/it/webhooks.rs: a real HTTP server on loopback that logs every
request it gets (path, Standard Webhooks headers, body, the status it answered) as one JSON
line of the log file named by argv[1], written before it answers, and answers by its path:

- /ok/<name>: 200
- /fail/<n>/<name>: 500 with a 2000-byte body for the first <n> requests to the path, then 200
- /gone/<name>: 410
- /hang/<seconds>/<name>: answers 200 after <seconds>
- /redirect/<name>: 307 to /ok/redirected

It prints its port on the first line of stdout, then serves until killed.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]
LOCK = threading.Lock()
SEEN = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        parts = self.path.strip("/").split("/")
        with LOCK:
            SEEN[self.path] = SEEN.get(self.path, 0) + 1
            seen = SEEN[self.path]
        kind = parts[0]
        headers = {}
        delay = 0.0
        if kind == "ok":
            status, answer = 200, b"thanks"
        elif kind == "fail":
            failing = seen <= int(parts[1])
            status, answer = (500, b"x" * 2000) if failing else (200, b"thanks")
        elif kind == "gone":
            status, answer = 410, b"gone"
        elif kind == "hang":
            delay = float(parts[1])
            status, answer = 200, b"late"
        elif kind == "redirect":
            status, answer = 307, b""
            headers["location"] = "/ok/redirected"
        else:
            status, answer = 404, b"no such path"
        record = {
            "path": self.path,
            "id": self.headers.get("webhook-id"),
            "timestamp": self.headers.get("webhook-timestamp"),
            "signature": self.headers.get("webhook-signature"),
            "body": body.decode("utf-8"),
            "status": status,
            "at": time.time(),
        }
        with LOCK:
            with open(LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        if delay:
            time.sleep(delay)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
