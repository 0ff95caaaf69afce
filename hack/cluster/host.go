package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// hostState is what up found on the machine before changing it, so that down
// restores exactly that: two sysctls and which hard-coded paths existed.
type hostState struct {
	Sysctls      map[string]string `json:"sysctls"`
	CreatedPaths []string          `json:"createdPaths"`
}

// The node routes Pod traffic, and kube-proxy's Service rules must see bridged
// packets.
var nodeSysctls = map[string]string{
	"net/ipv4/ip_forward":                "1",
	"net/bridge/bridge-nf-call-iptables": "1",
}

func (n node) hostStateFile() string { return n.path("host-state.json") }

// prepareHost records the host's state (once: a second up keeps the first
// record) and sets the sysctls the node needs.
func prepareHost(n node) error {
	var st hostState
	b, err := os.ReadFile(n.hostStateFile())
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%s: %w", n.hostStateFile(), err)
		}
	case errors.Is(err, os.ErrNotExist):
		st = hostState{Sysctls: map[string]string{}}
		for key := range nodeSysctls {
			v, err := os.ReadFile("/proc/sys/" + key)
			if err != nil {
				return fmt.Errorf("sysctl %s: %w (the node needs it; docs/operations.md)", key, err)
			}
			st.Sysctls[key] = strings.TrimSpace(string(v))
		}
		for _, p := range hostPaths {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				st.CreatedPaths = append(st.CreatedPaths, p)
			}
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(n.hostStateFile(), b, 0o600); err != nil {
			return err
		}
	default:
		return err
	}
	for key, v := range nodeSysctls {
		if err := os.WriteFile("/proc/sys/"+key, []byte(v), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, v, err)
		}
	}
	return nil
}

// restoreHost puts the sysctls back and removes the hard-coded paths up created.
func restoreHost(n node) error {
	b, err := os.ReadFile(n.hostStateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st hostState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%s: %w", n.hostStateFile(), err)
	}
	var errs []error
	for key, v := range st.Sysctls {
		if err := os.WriteFile("/proc/sys/"+key, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", key, v, err))
		}
	}
	for _, p := range st.CreatedPaths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
