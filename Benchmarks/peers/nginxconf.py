"""The nginx configuration the benchmarks start nginx with: one worker unless asked, its pid file,
logs and temp paths inside its own prefix, never the system's."""


def nginx_conf(prefix, port, root, log, log_format, listen="", server="", workers="1", limited=""):
    """A config serving `root` on 127.0.0.1:`port` (`listen`: more listen parameters such as
    `ssl http2`), `/limited/` at limit_rate 4m, every request logged to `log` in `log_format`;
    `server`: more lines inside the server block; `workers`: nginx's `worker_processes`;
    `limited`: more lines inside the `/limited/` location."""
    return f"""
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
daemon on;
events {{ worker_connections 4096; }}
http {{
  log_format bench '{log_format}';
  access_log {log} bench;
  client_body_temp_path {prefix}/tmp/body;
  proxy_temp_path {prefix}/tmp/proxy;
  fastcgi_temp_path {prefix}/tmp/fastcgi;
  uwsgi_temp_path {prefix}/tmp/uwsgi;
  scgi_temp_path {prefix}/tmp/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port} {listen};
{server}
    root {root};
    location /limited/ {{ alias {root}/; limit_rate 4m; {limited} }}
  }}
}}
"""
