package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
)

// File names in the state directory, per instance id.
const (
	stateSuffix    = ".json"
	logSuffix      = ".log"
	userDataSuffix = ".user-data"
)

// maxLogScan bounds how much of a log file is read to find the listening
// line, which forward-proxy writes among its first lines.
const maxLogScan = 64 << 10

// state is the content of <dir>/<id>.json: what a restarted operator needs
// to find the process again and to tell it from a process that reuses its pid.
type state struct {
	ID   string `json:"id"`
	PID  int    `json:"pid"`
	Port int32  `json:"port"` // 0 until the process logged it
	Host string `json:"host"`
	// Tags are the instance's tags (provider.Tags); ListByTag filters on them.
	Tags     map[string]string `json:"tags,omitempty"`
	SpecHash string            `json:"specHash,omitempty"`
	// ExitRanges are the process's --exit-range flags (spec.local.exitRanges).
	ExitRanges []string `json:"exitRanges,omitempty"`
	// ProcessStartTime is field 22 of /proc/<pid>/stat (clock ticks after
	// boot): pid and start time together name one process of one boot.
	ProcessStartTime uint64 `json:"processStartTime"`
	// BootID is /proc/sys/kernel/random/boot_id when the process started; after
	// a reboot every recorded process is gone, whatever the pid table says.
	BootID string `json:"bootID,omitempty"`
}

// errCorruptState marks a state file that exists but does not parse.
var errCorruptState = errors.New("corrupt state file")

func (p *Provider) statePath(id string) string    { return filepath.Join(p.dir, id+stateSuffix) }
func (p *Provider) logPath(id string) string      { return filepath.Join(p.dir, id+logSuffix) }
func (p *Provider) userDataPath(id string) string { return filepath.Join(p.dir, id+userDataSuffix) }

// readState reads the state file of id: fs.ErrNotExist when there is none,
// errCorruptState when it does not parse.
func (p *Provider) readState(id string) (state, error) {
	data, err := os.ReadFile(p.statePath(id))
	if err != nil {
		return state{}, fmt.Errorf("local provider: reading state: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil || st.ID != id || st.PID <= 0 {
		return state{}, fmt.Errorf("local provider: %s: %w", p.statePath(id), errCorruptState)
	}
	return st, nil
}

// writeState replaces the state file atomically: readers see the old file
// or the new one, never a part.
func (p *Provider) writeState(st state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	return writeFileAtomic(p.statePath(st.ID), func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// writeFileAtomic writes path through a temporary file in the same
// directory (mode 0600): write, fsync, rename over path, fsync the
// directory. On error the temporary file is removed and path is unchanged.
func writeFileAtomic(path string, write func(*os.File) error) (err error) {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*") // 0600; the dot hides it from ListByTag
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	// The rename is durable once the directory is synced; failing that only
	// risks the new name after a power loss, so it is not an error.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// removeFiles removes every file of id, the state file last.
func (p *Provider) removeFiles(id string) {
	tmps, _ := filepath.Glob(filepath.Join(p.dir, "."+id+".*.tmp-*"))
	for _, f := range append(tmps, p.userDataPath(id), p.logPath(id), p.statePath(id)) {
		_ = os.Remove(f)
	}
}

// listeningPort finds the port in the "listening" line of id's log.
func (p *Provider) listeningPort(id string) (int32, bool) {
	f, err := os.Open(p.logPath(id))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxLogScan))
	sc.Buffer(make([]byte, 4096), maxLogScan)
	for sc.Scan() {
		addr, ok := forwardproxy.ParseListeningLine(sc.Text())
		if !ok {
			continue
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(port, 10, 32)
		if err != nil || n <= 0 || n > 65535 {
			return 0, false
		}
		return int32(n), true
	}
	return 0, false
}

// lastLogLine returns the last line of id's log (for errors: forward-proxy
// never logs credentials or cloud-init content), cut to a readable length.
func (p *Provider) lastLogLine(id string) string {
	data, err := os.ReadFile(p.logPath(id))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	data = bytes.TrimRight(data, "\r\n")
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}
	line := strings.TrimSpace(string(data))
	if line == "" {
		return "(empty log)"
	}
	const maxLen = 300
	if len(line) > maxLen {
		line = line[:maxLen] + "..."
	}
	return line
}
