package fsm

import "testing"

// t0 is the lease-clock time (ms) the table tests start at.
const t0 = 1_000_000

// step is one command of a test's set-up: it must succeed.
type step struct {
	now  int64
	body any
}

func run(t testing.TB, s *State, steps ...step) {
	t.Helper()
	for _, st := range steps {
		mustApply(t, s, st.now, st.body)
	}
}

// cmdCase is one row of a command table: set-up steps, then one command
// stamped at now (0: the clock after the set-up) that must succeed, or fail
// with wantErr and change nothing.
type cmdCase struct {
	name    string
	setup   []step
	now     int64
	cmd     any
	wantErr error
	check   func(t *testing.T, s *State, r Result)
}

func runCases(t *testing.T, cases []cmdCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			run(t, s, tc.setup...)
			var r Result
			if tc.wantErr != nil {
				r = mustFail(t, s, tc.cmd, tc.wantErr)
			} else {
				now := tc.now
				if now == 0 {
					now = s.Now()
				}
				r = mustApply(t, s, now, tc.cmd)
				if r.Op != opOf(tc.cmd) {
					t.Fatalf("result op %v, want %v", r.Op, opOf(tc.cmd))
				}
			}
			if err := checkInvariants(s); err != nil {
				t.Fatalf("invariant: %v", err)
			}
			if tc.check != nil {
				tc.check(t, s, r)
			}
		})
	}
}

// opOf finds a body's op through the table, as the encoder does.
func opOf(body any) Op {
	if c, ok := body.(Command); ok {
		return opOf(c.Body)
	}
	op, _ := opOfBody(body)
	return op
}
