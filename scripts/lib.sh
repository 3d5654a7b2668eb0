# Helpers shared by the scripts; source it, don't run it.

# The end-to-end scripts' harness: `pass WHAT` and `fail WHAT [DETAIL]` count a check and print
# its line; `finish NAME` prints "NAME: N passed, M failed" and fails when any check did.
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok   - $1"; }
fail() { failed=$((failed + 1)); echo "FAIL - $1${2:+ ($2)}"; }
finish() { echo "$1: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; }

# The release build that users and benchmarks run: the Swift runtime linked statically, so the
# process starts faster (--version: 7.0 ms instead of 9.3 ms here), linked with the toolchain's
# lld (the system linker warns about a mktemp use inside static Foundation). Its 140,000
# relative relocations are packed (RELR, glibc 2.36 and later) and its symbols are not exported
# (nothing loads a plug-in that would look them up): both tables were read in whole at every start,
# 5.6 MiB of the daemon's resident memory (Benchmarks/JOURNAL.md, "The daemon").
# Usage: build_release PRODUCT...; the binaries land in .build/release/.
RELEASE_FLAGS=(-c release --static-swift-stdlib -Xswiftc -use-ld=lld
               -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic)
build_release() {
  local product
  for product in "$@"; do
    swift build "${RELEASE_FLAGS[@]}" --product "$product" >/dev/null || return 1
  done
}

# A free TCP port on 127.0.0.1 (bound and released by the kernel's choice).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits until 127.0.0.1:$1 accepts connections, for at most 10 s.
wait_port() {
  local port=$1 i
  for i in $(seq 1 100); do
    if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1',$port)))" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$port" >&2
  return 1
}

# The lines every nginx config of ours starts with: one worker, its pid file and error log inside
# DIR, daemonized. Usage: nginx_preamble DIR WORKER_CONNECTIONS
nginx_preamble() {
  local dir=$1 connections=$2
  printf 'worker_processes 1;\npid %s/nginx.pid;\nerror_log %s/logs/error.log warn;\ndaemon on;\n' "$dir" "$dir"
  printf 'events { worker_connections %s; }\n' "$connections"
}

# The temp-file paths every nginx config of ours keeps inside its own DIR.
nginx_temp_paths() {
  local dir=$1 kind
  for kind in client_body proxy fastcgi uwsgi scgi; do
    printf '  %s_temp_path %s/tmp/%s;\n' "$kind" "$dir" "${kind%_body}"
  done
}

# Starts nginx on 127.0.0.1 with its own prefix, config and pid file (never the system's).
# Usage: start_nginx DIR PORT ROOT [LIMIT_RATE]; serves ROOT at / unthrottled and at /limited/
# with the per-request limit_rate (default 4m). Logs bytes sent per request to DIR/access.log.
start_nginx() {
  local dir=$1 port=$2 root=$3 rate=${4:-4m}
  mkdir -p "$dir/logs" "$dir/tmp"
  cat > "$dir/nginx.conf" <<CONF
$(nginx_preamble "$dir" 1024)
http {
  access_log $dir/logs/access.log;
  log_format sent '\$request_uri \$status \$body_bytes_sent';
$(nginx_temp_paths "$dir")
  sendfile on;
  tcp_nopush on;
  keepalive_requests 10000;
  types { application/octet-stream bin iso; }
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port;
    access_log $dir/logs/access.log sent;
    root $root;
    location /limited/ {
      alias $root/;
      limit_rate $rate;
    }
  }
}
CONF
  /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
  wait_port "$port"
}

# Stops the nginx started by start_nginx DIR, by its pid file.
stop_nginx() {
  local dir=$1 pid
  [ -f "$dir/nginx.pid" ] || return 0
  pid=$(cat "$dir/nginx.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# Prints the SHA-256 of a file.
sha() { sha256sum "$1" | cut -d' ' -f1; }

# Starts nginx with TLS on 127.0.0.1: start_nginx_tls DIR PORT ROOT CERT KEY HTTP_PORT.
# /down/NAME redirects to http://127.0.0.1:HTTP_PORT/NAME (an https -> http downgrade).
start_nginx_tls() {
  local dir=$1 port=$2 root=$3 cert=$4 key=$5 http_port=$6
  mkdir -p "$dir/logs" "$dir/tmp"
  cat > "$dir/nginx.conf" <<CONF
$(nginx_preamble "$dir" 256)
http {
  access_log off;
$(nginx_temp_paths "$dir")
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port ssl;
    ssl_certificate $cert;
    ssl_certificate_key $key;
    root $root;
    location /down/ { rewrite ^/down/(.*)\$ http://127.0.0.1:$http_port/\$1 redirect; }
  }
}
CONF
  /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
  wait_port "$port"
}

# Makes a throwaway CA and a server certificate for IP 127.0.0.1 in DIR (ca.pem, server.pem, server.key).
make_test_certificates() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=splitfetch test CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\n' > "$dir/san.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -extfile "$dir/san.ext" -out "$dir/server.pem" >/dev/null 2>&1
  chmod 644 "$dir"/*
}

# PostgreSQL 15 from Debian's packages on 127.0.0.1: a cluster made with initdb in DIR (owned by
# the postgres user when run as root: initdb refuses root), on a private port, a role with a
# random password. Sets PG_PORT, PG_PID (the postmaster, stopped by stop_postgres) and
# PG_PASSWORD. Usage: start_postgres DIR [SERVER-OPTIONS] (more `-c name=value` for the server).
start_postgres() {
  local dir=$1 bin=/usr/lib/postgresql/15/bin as=()
  PG_PORT=$(free_port)
  PG_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir"; as=(runuser -u postgres --); fi
  printf '%s\n' "$PG_PASSWORD" > "$dir/pwfile"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir/pwfile"
  "${as[@]}" "$bin/initdb" -D "$dir/data" -U splitfetch --pwfile="$dir/pwfile" -A scram-sha-256 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; return 1; }
  rm -f "$dir/pwfile"
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $dir -c max_connections=200 ${2:-}" start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
  PG_PID=$(head -1 "$dir/data/postmaster.pid")
}

# Stops the PostgreSQL that start_postgres started (fast shutdown), and waits for it.
stop_postgres() {
  [ -n "${PG_PID:-}" ] || return 0
  kill -INT "$PG_PID" 2>/dev/null
  local i
  for i in $(seq 1 100); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
  PG_PID=""
}
