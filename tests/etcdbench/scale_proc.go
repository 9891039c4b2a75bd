package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// vmRSS returns the resident memory of process pid in bytes, VmRSS of
// /proc/<pid>/status, and the most it has been since the process started,
// VmHWM.
func vmRSS(pid string) (rss, peak int64, err error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("resident memory of %s: %w", pid, err)
	}
	kb, err := statusKB(string(data), "VmRSS")
	if err != nil {
		return 0, 0, fmt.Errorf("resident memory of %s: %w", pid, err)
	}
	peakKB, err := statusKB(string(data), "VmHWM")
	if err != nil {
		return 0, 0, fmt.Errorf("peak resident memory of %s: %w", pid, err)
	}
	return kb << 10, peakKB << 10, nil
}

// statusKB returns field (VmRSS, VmHWM, ...) of a /proc/<pid>/status text,
// a line such as "VmRSS:\t  123456 kB", in kB.
func statusKB(status, field string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: %q is not a number of kB", field, strings.TrimSpace(rest))
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%s: %q is not a number of kB", field, strings.TrimSpace(rest))
		}
		return v, nil
	}
	return 0, fmt.Errorf("no %s line", field)
}

// dirUsage returns the disk space the files under dir take, as `du -s`
// counts it: allocated blocks, each file once however many links it has.
func dirUsage(dir string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", path)
		}
		k := inode{uint64(st.Dev), st.Ino}
		if !seen[k] {
			seen[k] = true
			total += st.Blocks * 512 // st_blocks counts 512-byte units
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dir, err)
	}
	return total, nil
}
