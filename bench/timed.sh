# bench/timed.sh - sourced by the benchmark scripts: `timed CMD...` runs
# CMD once and prints "SECONDS MAXRSS_KIB" (wall time, peak RSS of the
# child); it fails when CMD fails. `least A B` prints the smaller number.
timed() {
    python3 -c '
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.run(sys.argv[1:]).returncode
dt = time.monotonic() - t
print("%.6f %d" % (dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)' "$@"
}

least() {
    awk -v a="$1" -v b="$2" 'BEGIN { print (b < a) ? b : a }'
}
