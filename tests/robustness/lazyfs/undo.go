package lazyfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// spillThreshold is the size above which old bytes are kept in a spill
// file rather than in memory: truncating a 64 MiB durable segment to zero
// must not hold 64 MiB on the heap until the next fsync.
const spillThreshold = 1 << 20

// undoLog holds what is needed to bring a file back to its durable data: the
// size it had at its last fsync and, oldest first, the bytes that changes
// since then overwrote within that size.
type undoLog struct {
	durableSize int64
	records     []undoRecord
}

// undoRecord is the old content of one range, in memory (data) or in a spill
// file (spill, n bytes).
type undoRecord struct {
	off   int64
	data  []byte
	spill string
	n     int64
}

// spiller names spill files; one per FS.
type spiller struct {
	dir  string
	next atomic.Uint64
}

// newUndoLog starts a log for a file whose current data on fd is durable.
func newUndoLog(fd int) (*undoLog, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat file to start its undo log: %w", err)
	}
	return &undoLog{durableSize: st.Size}, nil
}

// save records the current bytes of [off, off+n) that lie within the
// durable size, before a change overwrites them. Bytes past the current end
// of file need nothing: the shrink that cut them off already saved them.
func (l *undoLog) save(fd int, off, n int64, sp *spiller) error {
	if off < 0 || n <= 0 {
		return nil
	}
	end := min(off+n, l.durableSize)
	if off >= end {
		return nil
	}
	size := end - off
	if size <= spillThreshold {
		buf := make([]byte, size)
		got, err := preadFull(fd, buf, off)
		if err != nil {
			return fmt.Errorf("save old bytes at %d+%d: %w", off, size, err)
		}
		if got > 0 {
			l.records = append(l.records, undoRecord{off: off, data: buf[:got], n: int64(got)})
		}
		return nil
	}
	path := filepath.Join(sp.dir, strconv.FormatUint(sp.next.Add(1), 10))
	got, err := spillRange(fd, off, size, path)
	if err != nil {
		return err
	}
	if got > 0 {
		l.records = append(l.records, undoRecord{off: off, spill: path, n: got})
	} else {
		_ = os.Remove(path)
	}
	return nil
}

// saveShrink records what a change of size to newSize on fd cuts off.
func (l *undoLog) saveShrink(fd int, newSize int64, sp *spiller) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat file before resize: %w", err)
	}
	if newSize >= st.Size {
		return nil
	}
	return l.save(fd, newSize, st.Size-newSize, sp)
}

// apply brings the file open on fd back to its durable data: the newest
// record first, so that the oldest bytes of a range overwritten twice win.
func (l *undoLog) apply(fd int) error {
	for i := len(l.records) - 1; i >= 0; i-- {
		r := l.records[i]
		if r.spill == "" {
			if _, err := pwriteFull(fd, r.data, r.off); err != nil {
				return fmt.Errorf("restore %d bytes at %d: %w", len(r.data), r.off, err)
			}
			continue
		}
		if err := unspillRange(fd, r.off, r.spill); err != nil {
			return err
		}
	}
	if err := unix.Ftruncate(fd, l.durableSize); err != nil {
		return fmt.Errorf("truncate to durable size %d: %w", l.durableSize, err)
	}
	return nil
}

// discard forgets the log, removing its spill files.
func (l *undoLog) discard() {
	if l == nil {
		return
	}
	for _, r := range l.records {
		if r.spill != "" {
			_ = os.Remove(r.spill)
		}
	}
	l.records = nil
}

func preadFull(fd int, buf []byte, off int64) (int, error) {
	got := 0
	for got < len(buf) {
		n, err := unix.Pread(fd, buf[got:], off+int64(got))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			break
		}
		got += n
	}
	return got, nil
}

func pwriteFull(fd int, buf []byte, off int64) (int, error) {
	done := 0
	for done < len(buf) {
		n, err := unix.Pwrite(fd, buf[done:], off+int64(done))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// spillRange copies up to n bytes at off from fd into a new file at path and
// returns how many there were.
func spillRange(fd int, off, n int64, path string) (int64, error) {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("create spill file: %w", err)
	}
	defer out.Close()
	buf := make([]byte, spillThreshold)
	var done int64
	for done < n {
		chunk := buf[:min(int64(len(buf)), n-done)]
		got, err := preadFull(fd, chunk, off+done)
		if err != nil {
			return done, fmt.Errorf("read old bytes at %d for spill: %w", off+done, err)
		}
		if got == 0 {
			break
		}
		if _, err := out.Write(chunk[:got]); err != nil {
			return done, fmt.Errorf("write spill file: %w", err)
		}
		done += int64(got)
		if got < len(chunk) {
			break
		}
	}
	return done, nil
}

// unspillRange writes a spill file's bytes back at off on fd.
func unspillRange(fd int, off int64, path string) error {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open spill file: %w", err)
	}
	defer in.Close()
	buf := make([]byte, spillThreshold)
	for {
		got, err := io.ReadFull(in, buf)
		if got > 0 {
			if _, werr := pwriteFull(fd, buf[:got], off); werr != nil {
				return fmt.Errorf("restore spilled bytes at %d: %w", off, werr)
			}
			off += int64(got)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read spill file: %w", err)
		}
	}
}
