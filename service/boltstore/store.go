// Package boltstore is a Raft log store and stable store on go.etcd.io/bbolt.
//
// It replaces hashicorp/raft-boltdb, whose v2 drags in the unmaintained
// boltdb v1 and does not build with raft v1.8.0. Every write is one bbolt
// transaction with fsync on: Raft hands StoreLogs a whole batch, so one
// fsync covers every entry proposed concurrently.
package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

var (
	logsBucket   = []byte("logs")
	stableBucket = []byte("stable")
)

// ErrKeyNotFound is returned by Get and GetUint64 for a missing key. Raft
// recognises it by its exact text, "not found".
var ErrKeyNotFound = errors.New("not found")

// logFormat is the first byte of every stored log entry.
const logFormat = 1

// Store implements raft.LogStore and raft.StableStore.
type Store struct {
	db *bolt.DB
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens or creates the store file at path.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: time.Second,
		// The freelist is rebuilt on open instead of written on every
		// commit: fewer pages per fsync on the hot path.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("open raft store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(logsBucket); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(stableBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init raft store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// FirstIndex returns the first stored index, or 0 when the log is empty.
func (s *Store) FirstIndex() (uint64, error) {
	var idx uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(logsBucket).Cursor().First(); k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

// LastIndex returns the last stored index, or 0 when the log is empty.
func (s *Store) LastIndex() (uint64, error) {
	var idx uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(logsBucket).Cursor().Last(); k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

// GetLog reads the entry at index into log.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(logsBucket).Get(indexKey(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		if err := decodeLog(v, log); err != nil {
			return fmt.Errorf("raft log %d: %w", index, err)
		}
		log.Index = index
		return nil
	})
}

// StoreLog stores one entry.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores a batch of entries in one transaction (one fsync).
func (s *Store) StoreLogs(logs []*raft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(logsBucket)
		for _, l := range logs {
			if err := b.Put(indexKey(l.Index), encodeLog(l)); err != nil {
				return fmt.Errorf("store raft log %d: %w", l.Index, err)
			}
		}
		return nil
	})
}

// DeleteRange deletes the entries from min to max inclusive.
func (s *Store) DeleteRange(min, max uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(logsBucket).Cursor()
		for k, _ := c.Seek(indexKey(min)); k != nil; k, _ = c.Next() {
			if binary.BigEndian.Uint64(k) > max {
				break
			}
			if err := c.Delete(); err != nil {
				return fmt.Errorf("delete raft logs %d-%d: %w", min, max, err)
			}
		}
		return nil
	})
}

// Set stores a stable value.
func (s *Store) Set(key, val []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(stableBucket).Put(key, val)
	})
}

// Get reads a stable value; a missing key is ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(stableBucket).Get(key)
		if v == nil {
			return ErrKeyNotFound
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

// SetUint64 stores a stable integer.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 reads a stable integer; a missing key is ErrKeyNotFound.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("stable key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func indexKey(i uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), i) }

// encodeLog writes format, term, type, appended-at (unix ns), then the data
// and the extensions, each length-prefixed.
func encodeLog(l *raft.Log) []byte {
	buf := make([]byte, 0, 1+3*binary.MaxVarintLen64+1+len(l.Data)+len(l.Extensions)+2*binary.MaxVarintLen64)
	buf = append(buf, logFormat)
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.AppendVarint(buf, at)
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	return append(buf, l.Extensions...)
}

var errCorrupt = errors.New("corrupt log entry")

func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < 1 || b[0] != logFormat {
		return fmt.Errorf("%w: unknown format", errCorrupt)
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

// readBytes copies a length-prefixed field: bbolt's memory is only valid
// inside the transaction.
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
