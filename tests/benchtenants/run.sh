#!/bin/bash
# The tenants' performance figures of docs/performance.md (make bench-tenants):
#   cpu     server CPU per request and ops/s of put and keep-alive as the
#           default tenant, as a tenant by header (concord bench --as-tenant)
#           and as a tenant through the NATS service import
#   spread  keepalive-tenants: 100 tenants x 1,000 leases, 1 x 100,000, and
#           100,000 of Concord's own account
#   flood   a tenant's puts alone, and beside another tenant flooding past
#           its rate quota
#   binary  with BASELINE=path/to/older/concord: put and keep-alive of the
#           default tenant, that binary against this one
# Each run starts a fresh single node on loopback (deploy/nats/accounts.conf
# for the tenant runs) and stops it; configurations alternate which goes
# first. Usage: [PHASES='cpu spread flood'] run.sh CONCORD [ROUNDS] [DURATION]
set -u
B=${1:?usage: run.sh CONCORD [ROUNDS] [DURATION]}
ROUNDS=${2:-5}
DUR=${3:-10s}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CONF=$ROOT/deploy/nats/accounts.conf
export CONCORD_REPLICA_PASSWORD=r CONCORD_EVENTS_PASSWORD=e CONCORD_OPERATOR_PASSWORD=o \
  TENANT_A_PASSWORD=a TENANT_B_PASSWORD=b CONCORD_NATS_PASSWORD=r CONCORD_NATS_EVENTS_PASSWORD=e
NATS=127.0.0.1:24230 RAFT=127.0.0.1:27430
OP=nats://concord-operator:o@$NATS
pid= dir=
stop() { [ -n "$pid" ] && { kill $pid 2>/dev/null; wait $pid 2>/dev/null; }; [ -n "$dir" ] && rm -rf "$dir"; pid= dir=; }
trap stop EXIT
trap 'exit 130' INT TERM
start() { # binary accounts(yes|no)
  # A node left on the port would answer for the one this run starts.
  if (exec 3<>/dev/tcp/${NATS%:*}/${NATS#*:}) 2>/dev/null; then echo "something already listens on $NATS" >&2; exit 1; fi
  dir=$(mktemp -d)
  local extra=() probe=nats://$NATS
  if [ "$2" = yes ]; then extra=(--nats-config "$CONF" --nats-user concord-replica --nats-events-user concord-events); probe=$OP; fi
  "$1" serve --data-dir "$dir/data" --nats-listen $NATS --raft-addr $RAFT --max-leases 10000000 --log-level warn "${extra[@]}" > "$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do "$B" lease list --server "$probe" --timeout 1s > /dev/null 2>&1 && return 0; sleep 0.2; done
  echo "the node did not start:" >&2; tail -20 "$dir/log" >&2; exit 1
}
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
tck=$(getconf CLK_TCK)
measure() { # label url workload bench-flags...: prints label workload ops/s cpu-us/op
  local label=$1 url=$2 w=$3; shift 3
  local c0 c1 res ops
  c0=$(cpu)
  res=$("$B" bench --url "$url" --duration $DUR --json "$@" $w | tail -1)
  c1=$(cpu)
  ops=$(echo "$res" | sed 's/.*"ops":\([0-9]*\).*/\1/')
  echo "$label $w ops/s $(echo "$res" | sed 's/.*"ops_per_s":\([0-9.]*\).*/\1/') cpu_us_per_op $(( (c1 - c0) * 1000000 / tck / ops ))"
}
order() { # round items...: the items rotated by the round
  local r=$1; shift; local items=("$@") n=$#
  for i in $(seq 0 $((n - 1))); do echo "${items[$(( (i + r) % n ))]}"; done
}
echo "# $(date -u) $(nproc) cores $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
want() { case " ${PHASES:-cpu spread flood} " in *" $1 "*) return 0 ;; esac; return 1; }
if want cpu; then
echo "## cpu"
for r in $(seq 1 $ROUNDS); do
  for cfg in $(order $r default header import); do
    start "$B" yes
    for w in put keepalive; do
      case $cfg in
        default) measure "$cfg round $r" $OP $w ;;
        header) measure "$cfg round $r" $OP $w --as-tenant TENANT_A ;;
        import) measure "$cfg round $r" nats://tenant-a:a@$NATS $w ;;
      esac
    done
    stop
  done
done
fi
if want spread; then
echo "## spread"
for r in $(seq 1 $ROUNDS); do
  for cfg in $(order $r 100:1000 1:100000 0:100000); do
    start "$B" no
    echo "tenants ${cfg%:*} x ${cfg#*:} round $r $("$B" bench --url nats://$NATS --duration $DUR --json --tenants ${cfg%:*} --tenant-leases ${cfg#*:} keepalive-tenants | tail -1)"
    stop
  done
done
fi
if want flood; then
echo "## flood"
for r in $(seq 1 $ROUNDS); do
  for mode in $(order $r alone flooded); do
    start "$B" yes
    "$B" tenant quota TENANT_A --rate 200 --server $OP > /dev/null
    fpid=
    if [ $mode = flooded ]; then
      "$B" bench --url nats://tenant-a:a@$NATS --duration 30s --clients 16 --json keepalive > /dev/null 2>&1 & fpid=$!
      sleep 2
    fi
    echo "B $mode round $r $("$B" bench --url nats://tenant-b:b@$NATS --duration $DUR --clients 16 --json put | tail -1)"
    [ -n "$fpid" ] && { kill $fpid 2>/dev/null; wait $fpid 2>/dev/null; }
    stop
  done
done
fi
if [ -n "${BASELINE:-}" ]; then
  echo "## binary"
  for r in $(seq 1 $ROUNDS); do
    for v in $(order $r baseline this); do
      bin=$B; [ $v = baseline ] && bin=$BASELINE
      start "$bin" no
      for w in put keepalive; do measure "$v round $r" nats://$NATS $w; done
      stop
    done
  done
fi
