#!/usr/bin/env bash
# Makes the known-answer signature vectors with the openssl CLI only, so that neither the sidecar's signer
# nor the simulator's verifier had any part in producing them. Run once; the output is committed.
# The key made here is a throwaway used for these vectors and nowhere else.
set -euo pipefail
cd "$(dirname "$0")"
[ -f vector-key.pem ] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out vector-key.pem 2>/dev/null
openssl pkey -in vector-key.pem -pubout -out vector-pub.pem

# name | method | base_url | request_target | full_url (written by hand from spec 5.2) | timestamp | nonce | json payload
cases=(
  "deposit-plain|POST|https://gateway.example.com|/api/v2/transaction/init|https://gateway.example.com/api/v2/transaction/init|1763700000|AAECAwQFBgcICQoLDA0ODw|{\"amount\":\"100.50\",\"currency\":\"USD\",\"gateway\":\"card\",\"user_id\":\"u1\",\"invoice_no\":\"inv-1\"}"
  "withdrawal-plain|POST|https://gateway.example.com|/api/v2/transfer-out/init|https://gateway.example.com/api/v2/transfer-out/init|1763700001|q8D-_x2Lm0Zp9vR4tY7wUe|{\"amount\":\"5.00\",\"currency\":\"EUR\",\"user_id\":\"u2\",\"invoice_no\":\"out-7\"}"
  "uppercase-host-default-port|POST|HTTPS://Gateway.Example.COM:443|/api/v2/transaction/init|https://gateway.example.com/api/v2/transaction/init|1763700002|0123456789abcdef_-XYZ|{\"amount\":\"1.00\"}"
  "path-prefix-and-port|POST|https://staging.example.com:8443/gw|/api/v2/transaction/init|https://staging.example.com:8443/gw/api/v2/transaction/init|1763700003|nonce_with-64-chars-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH|{\"amount\":\"2.00\"}"
  "trailing-slash-kept|POST|https://gateway.example.com|/api/v2/transaction/init/|https://gateway.example.com/api/v2/transaction/init/|1763700004|abcdefghijklmnop|{\"amount\":\"3.00\"}"
  "query-kept-byte-for-byte|POST|https://gateway.example.com|/api/v2/transaction/init?b=2&a=1&a=%2F+x|https://gateway.example.com/api/v2/transaction/init?b=2&a=1&a=%2F+x|1763700005|ZZZZZZZZZZZZZZZZZZZZZZ|{\"amount\":\"4.00\"}"
  "empty-query-dropped|POST|https://gateway.example.com|/api/v2/transaction/init?|https://gateway.example.com/api/v2/transaction/init|1763700006|YYYYYYYYYYYYYYYYYYYYYY|{\"amount\":\"5.00\"}"
  "http-loopback-port-80|POST|http://127.0.0.1:80|/api/v2/transaction/init|http://127.0.0.1/api/v2/transaction/init|1763700007|XXXXXXXXXXXXXXXXXXXXXX|{\"note\":\"café ✓ (UTF-8 bytes)\"}"
)

{
  echo '['
  first=1
  for c in "${cases[@]}"; do
    IFS='|' read -r name method base target full ts nonce payload <<<"$c"
    data=$(printf '%s' "$payload" | openssl base64 -A)
    signing="${method}.${full}.${ts}.${nonce}.${data}"
    sig=$(printf '%s' "$signing" | openssl dgst -sha256 -sign vector-key.pem | openssl base64 -A)
    # The vector is only kept if openssl itself verifies it with the public key.
    printf '%s' "$sig" | openssl base64 -d -A > /tmp/vector.sig
    printf '%s' "$signing" | openssl dgst -sha256 -verify vector-pub.pem -signature /tmp/vector.sig >/dev/null
    [ $first -eq 1 ] || echo ','
    first=0
    printf '  {"name":"%s","method":"%s","base_url":"%s","request_target":"%s","full_url":"%s","timestamp":"%s","nonce":"%s","payload":%s,"data":"%s","signing_string":"%s","signature":"%s"}' \
      "$name" "$method" "$base" "$target" "$full" "$ts" "$nonce" "$(printf '%s' "$payload" | sed 's/\\/\\\\/g;s/"/\\"/g;s/^/"/;s/$/"/')" "$data" "$signing" "$sig"
  done
  echo
  echo ']'
} > vectors.json
rm -f /tmp/vector.sig
echo "wrote $(grep -c '"name"' vectors.json) vectors to $(pwd)/vectors.json"
