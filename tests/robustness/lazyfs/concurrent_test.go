package lazyfs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// Writers working on their own files at once, while others create, rename
// and unlink around them, each get back exactly what they last fsynced.
// Under -race this also checks the tracker's locking.
func TestConcurrentWritersGetTheirFsyncedData(t *testing.T) {
	for _, model := range []Model{Strict, Ext4Ordered} {
		t.Run(model.String(), func(t *testing.T) {
			d := mounted(t, model)
			const writers = 4
			for w := range writers {
				d.writeFile(fmt.Sprintf("w%d", w), "")
			}
			d.fsync(".")
			want := make([][]byte, writers)
			var wg sync.WaitGroup
			errs := make(chan error, writers+1)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- writeAndSync(d.p(fmt.Sprintf("w%d", w)), uint64(w), &want[w])
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- churn(d)
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			d.cut()
			for w := range writers {
				d.expectBytes(fmt.Sprintf("w%d", w), want[w])
			}
		})
	}
}

// writeAndSync writes at random offsets and fsyncs now and then, leaving in
// synced what the file held at its last fsync.
func writeAndSync(path string, seed uint64, synced *[]byte) error {
	rng := rand.New(rand.NewPCG(seed, 99))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var cur []byte
	for range 150 {
		off := rng.IntN(len(cur) + 512)
		rec := randomBytes(rng, 1+rng.IntN(256))
		if _, err := f.WriteAt(rec, int64(off)); err != nil {
			return err
		}
		if grow := off + len(rec); grow > len(cur) {
			cur = append(cur, make([]byte, grow-len(cur))...)
		}
		copy(cur[off:], rec)
		if rng.IntN(3) == 0 {
			if err := f.Sync(); err != nil {
				return err
			}
			*synced = bytes.Clone(cur)
		}
	}
	return nil
}

// churn changes the directory the writers' files are in.
func churn(d *disk) error {
	for i := range 100 {
		name := d.p(fmt.Sprintf("tmp%d", i%7))
		if err := os.WriteFile(name, []byte("x"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(name, d.p("renamed")); err != nil {
			return err
		}
		if i%3 == 0 {
			if err := os.Remove(d.p("renamed")); err != nil {
				return err
			}
		}
		if i%10 == 0 {
			dir, err := os.Open(d.p("."))
			if err != nil {
				return err
			}
			err = dir.Sync()
			dir.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}
