package backupfile

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/concord-io/concord/fsm"
)

// Info is what Verify found in a backup file.
type Info struct {
	// FileVersion is the file's version (FileVersion or older).
	FileVersion int
	// Header is the file's header, as ReadHeader returns it.
	Header Header
	// Keys and Leases count the backup's keys and leases (anonymous
	// leases included).
	Keys   int
	Leases int64
}

// Verify checks a backup file completely: its header, the size and SHA-256
// of its payload, and that the payload decodes into a state at the
// header's revision. It fails with ErrBadBackup, ErrChecksum or
// ErrUnsupported when the file is not one this build can restore.
func Verify(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the backup: %w", err)
	}
	defer f.Close()
	info, _, err := verify(f, nil)
	return info, err
}

// verify is Verify on an open file; it also returns where the payload
// starts.
func verify(f *os.File, p Progress) (*Info, int64, error) {
	br := bufio.NewReaderSize(f, 1<<16)
	h, version, at, err := readHeader(br)
	if err != nil {
		return nil, 0, err
	}
	sum := sha256.New()
	payload, end := pass(p, "checking", h.Size, io.LimitReader(br, h.Size))
	n, err := io.Copy(sum, payload)
	end()
	if err != nil {
		return nil, 0, fmt.Errorf("read the backup: %w", err)
	}
	if n < h.Size {
		return nil, 0, fmt.Errorf("%w: truncated: the payload has %d of the %d bytes the header records", ErrBadBackup, n, h.Size)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, 0, fmt.Errorf("%w: data after the payload's %d bytes", ErrBadBackup, h.Size)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.SHA256 {
		return nil, 0, fmt.Errorf("%w: the payload's SHA-256 is %s, the header records %s: the file is corrupt", ErrChecksum, got, h.SHA256)
	}
	st := fsm.New()
	payload, end = pass(p, "decoding", h.Size, io.NewSectionReader(f, at, h.Size))
	err = st.Restore(payload)
	end()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: the payload does not decode: %w", ErrBadBackup, err)
	}
	if st.Revision() != h.Revision {
		return nil, 0, fmt.Errorf("%w: the payload holds revision %d, the header records %d", ErrBadBackup, st.Revision(), h.Revision)
	}
	explicit, anonymous := st.LeaseCount()
	return &Info{FileVersion: version, Header: h, Keys: st.KeyCount(), Leases: explicit + anonymous}, at, nil
}
