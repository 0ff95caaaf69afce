//go:build realnode

package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/procstat"
)

// report collects the suite's timings for make bench's "Real node" table
// (written when REALNODE_REPORT names a file). They are figures, not
// assertions: the suite only bounds hangs.
type report struct {
	rows [][2]string
}

func (r *report) add(what string, d time.Duration) {
	r.rows = append(r.rows, [2]string{what, d.Round(100 * time.Millisecond).String()})
}

// addExact reports d to the millisecond: the times of a failover.
func (r *report) addExact(what string, d time.Duration) {
	r.rows = append(r.rows, [2]string{what, d.Round(time.Millisecond).String()})
}

func (r *report) write(t *testing.T) {
	path := os.Getenv("REALNODE_REPORT")
	if path == "" {
		return
	}
	var b strings.Builder
	b.WriteString("| step | time |\n|---|---|\n")
	for _, row := range r.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

// nodeIdle measures the node's components (their pid files under .cluster)
// over window with nothing of the operator installed: CPU as a share of one
// core, and their summed resident memory.
func (s *suite) nodeIdle(t *testing.T, window time.Duration) {
	pidFiles, _ := filepath.Glob(filepath.Join(s.root, ".cluster", "pids", "*.pid"))
	var pids []int
	for _, f := range pidFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}
	cpu := func() time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			if c, err := procstat.CPU(pid); err == nil {
				sum += c
			}
		}
		return sum
	}
	before := cpu()
	time.Sleep(window)
	used := cpu() - before
	var rssKiB int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kib, _ := strconv.Atoi(f[1])
				rssKiB += kib
			}
		}
	}
	s.report.rows = append(s.report.rows,
		[2]string{fmt.Sprintf("node idle, %d components: CPU over %s", len(pids), window), fmt.Sprintf("%.1f%% of one core", 100*used.Seconds()/window.Seconds())},
		[2]string{"node idle: resident memory", fmt.Sprintf("%d MiB", rssKiB/1024)})
	t.Logf("node idle: %.1f%% of one core, %d MiB resident", 100*used.Seconds()/window.Seconds(), rssKiB/1024)
}
