#!/usr/bin/env bash
# leftovers.sh MARKER: `make test` runs this at its end, pass or fail. Every
# process the run started carries CONCORD_TEST_RUN=MARKER in the environment
# it was started with (/proc/PID/environ), and its descendants inherit it.
# Each one still alive is listed (pid, command line, the test that started
# it when known) and killed, and the script exits 1; it exits 0 when there
# is none. It skips itself and its ancestors (make, the recipe's shell), and
# spawns no process while it looks, so that it cannot find itself.
set -u
marker=${1:?usage: leftovers.sh MARKER}
want="CONCORD_TEST_RUN=$marker"

skip=" $$ "
pid=$$
while [ "$pid" -gt 1 ]; do
	ppid=1
	while read -r key value; do
		[ "$key" = PPid: ] && { ppid=$value; break; }
	done 2>/dev/null </proc/$pid/status
	skip+="$ppid "
	pid=$ppid
done

# scan records in $found the pid of each live process with the marker, and
# in $report a line for each: pid, command line, the test that started it.
# It runs in this shell (no subshell, no command), so it never sees itself.
scan() {
	found= report=
	local dir pid kv hit test args arg
	for dir in /proc/[0-9]*; do
		pid=${dir#/proc/}
		case $skip in *" $pid "*) continue ;; esac
		hit= test=
		while IFS= read -r -d '' kv; do
			case $kv in
			"$want") hit=1 ;;
			CONCORD_TEST_PROC_*=*) test=${kv#*=} ;;
			esac
		done 2>/dev/null <"$dir/environ"
		[ -n "$hit" ] || continue
		args=
		while IFS= read -r -d '' arg; do
			args+="$arg "
		done 2>/dev/null <"$dir/cmdline"
		found+="$pid "
		report+="  pid $pid: ${args% } (started by ${test:-?})"$'\n'
	done
}

scan
if [ -z "$found" ]; then
	echo "leftovers: no process of this test run is alive"
	exit 0
fi
echo "leftovers: FAIL: processes of this test run are still alive (killed now):"
printf '%s' "$report"
for _ in 1 2 3 4 5; do
	# shellcheck disable=SC2086 # one argument per pid
	kill -KILL $found 2>/dev/null
	sleep 0.2 # gone before the next scan
	scan
	[ -z "$found" ] && break
done
[ -n "$found" ] && echo "leftovers: still alive after SIGKILL: $found"
exit 1
