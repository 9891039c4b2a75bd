package schema

import (
	"strings"
	"testing"
	"time"
)

func TestDeadlineHeader(t *testing.T) {
	at := time.UnixMilli(1_765_000_000_123)
	if got, err := ParseDeadline(FormatDeadline(at)); err != nil || !got.Equal(at) {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	if got, err := ParseDeadline(""); err != nil || !got.IsZero() {
		t.Fatalf("no header: %v, %v", got, err)
	}
	for _, bad := range []string{"0", "-5", "1.5", "soon", "2026-12-06T05:00:00Z", " 1765000000123", "12345678901234567", strings.Repeat("9", 60)} {
		_, err := ParseDeadline(bad)
		if err == nil || !strings.Contains(err.Error(), HeaderDeadline) || !strings.Contains(err.Error(), "unix time in milliseconds") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
