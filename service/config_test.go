package service

import (
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// A zero Config becomes DefaultConfig, with the default logger.
func TestFillDefaultsOfZeroConfigIsDefaultConfig(t *testing.T) {
	var got Config
	got.fillDefaults()
	want := DefaultConfig()
	want.Logger = slog.Default()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fillDefaults of a zero Config:\n got  %+v\n want %+v", got, want)
	}
}

// A field that is set keeps its value; only the zero ones are filled.
func TestFillDefaultsKeepsSetFields(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	cfg := Config{
		NodeID:       "n7",
		TickInterval: 250 * time.Millisecond,
		MaxInflight:  3,
		MinTTL:       9,
		MaxTxnBytes:  77,
		HistoryAge:   time.Minute,
		NATSRoutes:   []string{"nats://127.0.0.1:6222"},
		Bootstrap:    true,
		Logger:       logger,
	}
	cfg.fillDefaults()
	d := DefaultConfig()
	checks := []struct {
		name      string
		got, want any
	}{
		{"NodeID", cfg.NodeID, "n7"},
		{"TickInterval", cfg.TickInterval, 250 * time.Millisecond},
		{"MaxInflight", cfg.MaxInflight, 3},
		{"MinTTL", cfg.MinTTL, int64(9)},
		{"MaxTxnBytes", cfg.MaxTxnBytes, 77},
		{"HistoryAge", cfg.HistoryAge, time.Minute},
		{"NATSRoutes", cfg.NATSRoutes, []string{"nats://127.0.0.1:6222"}},
		{"Bootstrap", cfg.Bootstrap, true},
		{"Logger", cfg.Logger, logger},
		{"DataDir", cfg.DataDir, d.DataDir},
		{"MaxValueBytes", cfg.MaxValueBytes, d.MaxValueBytes},
		{"HistoryRevisions", cfg.HistoryRevisions, d.HistoryRevisions},
		{"NATSListen", cfg.NATSListen, d.NATSListen},
		{"Join", cfg.Join, false},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// With a NATS configuration file, an empty listen address means the
// file's; without one it is the default.
func TestFillDefaultsNATSListen(t *testing.T) {
	d := DefaultConfig()
	cases := []struct {
		file, listen, want string
	}{
		{"", "", d.NATSListen},
		{"", "127.0.0.1:4333", "127.0.0.1:4333"},
		{"nats.conf", "", ""},
		{"nats.conf", "127.0.0.1:4333", "127.0.0.1:4333"},
	}
	for _, c := range cases {
		cfg := Config{NATSConfigFile: c.file, NATSListen: c.listen}
		cfg.fillDefaults()
		if cfg.NATSListen != c.want {
			t.Errorf("file %q, listen %q: NATSListen %q, want %q", c.file, c.listen, cfg.NATSListen, c.want)
		}
	}
}

// The replicated limits' defaults are the same numbers in the
// configuration and in a new state machine.
func TestDefaultConfigMatchesFSMDefaultLimits(t *testing.T) {
	d := DefaultConfig()
	got := fsm.Limits{
		MaxLeases: d.MaxLeases, MaxKeysPerLease: d.MaxKeysPerLease,
		IdempotencyEntries: d.IdempotencyEntries, IdempotencyRevisions: d.IdempotencyRevisions,
		HistoryRevisions: d.HistoryRevisions, HistoryAgeMS: d.HistoryAge.Milliseconds(),
	}
	if got != fsm.DefaultLimits {
		t.Errorf("DefaultConfig's limits %+v, fsm.DefaultLimits %+v", got, fsm.DefaultLimits)
	}
	if d.MinTTL != schema.DefaultMinTTL || d.MaxTxnCompares != schema.DefaultMaxTxnCompares || d.MaxTxnOps != schema.DefaultMaxTxnOps {
		t.Errorf("DefaultConfig's request limits differ from schema's defaults: %+v", d)
	}
}

// A Raft TLS setting its files do not back is a configuration error, and
// says what is wrong with the files.
func TestValidateRefusesBadRaftTLS(t *testing.T) {
	cfg := Config{RaftTLS: RaftTLS{CertFile: filepath.Join(t.TempDir(), "nope.pem")}}
	cfg.fillDefaults()
	err := cfg.validate()
	if !errors.Is(err, ErrConfig) || !errors.Is(err, ErrRaftTLS) || !strings.Contains(err.Error(), "a private key is required") {
		t.Fatalf("validate: %v, want ErrConfig and ErrRaftTLS saying a key is required", err)
	}
}

// A console anyone on the network could read is refused: an address
// other than loopback needs a password; loopback may go without.
func TestValidateConsole(t *testing.T) {
	for _, c := range []struct {
		listen, user, password string
		refused                string
	}{
		{"", "", "", ""},
		{"127.0.0.1:8080", "", "", ""},
		{"[::1]:8080", "", "", ""},
		{"localhost:8080", "", "", ""},
		{"0.0.0.0:8080", "operator", "", "is not a loopback address, and the console has no password"},
		{":8080", "operator", "", "is not a loopback address"},
		{"10.0.0.5:8080", "operator", "secret", ""},
		{"10.0.0.5:8080", "", "secret", "no --console-user"},
		{"nonsense", "", "", "--console-listen"},
	} {
		cfg := DefaultConfig()
		cfg.ConsoleListen, cfg.ConsoleUser, cfg.ConsolePassword = c.listen, c.user, c.password
		err := cfg.validateConsole()
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%q: refused: %v", c.listen, err)
		case c.refused != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%q user %q password %q: %v, want ErrConfig saying %q", c.listen, c.user, c.password, err, c.refused)
		}
	}
}
