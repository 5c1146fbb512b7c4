#!/usr/bin/env bash
# Sends one deposit through the signing sidecar and does with each answer what docs/clients.md says.
# bash and curl only. Reads SIDECAR_URL (default http://127.0.0.1:8080). Prints the answer's transaction_link and
# exits 0, or exits 1 naming the code of the answer that ended it.
# Without jq, the answer's three top-level fields are picked out with sed; a script of yours can use jq instead.
set -uo pipefail

sidecar_url="${SIDECAR_URL:-http://127.0.0.1:8080}"
sidecar_url="${sidecar_url%/}"
max_attempts="${MAX_ATTEMPTS:-8}"
# Longer than the sidecar's own request deadline (115 s by default): an attempt it is still working on is not cut.
attempt_timeout="${ATTEMPT_TIMEOUT_SECONDS:-130}"
# One key per payment, made (and in a real service stored with the order) before the first attempt: every retry
# sends it, so the sidecar answers a retry from its record instead of sending a second payment.
key="$(cat /proc/sys/kernel/random/uuid)"
body="$(printf '{"amount":"%s","currency":"%s","gateway":"card","user_id":"%s","invoice_no":"%s"}' \
  "${AMOUNT:-100.50}" "${CURRENCY:-USD}" "${USER_ID:-u-42}" "${INVOICE_NO:-INV-${key:0:8}}")"

field() { # a top-level string field of a flat JSON object
  sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p" <<<"$2" | head -n 1 | sed 's|\\/|/|g'
}

# Retry-After when the sidecar gives one, else 0.5 s doubling up to 8 s.
backoff() {
  if [[ "$2" =~ ^[0-9]+$ ]]; then echo "$2"; else awk -v a="$1" 'BEGIN { w = 0.5 * 2 ^ (a - 1); print (w > 8 ? 8 : w) }'; fi
}

headers="$(mktemp)"
trap 'rm -f "$headers"' EXIT
last="no answer"
for ((attempt = 1; attempt <= max_attempts; attempt++)); do
  if ! answer="$(curl -sS --max-time "$attempt_timeout" -D "$headers" -w '\n%{http_code}' \
    -H 'Content-Type: application/json' -H "Idempotency-Key: $key" \
    --data-binary "$body" "$sidecar_url/api/v2/transaction/init")"; then
    # No answer: with the same key this is safe to send again (a replay, or 409 while the first runs).
    last="no answer (curl)"
    echo "attempt $attempt: $last" >&2
    sleep "$(backoff "$attempt" "")"
    continue
  fi
  status="${answer##*$'\n'}"
  text="${answer%$'\n'*}"
  if ((status >= 200 && status < 300)); then
    link="$(field transaction_link "$text")"
    if [ -n "$link" ]; then
      echo "$link"
      exit 0
    fi
    echo "deposit answered $status without transaction_link" >&2
    exit 1
  fi
  code="$(field code "$text")"
  code="${code:-http.$status}"
  # Only the sidecar's own answers marked retryable (nothing was sent; 409: the first is still running) are sent
  # again. outcome_unknown, any other 4xx and every gateway answer are final: the payment may exist.
  if [[ "$code" == sidecar.* ]] && grep -Eq '"retryable"[[:space:]]*:[[:space:]]*true' <<<"$text"; then
    retry_after="$(sed -n 's/^[Rr]etry-[Aa]fter:[[:space:]]*\([0-9]*\).*/\1/p' "$headers" | head -n 1)"
    wait="$(backoff "$attempt" "$retry_after")"
    echo "attempt $attempt: $status $code, again in ${wait}s" >&2
    last="$code"
    sleep "$wait"
    continue
  fi
  echo "deposit failed: $code (HTTP $status)" >&2
  exit 1
done
echo "deposit failed: $last after $max_attempts attempts" >&2
exit 1
