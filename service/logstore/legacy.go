package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// The log of releases before the WAL: one bbolt file, raft.db, with a
// "logs" bucket (8-byte big-endian index → encoded entry) and a "stable"
// bucket (key → value; integers as 8 bytes big-endian). Only migration
// reads it, read-only.
var (
	legacyLogs   = []byte("logs")
	legacyStable = []byte("stable")
)

// legacyUint64Keys are the stable keys hashicorp/raft writes with
// SetUint64 (v1.8.0: raft.go's keyCurrentTerm and keyLastVoteTerm); the old
// store wrote them big-endian, the WAL little-endian. Its third key,
// LastVoteCand, is bytes and is copied as it is.
var legacyUint64Keys = map[string]bool{"CurrentTerm": true, "LastVoteTerm": true}

// legacyFormat is the first byte of every entry the old store wrote.
const legacyFormat = 1

// errCorrupt reports an old log that cannot be read back faithfully.
var errCorrupt = errors.New("corrupt raft.db")

// legacyLog is raft.db opened read-only.
type legacyLog struct {
	db *bolt.DB // nil for an empty (zero-length) file
}

func openLegacy(path string) (*legacyLog, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if st.Size() == 0 {
		// The old release crashed while creating the file: nothing in it.
		return &legacyLog{}, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &legacyLog{db: db}, nil
}

func (l *legacyLog) close() error {
	if l.db == nil {
		return nil
	}
	return l.db.Close()
}

func (l *legacyLog) view(f func(logs, stable *bolt.Bucket) error) error {
	if l.db == nil {
		return f(nil, nil)
	}
	return l.db.View(func(tx *bolt.Tx) error { return f(tx.Bucket(legacyLogs), tx.Bucket(legacyStable)) })
}

// bounds returns the first and last index, 0 and 0 for an empty log.
func (l *legacyLog) bounds() (first, last uint64, err error) {
	err = l.view(func(logs, _ *bolt.Bucket) error {
		if logs == nil {
			return nil
		}
		c := logs.Cursor()
		if k, _ := c.First(); k != nil {
			if first, err = indexOf(k); err != nil {
				return err
			}
		}
		if k, _ := c.Last(); k != nil {
			last, err = indexOf(k)
		}
		return err
	})
	return first, last, err
}

// stable returns every stable key with its value in the WAL's encoding.
func (l *legacyLog) stable() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := l.view(func(_, stable *bolt.Bucket) error {
		if stable == nil {
			return nil
		}
		return stable.ForEach(func(k, v []byte) error {
			if legacyUint64Keys[string(k)] {
				if len(v) != 8 {
					return fmt.Errorf("%w: stable key %s holds %d bytes, not an integer", errCorrupt, k, len(v))
				}
				v = binary.LittleEndian.AppendUint64(nil, binary.BigEndian.Uint64(v))
			} else {
				v = append([]byte(nil), v...)
			}
			out[string(k)] = v
			return nil
		})
	})
	return out, err
}

// forEachBatch decodes the entries in index order and hands them to f in
// batches of at most maxEntries entries or about maxBytes of data. It
// refuses a gap: Raft's log is contiguous.
func (l *legacyLog) forEachBatch(maxEntries, maxBytes int, f func([]*raft.Log) error) error {
	return l.view(func(logs, _ *bolt.Bucket) error {
		if logs == nil {
			return nil
		}
		var batch []*raft.Log
		size := 0
		var prev uint64
		c := logs.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			idx, err := indexOf(k)
			if err != nil {
				return err
			}
			if prev != 0 && idx != prev+1 {
				return fmt.Errorf("%w: log entry %d follows %d", errCorrupt, idx, prev)
			}
			prev = idx
			e := &raft.Log{Index: idx}
			if err := decodeLegacy(v, e); err != nil {
				return fmt.Errorf("log entry %d: %w", idx, err)
			}
			batch = append(batch, e)
			size += len(e.Data) + len(e.Extensions)
			if len(batch) >= maxEntries || size >= maxBytes {
				if err := f(batch); err != nil {
					return err
				}
				batch, size = nil, 0
			}
		}
		if len(batch) > 0 {
			return f(batch)
		}
		return nil
	})
}

func indexOf(k []byte) (uint64, error) {
	if len(k) != 8 {
		return 0, fmt.Errorf("%w: log key of %d bytes", errCorrupt, len(k))
	}
	return binary.BigEndian.Uint64(k), nil
}

// decodeLegacy reads the old entry encoding: format byte, term (uvarint),
// type (one byte), appended-at (varint unix ns, 0 for none), then data and
// extensions, each uvarint-length-prefixed. It copies the bytes: bbolt's
// memory is only valid inside the transaction.
func decodeLegacy(b []byte, l *raft.Log) error {
	if len(b) < 1 || b[0] != legacyFormat {
		return fmt.Errorf("%w: unknown entry format", errCorrupt)
	}
	b = b[1:]
	term, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+1 {
		return fmt.Errorf("%w: term", errCorrupt)
	}
	l.Term = term
	l.Type = raft.LogType(b[n])
	b = b[n+1:]
	at, n := binary.Varint(b)
	if n <= 0 {
		return fmt.Errorf("%w: appended-at", errCorrupt)
	}
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	b = b[n:]
	var err error
	if l.Data, b, err = readBytes(b); err != nil {
		return fmt.Errorf("%w: data: %v", errCorrupt, err)
	}
	if l.Extensions, b, err = readBytes(b); err != nil {
		return fmt.Errorf("%w: extensions: %v", errCorrupt, err)
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(b))
	}
	return nil
}

func readBytes(b []byte) ([]byte, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, errors.New("length out of range")
	}
	b = b[k:]
	if n == 0 {
		return nil, b, nil
	}
	return append([]byte(nil), b[:n]...), b[n:], nil
}
