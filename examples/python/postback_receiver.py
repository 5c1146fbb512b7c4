#!/usr/bin/env python3
"""The application's postback webhook: receives what the signing sidecar forwards (docs/postbacks.md).

Standard library only. Each postback is the gateway's plain JSON (transaction_id, status, ...), signed by the
sidecar with Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature). This receiver
- verifies the signature (HMAC-SHA256 keyed with the bytes after `whsec_` of POSTBACK_WEBHOOK_SECRET_FILE,
  compared in constant time) and that the timestamp is within 5 minutes: anything else is answered 401;
- stores the status, durably, before it answers 2xx: a 2xx tells the sidecar the postback is done with;
- deduplicates by webhook-id (the postback's X-Postback-Id, the same on every attempt and redelivery): a postback
  seen before is answered 200 again and not stored twice.

Settings: POSTBACK_WEBHOOK_SECRET_FILE (required), HOST (127.0.0.1), PORT (3000), POSTBACK_STORE (postbacks.jsonl:
one JSON line per postback, appended and fsynced; a real service writes to its database in one transaction).
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 5 * 60
MAX_BODY_BYTES = 1024 * 1024

with open(os.environ["POSTBACK_WEBHOOK_SECRET_FILE"], encoding="ascii") as secret_file:
    SECRET = secret_file.read().strip()
if not SECRET.startswith("whsec_"):
    sys.exit("POSTBACK_WEBHOOK_SECRET_FILE must hold a whsec_ secret")
KEY = base64.b64decode(SECRET[len("whsec_"):])
STORE = os.environ.get("POSTBACK_STORE", "postbacks.jsonl")


class Store:
    """The ids already stored, loaded from the file at start; one writer at a time."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.seen = set()
        if os.path.exists(path):
            with open(path, encoding="utf-8") as lines:
                self.seen = {json.loads(line)["webhook_id"] for line in lines if line.strip()}

    def save(self, webhook_id, postback):
        """Stores the postback once; returns False for one stored before."""
        with self.lock:
            if webhook_id in self.seen:
                return False
            record = {
                "webhook_id": webhook_id,
                "transaction_id": postback.get("transaction_id"),
                "status": postback.get("status"),
                "received_at": int(time.time()),
            }
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
                out.flush()
                os.fsync(out.fileno())
            self.seen.add(webhook_id)
            return True


def verified(webhook_id, timestamp, signatures, body):
    """True when one of the `v1,` signatures is the HMAC of `id.timestamp.body` and the timestamp is recent."""
    if not webhook_id or not timestamp or not timestamp.isdigit() or not signatures:
        return False
    if abs(time.time() - int(timestamp)) > TOLERANCE_SECONDS:
        return False
    signed = webhook_id.encode("utf-8") + b"." + timestamp.encode("ascii") + b"." + body
    expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest())
    for candidate in signatures.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode("ascii", "replace"), expected):
            return True
    return False


class Handler(BaseHTTPRequestHandler):
    store = Store(STORE)

    def answer(self, status, text):
        data = (text + "\n").encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            return self.answer(413, "too large")
        body = self.rfile.read(length)
        webhook_id = self.headers.get("webhook-id", "")
        if not verified(webhook_id, self.headers.get("webhook-timestamp"), self.headers.get("webhook-signature"), body):
            return self.answer(401, "signature refused")
        try:
            postback = json.loads(body)
        except ValueError:
            return self.answer(400, "not JSON")
        if not isinstance(postback, dict):
            return self.answer(400, "not a JSON object")
        # Only once the status is stored: an error here answers 500, and the sidecar delivers it again.
        stored = self.store.save(webhook_id, postback)
        return self.answer(200, "stored" if stored else "already stored")

    def log_message(self, format, *args):
        sys.stderr.write("postback %s\n" % (format % args))


def main():
    server = ThreadingHTTPServer((os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", "3000"))), Handler)
    print("listening on http://%s:%d" % server.server_address[:2], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
