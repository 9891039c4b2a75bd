package fsm

import (
	"bytes"
	"time"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

func TestZZMem(t *testing.T) {
	if os.Getenv("ZZMEM") == "" {
		t.Skip()
	}
	s := New()
	mustApply(t, s, t0, benchLimits)
	v := `"` + strings.Repeat("x", 98) + `"`
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	n := 1_000_000
	for i := 0; i < n; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("scale.%d.%08d", i/100000, i), Value: val(v)})
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("heap per key %d B, hist %d", (m1.HeapAlloc-m0.HeapAlloc)/uint64(n), s.HistoryChanges())
	for i := 0; i < 3; i++ {
		st := time.Now()
		runtime.GC()
		t.Logf("GC %v", time.Since(st))
	}
	f, _ := os.Create("/tmp/zzheap.pprof")
	pprof.WriteHeapProfile(f)
	f.Close()
	runtime.KeepAlive(s)
}


func TestZZSnapSize(t *testing.T) {
	if os.Getenv("ZZMEM") == "" {
		t.Skip()
	}
	s := New()
	mustApply(t, s, t0, benchLimits)
	v := `"` + strings.Repeat("x", 98) + `"`
	for i := 0; i < 1_000_000; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("scale.%d.%08d", i/100000, i), Value: val(v)})
	}
	var buf bytes.Buffer
	n, _ := s.Snapshot().WriteTo(&buf)
	t.Logf("snapshot %d bytes", n)
	os.WriteFile("/tmp/zzsnap.json", buf.Bytes(), 0o644)
	start := time.Now()
	ns := New()
	if err := ns.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore %v", time.Since(start))
}
