package cloudkit_test

import (
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

func TestExitRanges(t *testing.T) {
	asked := map[string]string{cloudkit.LabelExitRange: cloudkit.ExitRangeIPv6}
	for name, tc := range map[string]struct {
		labels   map[string]string
		prefixes []string
		want     []string
	}{
		"not asked for":                {prefixes: []string{"2001:db8::/64"}},
		"another label value":          {labels: map[string]string{cloudkit.LabelExitRange: "ipv4"}, prefixes: []string{"2001:db8::/64"}},
		"asked, none yet":              {labels: asked},
		"a host address is its prefix": {labels: asked, prefixes: []string{"2001:db8:0:1::1/96"}, want: []string{"2001:db8:0:1::/96"}},
		"sorted, no duplicates":        {labels: asked, prefixes: []string{"2001:db8:2::/64", " 2001:db8:1::/64", "2001:db8:2::/64"}, want: []string{"2001:db8:1::/64", "2001:db8:2::/64"}},
		"IPv4 and garbage left out":    {labels: asked, prefixes: []string{"192.0.2.0/24", "::ffff:192.0.2.0/120", "2001:db8::", "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, cloudkit.ExitRanges(tc.labels, tc.prefixes)); diff != "" {
				t.Errorf("ExitRanges (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUserDataWithoutExitRangeHasNoBootScript(t *testing.T) {
	ud, err := cloudkit.UserData("hetzner", request("a", "h1"), nil, 3128, 32*1024)
	if err != nil {
		t.Fatal(err)
	}
	if doc := operatorPart(t, ud); doc.BootCmd != nil || doc.Packages != nil || strings.Contains(doc.WriteFiles[0].Content, "PROXY_EXIT_RANGES_FILE") {
		t.Errorf("user-data without an exit range sets one up: %+v", doc)
	}
}

// TestExitRangeBootScript runs the boot script the user-data carries with
// sh, its commands (ip, systemctl, ndppd) stubbed to record their
// arguments and its /etc under a temporary directory: the local route of
// each prefix, ndppd's rule for it, and the exit-ranges file the proxy's
// --exit-range flags come from; and no file when the cloud routes nothing.
func TestExitRangeBootScript(t *testing.T) {
	for name, tc := range map[string]struct {
		discover          string
		ndp               bool
		wantFail          bool
		wantIP, wantNDP   string
		wantEnv, wantPkgs string
	}{
		"routed prefix": {
			discover: `printf '2001:db8:1:2:3::/80\n'`,
			wantIP:   "-6 route replace local 2001:db8:1:2:3::/80 dev lo\n",
			wantEnv:  "PROXY_EXIT_RANGES='2001:db8:1:2:3::/80'\n",
		},
		"on-link prefixes with NDP": {
			discover: `printf '2001:db8:5::/64\n2001:db8:6::/64\n'`, ndp: true,
			wantIP:  "-6 route replace local 2001:db8:5::/64 dev lo\n-6 route replace local 2001:db8:6::/64 dev lo\n-6 route show default\n",
			wantNDP: "proxy eth0 {\n  rule 2001:db8:5::/64 { static }\n  rule 2001:db8:6::/64 { static }\n}\n",
			wantEnv: "PROXY_EXIT_RANGES='2001:db8:5::/64 2001:db8:6::/64'\n", wantPkgs: "ndppd",
		},
		"nothing routed": {discover: "true", wantFail: true},
	} {
		t.Run(name, func(t *testing.T) {
			ud, err := cloudkit.UserData("hetzner", request("a", "h1"), nil, 3128, 32*1024, cloudkit.WithExitRange(cloudkit.ExitRangeBoot{Discover: tc.discover, NDP: tc.ndp}))
			if err != nil {
				t.Fatal(err)
			}
			doc := operatorPart(t, ud)
			if !strings.Contains(doc.WriteFiles[0].Content, "PROXY_EXIT_RANGES_FILE='"+cloudkit.ExitRangesFile+"'") {
				t.Errorf("the settings file does not name the exit-ranges file:\n%s", doc.WriteFiles[0].Content)
			}
			if got := strings.Join(doc.Packages, " "); got != tc.wantPkgs {
				t.Errorf("packages %q, want %q", got, tc.wantPkgs)
			}
			if len(doc.BootCmd) != 1 || len(doc.BootCmd[0]) != 3 || doc.BootCmd[0][0] != "sh" {
				t.Fatalf("bootcmd %q, want one sh -c script", doc.BootCmd)
			}
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			stub(t, bin, "ip", `echo "$*" >> `+dir+`/ip.log; [ "$*" != "-6 route show default" ] || echo "default via fe80::1 dev eth0 proto static metric 1024"`)
			stub(t, bin, "ndppd", "true")
			if err := os.Mkdir(dir+"/etc", 0o755); err != nil { // the image's /etc
				t.Fatal(err)
			}
			stub(t, bin, "systemctl", `echo "$*" >> `+dir+`/systemctl.log`)
			script := strings.ReplaceAll(doc.BootCmd[0][2], "/etc/", dir+"/etc/")
			integration.Needs(t, "sh run as a process")
			cmd := exec.Command("sh", "-c", script)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if tc.wantFail {
				if err == nil || !strings.Contains(string(out), "routes no IPv6 prefix") {
					t.Errorf("script = %v, %s; want a failure naming the missing prefix", err, out)
				}
				if _, err := os.Stat(dir + cloudkit.ExitRangesFile); err == nil {
					t.Error("the exit-ranges file was written without a prefix")
				}
				return
			}
			if err != nil {
				t.Fatalf("script: %v\n%s", err, out)
			}
			got := map[string]string{"ip": read(t, dir+"/ip.log"), "env": read(t, dir+cloudkit.ExitRangesFile), "ndppd.conf": read(t, dir+"/etc/ndppd.conf"), "systemctl": read(t, dir+"/systemctl.log")}
			want := map[string]string{"ip": tc.wantIP, "env": tc.wantEnv, "ndppd.conf": tc.wantNDP, "systemctl": ""}
			if tc.ndp {
				want["systemctl"] = "restart ndppd\n"
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("what the script did (-want +got):\n%s", diff)
			}
		})
	}
}

type operatorDoc struct {
	WriteFiles []struct{ Path, Content string } `json:"write_files"`
	BootCmd    [][]string                       `json:"bootcmd"`
	Packages   []string                         `json:"packages"`
}

// operatorPart is the operator's cloud-config part of a user-data.
func operatorPart(t *testing.T, ud []byte) operatorDoc {
	t.Helper()
	msg, err := mail.ReadMessage(strings.NewReader(string(ud)))
	if err != nil {
		t.Fatal(err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	parts := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := parts.NextPart()
		if err != nil {
			t.Fatalf("no proxy-operator.cfg part: %v", err)
		}
		if part.FileName() != "proxy-operator.cfg" {
			continue
		}
		body, _ := io.ReadAll(part)
		var doc operatorDoc
		if err := json.Unmarshal([]byte(strings.TrimPrefix(string(body), "#cloud-config\n")), &doc); err != nil || len(doc.WriteFiles) != 1 {
			t.Fatalf("proxy-operator.cfg: %v, %d files", err, len(doc.WriteFiles))
		}
		return doc
	}
}

func stub(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// read is a file's content, "" when it does not exist.
func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
