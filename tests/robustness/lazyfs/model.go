package lazyfs

import "fmt"

// Model chooses what an fsync makes durable; see the package documentation
// for the exact rules.
type Model int

const (
	// Strict is POSIX at its weakest: file data is durable as of the
	// file's last fsync, directory entries as of the directory's last
	// fsync. It finds missing directory fsyncs that ext4 would forgive.
	Strict Model = iota
	// Ext4Ordered is Strict, except that any fsync also makes every
	// directory's current entries durable, as an ext4 journal commit
	// does. It is what most production disks behave like.
	Ext4Ordered
)

// String names the model; tests use it as a subtest name.
func (m Model) String() string {
	switch m {
	case Strict:
		return "Strict"
	case Ext4Ordered:
		return "Ext4Ordered"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

func (m Model) valid() bool { return m == Strict || m == Ext4Ordered }
