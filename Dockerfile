# syntax=docker/dockerfile:1
# signing-sidecar image: build with dev dependencies, run with production dependencies only.
# Pin the base image by digest in your own registry (node:24-bookworm-slim@sha256:...) for repeatable builds.
# Node 24 is a supported version (package.json engines: 20 and 24), and CI runs the whole test suite on it.
ARG NODE_IMAGE=node:24-bookworm-slim

# --- build: compile TypeScript to dist/src, then bundle it with its dependencies into dist/image ---------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` (the tsc build) needs the sources, copied below; dependencies first keeps
# this layer cached while only sources change.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts/bundle.ts ./scripts/
# One bundle, a few chunks loaded on demand: about 10 MB less RSS than some 300 files (scripts/bundle.ts).
RUN npm run bundle

# --- prod-deps: runtime dependencies only, no install scripts ------------------------------------------
FROM ${NODE_IMAGE} AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
# The one native build: pkcs11js, the optional PKCS#11 binding (SIDECAR_SIGNER=pkcs11, docs/operations.md), against
# this image's own Node headers. The compiler stays in this stage: the runtime gets the built binding and no vendor
# PKCS#11 module (those are mounted into the pod).
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ \
 && npm_config_nodedir=/usr/local npm rebuild pkcs11js --foreground-scripts \
 && rm -rf /var/lib/apt/lists/*

# --- runtime -----------------------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
# npm and corepack are never used at run time: removing them shrinks the image and its CVE surface.
RUN rm -rf /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/corepack \
      /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack
ENV NODE_ENV=production
WORKDIR /app
# Files stay owned by root and read-only to the process: it writes nothing to any filesystem, /tmp included (logs
# go to stdout), so the container runs with a read-only root filesystem and no writable volume. The image test
# runs `serve` under strace to keep this true.
# The bundle holds its dependencies; node_modules is for the two it loads on demand (pkcs11js, yaml).
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist/image ./dist/image
COPY package.json ./
# Numeric user and group so Kubernetes' runAsNonRoot can verify them without /etc/passwd. Its own, not the
# application's (10001 in deploy/): no other container of the pod runs as the user that holds the key.
USER 10002:10002
# 9464: admin (metrics, health). The proxy listens on 127.0.0.1:8080 inside the pod only.
EXPOSE 9464
# node runs as PID 1 and installs its own SIGTERM/SIGINT handlers (graceful drain, then exit 0), so no
# init (tini, --init) is needed: the sidecar spawns no child processes that could become zombies.
STOPSIGNAL SIGTERM
# V8 settings from paired bench runs (docs/performance.md, "V8 settings"): 4 MB semi-spaces cost no measurable
# CPU against 8 MB and keep the young generation small; smaller ones cost over 10% of throughput per core. A
# stated old-generation cap stops V8 from sizing its heap growth from the host's memory: RSS under load drops by
# about 40 MB whatever the cap; the memory store's default budget follows it (103 MiB of its 204 MiB). Without Maglev
# (V8's middle compiler, on by default from Node 22; Node 20 has it off) Node 24 holds 5-10 MB less under load
# for the same throughput per core. One malloc arena instead of up to one per thread (glibc's default: signing runs
# on libuv's four threads, collection on V8's): two held about 5 MB less under load than the default, and one about
# 5 MB less again, with less spread from start to start (which threads happened to fill the second arena decided
# 1 to 9 MB of it), at the same throughput per core (docs/performance.md, "V8 settings").
ENV MALLOC_ARENA_MAX=1
# glibc's trim threshold held at its default (128 KiB; setting it holds the mmap threshold at its default too) instead
# of both rising with the largest block freed: under load the process frees blocks of 128 to 420 KiB, and with the
# thresholds raised past them, memory freed in the arenas stays there rather than going back to the kernel. Held,
# the sidecar holds about 9 MB less under load and 1 MB less at rest at the same throughput per core (mallopt(3);
# docs/performance.md, "V8 settings").
ENV MALLOC_TRIM_THRESHOLD_=131072
# No allocation-site pretenuring: under load V8 starts allocating some of a request's short-lived objects straight in
# the old generation (they were alive at a collection), and dead there they keep the young objects they name alive
# until a full collection; without it the bench's promotion stays near the floor's and RSS under load is 3 MB lower, at
# the same throughput per core (docs/performance.md, "V8 settings").
# --expose-gc gives node's gc function, which `serve` calls once, as start-up ends: one memory-reducing full
# collection returns the garbage start-up leaves and the young generation its scavenges grew, some 4 MB of RSS at
# rest that an idle sidecar would otherwise hold (docs/performance.md, "What is left at rest").
# Modules resolve without realpath (--preserve-symlinks, --preserve-symlinks-main; no module the sidecar loads is
# reached through a symlink, and main.js is run by its own path):
# the path work of resolving each module at start-up, summed over those `serve` loads, otherwise wakes V8's
# optimizing compiler under an install path of 18 characters or more, and its machine code then stays resident,
# some 6 MB at rest (docs/performance.md, "The image runs a bundle").
# No core dump: a crash must not write the process's memory (key, password, tokens) to any disk. RLIMIT_CORE is
# set to 1 byte, soft and hard, before node starts: under a page, so the kernel writes no core file, and the one
# value it reads as "no dump" when kernel.core_pattern pipes cores to a host program (systemd-coredump, apport),
# which a limit of 0 does not stop (Debian's systemd-coredump ignores it). Node cannot set rlimits or
# PR_SET_DUMPABLE itself, and Kubernetes has no per-container ulimit (kubernetes/kubernetes#3595), so prlimit
# (util-linux, essential in Debian) sets it and execs node: node is still PID 1, and no shell is involved.
ENTRYPOINT ["prlimit", "--core=1:1", "--", "node", "--expose-gc", "--max-semi-space-size=4", "--max-old-space-size=192", "--no-maglev", "--no-allocation-site-pretenuring", "--preserve-symlinks", "--preserve-symlinks-main", "dist/image/main.js"]
CMD ["serve"]
