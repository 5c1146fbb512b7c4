#!/usr/bin/env python3
"""Sends one deposit through the signing sidecar and does with each answer what docs/clients.md says.

Standard library only. Reads SIDECAR_URL (default http://127.0.0.1:8080). Prints the answer's transaction_link and
exits 0, or exits 1 naming the code of the answer that ended it.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid

SIDECAR_URL = os.environ.get("SIDECAR_URL", "http://127.0.0.1:8080").rstrip("/")
MAX_ATTEMPTS = int(os.environ.get("MAX_ATTEMPTS", "8"))
# Longer than the sidecar's own request deadline (115 s by default): an attempt it is still working on is not cut.
ATTEMPT_TIMEOUT_SECONDS = float(os.environ.get("ATTEMPT_TIMEOUT_SECONDS", "130"))


def backoff_seconds(attempt, retry_after):
    """Retry-After when the sidecar gives one, else 0.5 s doubling up to 8 s."""
    if retry_after is not None and retry_after.isdigit():
        return int(retry_after)
    return min(8.0, 0.5 * 2 ** (attempt - 1))


def main():
    # One key per payment, made (and in a real service stored with the order) before the first attempt: every
    # retry sends it, so the sidecar answers a retry from its record instead of sending a second payment.
    key = str(uuid.uuid4())
    payment = {
        "amount": os.environ.get("AMOUNT", "100.50"),
        "currency": os.environ.get("CURRENCY", "USD"),
        "gateway": "card",
        "user_id": os.environ.get("USER_ID", "u-42"),
        "invoice_no": os.environ.get("INVOICE_NO", "INV-" + key[:8]),
    }
    body = json.dumps(payment).encode("utf-8")
    last = "no answer"
    for attempt in range(1, MAX_ATTEMPTS + 1):
        request = urllib.request.Request(
            SIDECAR_URL + "/api/v2/transaction/init",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
        )
        try:
            with urllib.request.urlopen(request, timeout=ATTEMPT_TIMEOUT_SECONDS) as response:
                status, headers, text = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read()
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            # No answer: with the same key this is safe to send again (a replay, or 409 while the first runs).
            last = "no answer (%s)" % getattr(error, "reason", error)
            print("attempt %d: %s" % (attempt, last), file=sys.stderr)
            time.sleep(backoff_seconds(attempt, None))
            continue
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if 200 <= status < 300:
            link = answer.get("transaction_link")
            if isinstance(link, str):
                print(link)
                return 0
            print("deposit answered %d without transaction_link" % status, file=sys.stderr)
            return 1
        code = answer.get("code")
        code = code if isinstance(code, str) else "http.%d" % status
        # Only the sidecar's own answers marked retryable (nothing was sent; 409: the first is still running) are
        # sent again. outcome_unknown, any other 4xx and every gateway answer are final: the payment may exist.
        if code.startswith("sidecar.") and answer.get("retryable") is True:
            wait = backoff_seconds(attempt, headers.get("Retry-After"))
            print("attempt %d: %d %s, again in %ss" % (attempt, status, code, wait), file=sys.stderr)
            last = code
            time.sleep(wait)
            continue
        print("deposit failed: %s (HTTP %d)" % (code, status), file=sys.stderr)
        return 1
    print("deposit failed: %s after %d attempts" % (last, MAX_ATTEMPTS), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
