# Sampling the proxy's admission state from its admin API (sourced, not run).
# sample_status ADMIN OUT: appends "limit in_flight queued" from http://ADMIN/status to OUT every
# 100 ms until killed (one process; run it in the background and kill it after the phase).
sample_status() {
  exec python3 -c '
import json, sys, time, urllib.request
url, out = "http://" + sys.argv[1] + "/status", open(sys.argv[2], "a", buffering=1)
while True:
    try:
        a = json.load(urllib.request.urlopen(url, timeout=0.5))["admission"]
        print(a["limit"], a["in_flight"], a["queued"], file=out)
    except Exception:
        pass
    time.sleep(0.1)' "$1" "$2"
}
