package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// unit says how a scale row's figures print.
type unit int

const (
	perSecond unit = iota // 10,213
	bytesMiB              // 990 MiB
	seconds               // 9.50 s
	millis                // 83.0 ms
	factor                // 1.93
	pctCore               // 2.4%
	whole                 // 12
)

// scaleRow is one line of the table: Concord's figure, etcd's, and their
// ratio. A figure the run did not measure is nil and prints as "-".
type scaleRow struct {
	name string
	c, e *float64
	unit unit
}

func (u unit) format(x *float64) string {
	if x == nil {
		return "-"
	}
	v := *x
	switch u {
	case perSecond:
		return thousands(v)
	case bytesMiB:
		return mib(v)
	case seconds:
		return fmt.Sprintf("%.2f s", v)
	case millis:
		if v < 10 {
			return fmt.Sprintf("%.2f ms", v)
		}
		return fmt.Sprintf("%.1f ms", v)
	case factor:
		return fmt.Sprintf("%.2f", v)
	case pctCore:
		return fmt.Sprintf("%.1f%%", v)
	default:
		return thousands(v)
	}
}

// mib formats a number of bytes in MiB.
func mib(b float64) string {
	m := b / (1 << 20)
	if m < 100 {
		return fmt.Sprintf("%.1f MiB", m)
	}
	return thousands(m) + " MiB"
}

// scaleRatio is Concord ÷ etcd, or "-" when either is missing or etcd's is
// zero.
func scaleRatio(c, e *float64) string {
	if c == nil || e == nil || *e == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", *c / *e)
}

// msOf turns seconds into milliseconds; nil stays nil.
func msOf(s *float64) *float64 {
	if s == nil {
		return nil
	}
	return ptr(*s * 1000)
}

// quotient is a ÷ b, or nil when either is missing or b is zero.
func quotient(a, b *float64) *float64 {
	if a == nil || b == nil || *b == 0 {
		return nil
	}
	return ptr(*a / *b)
}

func fint[T int | int64](p *T) *float64 {
	if p == nil {
		return nil
	}
	return ptr(float64(*p))
}

// rows lays out the table from both systems' results; e may be nil.
func (rep *scaleReport) rows() []scaleRow {
	cfg := rep.cfg
	c, e := rep.Concord, rep.Etcd
	if e == nil {
		e = &scaleResult{}
	}
	if c == nil {
		c = &scaleResult{}
	}
	lat := func(r *result, p99 bool) *float64 {
		if r == nil {
			return nil
		}
		if p99 {
			return ptr(r.P99ms)
		}
		return ptr(r.P50ms)
	}
	rk := thousands(float64(cfg.readPrefixKeys()))
	rows := []scaleRow{
		{fmt.Sprintf("load %s keys (%d-byte values), puts/s", thousands(float64(cfg.keys)), cfg.valueBytes), c.LoadPutsPerS, e.LoadPutsPerS, perSecond},
		{"resident memory after the load", fint(c.RSSAfterLoad), fint(e.RSSAfterLoad), bytesMiB},
		{"  the most during the load", fint(c.RSSPeakLoad), fint(e.RSSPeakLoad), bytesMiB},
		{"data directory after the load", fint(c.DiskAfterLoad), fint(e.DiskAfterLoad), bytesMiB},
		{"kill -9, then until a linearizable get answers", c.RestartS, e.RestartS, seconds},
		{"Raft snapshot after the load: time to write it", msOf(c.SnapshotS), msOf(e.SnapshotS), millis},
		{"Raft snapshot after the load: its size", fint(c.SnapshotBytes), fint(e.SnapshotBytes), bytesMiB},
		{fmt.Sprintf("count_only over all keys (median of %d)", cfg.countTries), c.CountMS, e.CountMS, millis},
		{"put p50, no reads", lat(c.PutAlone, false), lat(e.PutAlone, false), millis},
		{"put p99, no reads", lat(c.PutAlone, true), lat(e.PutAlone, true), millis},
		{fmt.Sprintf("put p50, reads of a %s-key prefix back to back", rk), lat(c.PutReads, false), lat(e.PutReads, false), millis},
		{fmt.Sprintf("put p99, reads of a %s-key prefix back to back", rk), lat(c.PutReads, true), lat(e.PutReads, true), millis},
		{"put p99 with reads ÷ without", c.PutP99Growth, e.PutP99Growth, factor},
		{fmt.Sprintf("read of the %s-key prefix, median", rk), c.ReadPassMS, e.ReadPassMS, millis},
		{"reads of the prefix done in the window", fint(c.ReadPasses), fint(e.ReadPasses), whole},
	}
	if cfg.rewrites >= 2 {
		rows = append(rows,
			scaleRow{fmt.Sprintf("rewrites (every key %d times in all), puts/s", cfg.rewrites), c.RewritePutsPerS, e.RewritePutsPerS, perSecond},
			scaleRow{"resident memory after the rewrites", fint(c.RSSAfterRewrite), fint(e.RSSAfterRewrite), bytesMiB},
			scaleRow{"  the most from the restart to the end of the rewrites", fint(c.RSSPeakRewrite), fint(e.RSSPeakRewrite), bytesMiB},
			scaleRow{"data directory after the rewrites", fint(c.DiskAfterRewrite), fint(e.DiskAfterRewrite), bytesMiB},
			scaleRow{"kill -9 after the rewrites, until a get answers", c.RestartRewriteS, e.RestartRewriteS, seconds},
			scaleRow{"  restart after the rewrites ÷ after the load", quotient(c.RestartRewriteS, c.RestartS), quotient(e.RestartRewriteS, e.RestartS), factor},
			scaleRow{"Raft snapshot after the rewrites: time to write it", msOf(c.SnapshotRewriteS), msOf(e.SnapshotRewriteS), millis},
			scaleRow{"Raft snapshot after the rewrites: its size", fint(c.SnapshotRewriteBytes), fint(e.SnapshotRewriteBytes), bytesMiB},
			scaleRow{"  snapshot write after the rewrites ÷ after the load", quotient(c.SnapshotRewriteS, c.SnapshotS), quotient(e.SnapshotRewriteS, e.SnapshotS), factor},
		)
	}
	if cfg.leases > 0 {
		l := thousands(float64(cfg.leases))
		rows = append(rows,
			scaleRow{fmt.Sprintf("grant %s leases (ttl %d s), grants/s", l, cfg.expiryTTL), c.GrantsPerS, e.GrantsPerS, perSecond},
			scaleRow{fmt.Sprintf("%s leases expiring: last deadline to none left", l), c.ExpiryLagS, e.ExpiryLagS, seconds},
			scaleRow{fmt.Sprintf("%s leases kept alive (ttl %d s): server CPU, of a core", l, cfg.keepaliveTTL), c.KeepaliveCPUPct, e.KeepaliveCPUPct, pctCore},
			scaleRow{"  renewals answered per second meanwhile", c.KeepaliveRate, e.KeepaliveRate, perSecond},
		)
	}
	return rows
}

