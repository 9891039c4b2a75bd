//go:build !failpoints

package failpoint

// Enabled reports whether this build has the points.
const Enabled = false

// Inject does nothing: this build has no points.
func Inject(string) {}
