# nginx as the benchmarks' reference front, configured in one place (sourced, not run).
#
#   nginx_conf DIR LISTEN UPSTREAM [LISTEN_OPTS]
#
# Writes DIR/nginx.conf: 2 workers, no access log. With UPSTREAM (host:port) a keep-alive
# reverse proxy to it (upstream keepalive 256, HTTP/1.1, `Connection ""`) plus `/refuse`
# answering 503, nginx's cheapest refusal; with UPSTREAM empty every request is answered 503.
# LISTEN_OPTS is appended to the listen directive (e.g. `reuseport`); NGINX_ROUTES, when set,
# replaces the proxying locations. Start it with
# `nginx -p DIR -c DIR/nginx.conf -g "daemon off;"`.
nginx_conf() {
  local dir=$1 listen=$2 upstream=$3 opts=${4:+ $4} upstream_block routes
  mkdir -p "$dir/logs"
  if [ -n "$upstream" ]; then
    upstream_block="upstream backend { server $upstream; keepalive 256; keepalive_requests 1000000; }"
    routes=${NGINX_ROUTES:-'location / { proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://backend; }
    location /refuse { return 503; }'}
  else
    upstream_block=
    routes='location / { return 503; }'
  fi
  cat >"$dir/nginx.conf" <<NGINX
worker_processes 2;
error_log $dir/logs/error.log warn;
pid $dir/nginx.pid;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  $upstream_block
  server {
    listen $listen$opts;
    $routes
  }
}
NGINX
}

#   nginx_grpc_conf DIR LISTEN UPSTREAM
#
# Writes DIR/nginx.conf: nginx as an HTTP/2 (h2c) front passing every request to UPSTREAM
# (host:port, an h2c/gRPC service) with `grpc_pass` — nginx's way to speak HTTP/2 to an upstream
# — otherwise as nginx_conf (2 workers, no access log, upstream keepalive 256, reuseport).
nginx_grpc_conf() {
  NGINX_ROUTES='location / { grpc_pass grpc://backend; }' nginx_conf "$1" "$2" "$3" "http2 reuseport"
}