func (rep *scaleReport) versions() (string, string) {
	c, e := "not run", "not run (--only-concord)"
	if rep.Concord != nil {
		c = rep.Concord.Version
	}
	if rep.Etcd != nil {
		e = rep.Etcd.Version
	}
	return c, e
}

// print writes the table, as text or as Markdown, with the machine, the
// date and what each row measured.
func (rep *scaleReport) print(w io.Writer) {
	cfg := rep.cfg
	m := rep.Machine
	cv, ev := rep.versions()
	lines := []string{
		fmt.Sprintf("Concord against etcd at scale on %s, the run took %s", rep.Date, (time.Duration(rep.Elapsed * float64(time.Second))).Round(time.Second)),
		fmt.Sprintf("machine: %d × %s, %d GiB, Linux %s; load average %s when the run began", m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadAvg1),
		fmt.Sprintf("concord %s; etcd %s", cv, ev),
		fmt.Sprintf("one fresh single server of each, in turn, default settings; load and grants from %d connections × %d requests in flight; "+
			"puts from %d closed-loop clients, %s warm-up then %s measured, alone and beside %d reader(s) of %s keys in pages of up to %s, "+
			"in %d round(s), the round whose p99 ratio is the median shown",
			cfg.clients, cfg.inflight, cfg.putClients, cfg.warmup, cfg.putDuration, cfg.readers, thousands(float64(cfg.readPrefixKeys())), thousands(float64(cfg.pageLimit)),
			cfg.readRounds),
	}
	rows := rep.rows()
	if cfg.markdown {
		for _, l := range lines {
			fmt.Fprintf(w, "- %s\n", l)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| | Concord | etcd | Concord ÷ etcd |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", strings.TrimSpace(r.name), r.unit.format(r.c), r.unit.format(r.e), scaleRatio(r.c, r.e))
		}
	} else {
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%-62s %12s %12s %15s\n", "", "Concord", "etcd", "Concord ÷ etcd")
		for _, r := range rows {
			fmt.Fprintf(w, "%-62s %12s %12s %15s\n", r.name, r.unit.format(r.c), r.unit.format(r.e), scaleRatio(r.c, r.e))
		}
	}
	fmt.Fprintf(w, "\nresident memory: VmRSS of the server process, --settle after the load; the most: its VmHWM then; data directory: its disk usage, as du counts it.\n"+
		"restart: from starting the killed server again to the first answer of a linearizable get, asked every 10 ms;\n"+
		"the median of %d kills and restarts.\n"+
		"snapshot (Concord only; etcd keeps its keys in bbolt, not in Raft snapshots, and has no request that writes one):\n"+
		"after the restarts, one put, then P.cluster.snapshot makes the node write a Raft snapshot of its state and history;\n"+
		"the time is what its concord_snapshot_persist_duration_seconds recorded (encode, write, sync), the median of %d,\n"+
		"the size concord_snapshot_bytes.\n"+
		"reads: each reads every key of the prefix, page after page (Concord also ends a page at its reply size bound).\n"+
		"expiry: from the last grant's answer plus the ttl to the first answer that shows no lease, asked every %s.\n"+
		"keep-alive: every lease renewed every ttl/3 (Concord: keepalive_many of at most %s ids; etcd: keep-alive\n"+
		"streams, one per %s leases); user + system CPU of the server over %s, after one renewal period.\n",
		cfg.restartTries, cfg.snapshotTries, cfg.poll, thousands(renewChunk), thousands(renewChunk), cfg.keepaliveWindow)
}
