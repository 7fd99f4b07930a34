# bench/timed.sh - sourced by the benchmark scripts: `timed CMD...` runs
# CMD once and prints "SECONDS MAXRSS_KIB" (wall time from date's
# nanoseconds, peak RSS of the child and what it waited for, from GNU time,
# Debian package `time`); it fails when CMD fails. `least A B` prints the
# smaller number.
timed() {
    _tf=$(mktemp) || return 1
    _t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$_tf" "$@"
    _rc=$?
    _t1=$(date +%s.%N)
    # GNU time writes "Command exited with non-zero status N" first on failure
    _rss=$(tail -n 1 "$_tf")
    rm -f "$_tf"
    awk -v a="$_t0" -v b="$_t1" -v r="$_rss" 'BEGIN { printf "%.6f %d\n", b - a, r }'
    return $_rc
}

least() {
    awk -v a="$1" -v b="$2" 'BEGIN { print (b < a) ? b : a }'
}
