# Helpers shared by the scripts; source it, don't run it.

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

# Starts nginx on 127.0.0.1 with its own prefix, config and pid file (never the system's).
# Usage: start_nginx DIR PORT ROOT [LIMIT_RATE]; serves ROOT at / unthrottled and at /limited/
# with the per-request limit_rate (default 4m). Logs bytes sent per request to DIR/access.log.
start_nginx() {
  local dir=$1 port=$2 root=$3 rate=${4:-4m}
  mkdir -p "$dir/logs" "$dir/tmp"
  cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
daemon on;
events { worker_connections 1024; }
http {
  access_log $dir/logs/access.log;
  log_format sent '\$request_uri \$status \$body_bytes_sent';
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
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
