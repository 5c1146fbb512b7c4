#!/bin/bash
# usage: ab.sh N variant...
n=$1; shift
for i in $(seq $n); do for v in "$@"; do
  r=$(BENCH_SIDECAR_ENTRY=/work/main/.exp/$v/src/main.js node --import tsx bench/run.ts --throughput-seconds 5 --latency-seconds 0.5 --soak-seconds 1 --no-compare --rates 200 --sign-seconds 1 --json 2>/dev/null | tail -1)
  echo "$v $(echo $r | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["throughput_per_s"], d["throughput_per_core"], d["ratio_to_limit"], d["sign_limit_per_s"], d["errors"])') load=$(cut -d' ' -f1 /proc/loadavg)"
done; done
