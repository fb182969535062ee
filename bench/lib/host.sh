# Reading the shared host, shared by the benchmark scripts (sourced, not run): CPU used by a
# process or the whole machine, a bounded wait for other work to quiet down, and the admin
# API's POST without a curl dependency.

# utime + stime of one process, in clock ticks (/proc/PID/stat fields 14 and 15).
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
tree_ticks() { # $1 = pid: CPU ticks of it and its children (nginx's workers)
  local p s=0
  for p in "$1" $(pgrep -P "$1" || true); do s=$((s + $(cpu_ticks "$p"))); done
  echo "$s"
}
# The machine's busy and total ticks (user, nice, system, irq, softirq, steal; + idle, iowait).
host_busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
busy_1s() { # the machine's busy share over the next second, in %
  local a b
  a=$(host_busy)
  sleep 1
  b=$(host_busy)
  echo "$a $b" | awk '{printf "%d\n", 100 * ($3 - $1) / ($4 - $2 + 0.001)}'
}
# Other engineers share the cores: wait (at most WAIT_QUIET s) for a second under 35% busy.
wait_quiet() {
  local i b
  for i in $(seq "${WAIT_QUIET:-90}"); do
    b=$(busy_1s)
    [ "$b" -lt 35 ] && break
    [ $((i % 15)) = 1 ] && echo "machine $b % busy (others' work); waiting up to ${WAIT_QUIET:-90} s for a quieter moment ..."
  done
  echo "machine busy before the run: $(busy_1s) %; load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

admin_post() { # $1 = admin address, $2 = path, $3 = JSON body
  local host=${1%:*} port=${1#*:}
  exec 3<>"/dev/tcp/$host/$port"
  printf 'POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$2" "$1" "${#3}" "$3" >&3
  head -1 <&3
  exec 3<&-
}
