# The proxy's configuration for the forwarding benchmarks, written in one place (sourced, not
# run).
#
#   fixed_proxy_conf LISTEN UPSTREAM [UPSTREAM_KEYS]   # prints the TOML
#
# A large fixed limit (10,000: no adaptive measurement windows, so the forwarding path is what
# is measured), a pool wide enough for the load's connections (1,024 requests in flight and idle
# per task), loopback trusted (the load's context headers honoured), the admin listener off.
# UPSTREAM_KEYS are extra `[upstream]` lines, e.g. 'protocol = "http1"'.
fixed_proxy_conf() {
  local keys=${3:+$3$'\n'}
  printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n%smax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nenabled = false\n' \
    "$1" "$2" "$keys"
}
