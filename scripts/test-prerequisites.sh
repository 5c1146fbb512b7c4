#!/usr/bin/env bash
# The first step of `npm test`: the suite uses real parts (Prometheus scraping the metrics, promtool checking the
# rules, openssl verifying signatures on its own, curl as a client, kubectl rendering the manifests, strace watching
# that the shipped image writes no file, redis-server, redis-cli and redis-sentinel for the Redis state store and its
# Sentinel and Cluster topologies, chromium for the simulator's pages in a real browser, driven by playwright-core,
# which downloads no browser of its own, squid as the site's forward proxy, the toolchains that run the example
# callers and postback receivers of examples/: python3, go (golang-go), java (default-jdk-headless), and softhsm2's
# softhsm2-util and opensc's pkcs11-tool for the PKCS#11 signer's tokens and keys, iproute2's ip and nftables' nft for
# the fault campaign's network namespaces and the links it cuts between them). Run as root with apt-get, it installs
# the missing Debian packages; otherwise it stops at once, naming them.
set -euo pipefail

declare -A package_of=([prometheus]=prometheus [promtool]=prometheus [openssl]=openssl [curl]=curl [kubectl]=kubectl [strace]=strace [redis-server]=redis-server [redis-cli]=redis-server [redis-sentinel]=redis-sentinel [chromium]=chromium [squid]=squid [python3]=python3 [go]=golang-go [java]=default-jdk-headless [softhsm2-util]=softhsm2 [pkcs11-tool]=opensc [ip]=iproute2 [nft]=nftables)
missing=()
for tool in prometheus promtool openssl curl kubectl strace redis-server redis-cli redis-sentinel chromium squid python3 go java softhsm2-util pkcs11-tool ip nft; do
  # squid, ip and nft live in /usr/sbin, which a non-root PATH may lack; the tests run them by that path.
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("${package_of[$tool]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [[ ! " ${missing[*]} " =~ " kubectl " ]]; then
  echo "npm test: installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" ca-certificates >/dev/null
  exit 0
fi
echo "npm test needs these packages, missing here: ${missing[*]} (as root: apt-get install ${missing[*]})" >&2
exit 1
