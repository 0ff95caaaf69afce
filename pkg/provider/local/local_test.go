package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// secretReader is a Secrets function over fixed Secrets that records what
// was asked.
type secretReader struct {
	mu      sync.Mutex
	secrets map[string]*corev1.Secret // by namespace/name
	asked   []string
}

func newSecretReader(secrets ...*corev1.Secret) *secretReader {
	r := &secretReader{secrets: map[string]*corev1.Secret{}}
	for _, s := range secrets {
		r.secrets[s.Namespace+"/"+s.Name] = s
	}
	return r
}

func (r *secretReader) get(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, namespace+"/"+name)
	s, ok := r.secrets[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	return s, nil
}

func (r *secretReader) askedFor() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

func TestCreateServesThroughTheProxy(t *testing.T) {
	const user, pass = "crawler", "s3cret-Pa55word"
	httpTarget := proxytest.StartHTTPTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t)
	cloudInit := []byte("#cloud-config\nruncmd: [echo hello]\n")

	tests := map[string]struct {
		auth      bool
		cloudInit []byte
	}{
		// No spec.auth: the credentials the controller generated.
		"no auth":              {},
		"auth from the Secret": {auth: true},
		"cloud-init":           {cloudInit: cloudInit},
		"auth and cloud-init":  {auth: true, cloudInit: cloudInit},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			secrets := newSecretReader(newSecret("proxy-auth", user, pass))
			prov, dir := newTestProvider(t, func(o *local.Options) { o.Secrets = secrets.get })
			var opts []proxyOption
			if tc.auth {
				opts = append(opts, withAuth("proxy-auth"))
			}
			p := newProxy("p1", opts...)
			req := createRequest(p, tc.cloudInit)
			ctx := context.Background()

			created, err := prov.Create(ctx, req)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if created.ID != req.Name || created.State == provider.StateStopped {
				t.Fatalf("Create returned %+v", created)
			}
			inst := waitForState(t, prov, req.Name, provider.StateRunning)
			if inst.IP != "127.0.0.1" || inst.Port <= 0 || inst.Message != local.MessageRunning {
				t.Errorf("instance %+v, want Running on 127.0.0.1", inst)
			}
			if diff := cmp.Diff(provider.Tags(p), inst.Tags); diff != "" {
				t.Errorf("tags (-want +got):\n%s", diff)
			}

			// Requests through the proxy reach the targets: plain HTTP and CONNECT.
			proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(inst.IP, strconv.Itoa(int(inst.Port)))}
			wantUser, wantPass := generatedUser, generatedPass
			if tc.auth {
				wantUser, wantPass = user, pass
			}
			proxyURL.User = url.UserPassword(wantUser, wantPass)
			for target, want := range map[string]int{
				httpTarget.URL + "/echo":          http.StatusOK,
				httpsTarget.URL + "/generate_204": http.StatusNoContent,
			} {
				res, err := proxytest.Fetch(ctx, proxyURL, target, proxytest.RootCAs(httpsTarget))
				if err != nil || res.Status != want {
					t.Errorf("GET %s through the instance: %d, %v; want %d", target, res.Status, err, want)
				}
			}
			// Never open: without credentials, 407, with or without spec.auth.
			noCreds := &url.URL{Scheme: "http", Host: proxyURL.Host}
			res, _ := proxytest.Fetch(ctx, noCreds, httpTarget.URL+"/echo", nil)
			if res.Status != http.StatusProxyAuthRequired {
				t.Errorf("without credentials: status %d, want 407", res.Status)
			}
			if diff := cmp.Diff([]string{testNamespace + "/" + proxyaccess.CredentialsSecret(p)}, secrets.askedFor()); diff != "" {
				t.Errorf("Secrets asked (-want +got):\n%s", diff)
			}

			// The state file records the process.
			st := readStateFile(t, dir, req.Name)
			startTime, err := local.ProcessStartTime(st.PID)
			if err != nil {
				t.Fatal(err)
			}
			bootID, _ := local.BootID()
			want := stateFile{ID: req.Name, PID: st.PID, Port: inst.Port, Host: "127.0.0.1", Tags: provider.Tags(p),
				SpecHash: req.SpecHash, ProcessStartTime: startTime, BootID: bootID}
			if diff := cmp.Diff(want, st); diff != "" {
				t.Errorf("state file (-want +got):\n%s", diff)
			}

			// The process is detached: a session of its own, output in the log.
			if f := procStat(st.PID); f == nil || f[3] != strconv.Itoa(st.PID) {
				t.Errorf("process %d: session %v, want its own", st.PID, f)
			}
			if got := processesLoggingTo(t, dir); !slices.Equal(got, []int{st.PID}) {
				t.Errorf("processes logging to the state dir: %v, want [%d]", got, st.PID)
			}

			// Files: the directory 0700, every file 0600; user-data iff cloud-init.
			if m := fileMode(t, dir); m != 0o700 {
				t.Errorf("state dir mode %v, want 0700", m)
			}
			wantFiles := []string{req.Name + ".json", req.Name + ".log"}
			if tc.cloudInit != nil {
				wantFiles = append(wantFiles, req.Name+".user-data")
			}
			slices.Sort(wantFiles)
			if diff := cmp.Diff(wantFiles, instanceFiles(t, dir, req.Name)); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			for _, f := range wantFiles {
				if m := fileMode(t, filepath.Join(dir, f)); m != 0o600 {
					t.Errorf("%s mode %v, want 0600", f, m)
				}
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID))
			if err != nil {
				t.Fatal(err)
			}
			userData := filepath.Join(dir, req.Name+".user-data")
			if tc.cloudInit != nil {
				got, err := os.ReadFile(userData)
				if err != nil || string(got) != string(tc.cloudInit) {
					t.Errorf("user-data %q, %v; want %q", got, err, tc.cloudInit)
				}
			}
			if hasFlag := strings.Contains(string(cmdline), "--cloud-init="+userData); hasFlag != (tc.cloudInit != nil) {
				t.Errorf("command line %q: --cloud-init present %v, want %v", cmdline, hasFlag, tc.cloudInit != nil)
			}

			// Credentials travel in the environment, and only there; the
			// child gets nothing else of ours.
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID))
			if err != nil {
				t.Fatal(err)
			}
			wantEnv := []string{"PROXY_USERNAME=" + wantUser, "PROXY_PASSWORD=" + wantPass}
			gotEnv := strings.FieldsFunc(string(environ), func(r rune) bool { return r == 0 })
			if diff := cmp.Diff(wantEnv, gotEnv, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("child environment (-want +got):\n%s", diff)
			}
			logData, _ := os.ReadFile(filepath.Join(dir, req.Name+".log"))
			stateData, _ := os.ReadFile(filepath.Join(dir, req.Name+".json"))
			for what, data := range map[string]string{"command line": string(cmdline), "log": string(logData), "state file": string(stateData)} {
				if strings.Contains(data, pass) {
					t.Errorf("the password appears in the %s", what)
				}
				if tc.cloudInit != nil && strings.Contains(data, "echo hello") {
					t.Errorf("the cloud-init content appears in the %s", what)
				}
			}
		})
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	prov, dir := newTestProvider(t)
	ctx := context.Background()
	req := createRequest(newProxy("p1"), nil)
	first, err := prov.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pid := readStateFile(t, dir, req.Name).PID
	waitForState(t, prov, req.Name, provider.StateRunning)

	again, err := prov.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || again.State != provider.StateRunning {
		t.Errorf("second Create: %+v, want the running %s", again, first.ID)
	}
	if got := readStateFile(t, dir, req.Name).PID; got != pid {
		t.Errorf("pid %d after the second Create, want %d", got, pid)
	}
	if got := processesLoggingTo(t, dir); !slices.Equal(got, []int{pid}) {
		t.Errorf("processes %v, want only %d", got, pid)
	}
}

// Concurrent Creates of one name start one process.
func TestConcurrentCreatesStartOneProcess(t *testing.T) {
	prov, dir := newTestProvider(t)
	req := createRequest(newProxy("p1"), nil)
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Go(func() {
			inst, err := prov.Create(context.Background(), req)
			if err != nil {
				t.Error(err)
			}
			ids[i] = inst.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != req.Name {
			t.Errorf("ids %v, want all %s", ids, req.Name)
			break
		}
	}
	if got := processesLoggingTo(t, dir); len(got) != 1 {
		t.Errorf("processes %v, want one", got)
	}
}

// An operator restart is a new Provider over the same directory: it finds
// the instance, and Create returns it rather than starting a second one.
func TestRestartedOperatorFindsItsInstance(t *testing.T) {
	before, dir := newTestProvider(t)
	ctx := context.Background()
	p := newProxy("p1")
	req := createRequest(p, nil)
	if _, err := before.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	running := waitForState(t, before, req.Name, provider.StateRunning)
	pid := readStateFile(t, dir, req.Name).PID

	after, err := local.New(local.Options{StateDir: dir, Binary: proxytest.ForwardProxyBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := after.Get(ctx, req.Name)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(running, got); diff != "" {
		t.Errorf("Get after the restart (-before +after):\n%s", diff)
	}
	created, err := after.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(running, created); diff != "" {
		t.Errorf("Create after the restart (-before +after):\n%s", diff)
	}
	listed, err := after.ListByTag(ctx, crawlv1alpha1.TagProxyUID, string(p.UID))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.Instance{running}, listed); diff != "" {
		t.Errorf("ListByTag after the restart (-want +got):\n%s", diff)
	}
	if got := processesLoggingTo(t, dir); !slices.Equal(got, []int{pid}) {
		t.Errorf("processes %v, want only %d", got, pid)
	}
}

// The operator exits (a helper process that created an instance and
// returned, started with the production process attributes): the instance
// runs on, and the next operator finds it.
func TestInstanceOutlivesTheOperator(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	bin := proxytest.ForwardProxyBinary(t)
	t.Cleanup(func() { deleteAll(t, dir) })
	uid := uuid.NewUUID()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe)
	helper.Env = append(os.Environ(), helperEnv+"="+helperModeStart, helperStateDir+"="+dir,
		helperBinary+"="+bin, helperProxyUID+"="+string(uid))
	out, err := helper.Output()
	if err != nil {
		t.Fatalf("helper operator: %v\n%s", err, out)
	}
	var created provider.Instance
	if err := json.Unmarshal(out, &created); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	// The helper has exited and been reaped.
	if pidAlive(helper.Process.Pid) {
		t.Fatalf("helper %d still alive", helper.Process.Pid)
	}

	st := readStateFile(t, dir, created.ID)
	if !pidAlive(st.PID) {
		t.Fatalf("instance process %d died with the operator", st.PID)
	}
	prov, err := local.New(local.Options{StateDir: dir, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	inst := waitForState(t, prov, created.ID, provider.StateRunning)
	target := proxytest.StartHTTPTarget(t)
	proxyURL := &url.URL{Scheme: "http", Host: net.JoinHostPort(inst.IP, strconv.Itoa(int(inst.Port))), User: url.UserPassword(generatedUser, generatedPass)}
	if res, err := proxytest.Fetch(context.Background(), proxyURL, target.URL+"/echo", nil); err != nil || res.Status != http.StatusOK {
		t.Errorf("through the orphaned-then-adopted instance: %d, %v", res.Status, err)
	}
	if err := prov.Delete(context.Background(), created.ID); err != nil {
		t.Fatal(err)
	}
	if pidAlive(st.PID) {
		t.Errorf("process %d alive after Delete", st.PID)
	}
}

func TestKilledProcessIsStopped(t *testing.T) {
	prov, dir := newTestProvider(t)
	ctx := context.Background()
	req := createRequest(newProxy("p1"), nil)
	if _, err := prov.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitForState(t, prov, req.Name, provider.StateRunning)
	pid := readStateFile(t, dir, req.Name).PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	stopped := waitForState(t, prov, req.Name, provider.StateStopped)
	want := provider.Instance{ID: req.Name, State: provider.StateStopped, Tags: req.Tags, Message: local.MessageExited, SpecHash: req.SpecHash}
	if diff := cmp.Diff(want, stopped); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	// Create of the name returns the stopped instance; the controller
	// deletes it and creates anew.
	again, err := prov.Create(ctx, req)
	if err != nil || again.State != provider.StateStopped {
		t.Errorf("Create over a stopped instance: %+v, %v; want it Stopped", again, err)
	}
	if err := prov.Delete(ctx, req.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitForState(t, prov, req.Name, provider.StateRunning)
	if newPID := readStateFile(t, dir, req.Name).PID; newPID == pid {
		t.Errorf("the recreated instance has the old pid %d", pid)
	}
}

func TestDeleteStopsTheProcessAndRemovesTheFiles(t *testing.T) {
	prov, dir := newTestProvider(t)
	ctx := context.Background()
	req := createRequest(newProxy("p1"), []byte("#cloud-config\n"))
	if _, err := prov.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	pid := readStateFile(t, dir, req.Name).PID

	if err := prov.Delete(ctx, req.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if pidAlive(pid) {
		t.Errorf("process %d alive after Delete", pid)
	}
	if files := instanceFiles(t, dir, req.Name); len(files) > 0 {
		t.Errorf("files left: %v", files)
	}
	if _, err := prov.Get(ctx, req.Name); !isNotFound(err) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	for _, id := range []string{req.Name, "px-never-created", "../../etc/passwd"} {
		if err := prov.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%q) of nothing: %v", id, err)
		}
	}
}

// A process that ignores SIGTERM is killed after StopTimeout.
func TestDeleteKillsAProcessIgnoringSIGTERM(t *testing.T) {
	script := filepath.Join(t.TempDir(), "stubborn-proxy")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
trap '' TERM
echo 'I0101 00:00:00.000000       1 main.go:1] "listening" addr=127.0.0.1:9'
exec sleep 3600
`), 0o700); err != nil {
		t.Fatal(err)
	}
	prov, dir := newTestProvider(t, func(o *local.Options) {
		o.Binary = script
		o.StopTimeout = 200 * time.Millisecond
	})
	ctx := context.Background()
	req := createRequest(newProxy("p1"), nil)
	inst, err := prov.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != provider.StateProvisioning { // nothing answers /healthz on port 9
		t.Errorf("Create: %+v, want Provisioning", inst)
	}
	pid := readStateFile(t, dir, req.Name).PID
	if err := prov.Delete(ctx, req.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if pidAlive(pid) {
		t.Errorf("process %d ignoring SIGTERM alive after Delete", pid)
	}
}

// A state file whose pid now belongs to another process (pid reuse, or a
// reboot) describes a Stopped instance, and Delete leaves that process alone.
func TestPidReuseGuard(t *testing.T) {
	bootID, err := local.BootID()
	if err != nil {
		t.Fatal(err)
	}
	startBystander := func(t *testing.T) int {
		cmd := exec.Command("sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd.Process.Pid
	}
	tests := map[string]struct {
		pid    func(t *testing.T) int
		record func(t *testing.T, st *stateFile)
	}{
		"the test's own pid, started at another time": {
			pid:    func(*testing.T) int { return os.Getpid() },
			record: func(_ *testing.T, st *stateFile) { st.ProcessStartTime++ },
		},
		"an unrelated process, started at another time": {
			pid:    startBystander,
			record: func(_ *testing.T, st *stateFile) { st.ProcessStartTime-- },
		},
		"an unrelated process with the recorded start time, of another boot": {
			pid:    startBystander,
			record: func(_ *testing.T, st *stateFile) { st.BootID = "00000000-0000-0000-0000-000000000000" },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			prov, dir := newTestProvider(t)
			ctx := context.Background()
			pid := tc.pid(t)
			start, err := local.ProcessStartTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			p := newProxy("p1")
			id := provider.InstanceName(p.UID)
			st := stateFile{ID: id, PID: pid, Port: 9, Host: "127.0.0.1", Tags: provider.Tags(p),
				ProcessStartTime: start, BootID: bootID}
			tc.record(t, &st)
			writeStateFile(t, dir, st)

			want := provider.Instance{ID: id, State: provider.StateStopped, Tags: provider.Tags(p), Message: local.MessageExited}
			got, err := prov.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
			if got, err := prov.Create(ctx, createRequest(p, nil)); err != nil || got.State != provider.StateStopped {
				t.Errorf("Create: %+v, %v; want the Stopped instance, no new process", got, err)
			}
			if pids := processesLoggingTo(t, dir); len(pids) > 0 {
				t.Errorf("Create started %v", pids)
			}
			if err := prov.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			if !pidAlive(pid) {
				t.Fatalf("Delete killed process %d, which is not ours", pid)
			}
			if files := instanceFiles(t, dir, id); len(files) > 0 {
				t.Errorf("files left: %v", files)
			}
		})
	}
}

func TestListByTag(t *testing.T) {
	prov, dir := newTestProvider(t)
	ctx := context.Background()
	// Recorded instances whose processes are gone: listing needs none running.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	record := func(p *crawlv1alpha1.Proxy, tags map[string]string) provider.Instance {
		id := provider.InstanceName(p.UID)
		writeStateFile(t, dir, stateFile{ID: id, PID: dead.Process.Pid, Host: "127.0.0.1", Tags: tags, ProcessStartTime: 1})
		return provider.Instance{ID: id, State: provider.StateStopped, Tags: tags, Message: local.MessageExited}
	}
	p1, p2 := newProxy("p1"), newProxy("p2")
	i1 := record(p1, provider.Tags(p1))
	i2 := record(p2, provider.Tags(p2))
	record(newProxy("foreign"), map[string]string{crawlv1alpha1.TagManagedBy: "someone-else"})
	// Not state files: a temporary file, a file whose name is no instance
	// id, an unreadable state file, another file.
	for name, content := range map[string]string{
		".px-0123456789abcdef.json.tmp-42": `{"id": "px-0123456789abcdef", "pid": 1, "tags": {"crawl.proxyfleet.io/managed-by": "proxy-operator"}}`,
		"Not An Id.json":                   `{"id": "Not An Id", "pid": 1, "tags": {"crawl.proxyfleet.io/managed-by": "proxy-operator"}}`,
		"px-corrupt.json":                  `{"id": "px-corr`,
		"notes.txt":                        "hello",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want := []provider.Instance{i1, i2}
	slices.SortFunc(want, func(a, b provider.Instance) int { return strings.Compare(a.ID, b.ID) })

	tests := map[string]struct {
		key, value string
		want       []provider.Instance
	}{
		"managed by us": {crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue, want},
		"one proxy":     {crawlv1alpha1.TagProxyUID, string(p2.UID), []provider.Instance{i2}},
		"no match":      {crawlv1alpha1.TagProxyUID, "nope", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := prov.ListByTag(ctx, tc.key, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListByTag (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("state dir removed", func(t *testing.T) {
		gone, goneDir := newTestProvider(t)
		if err := os.Remove(goneDir); err != nil {
			t.Fatal(err)
		}
		got, err := gone.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
		if err != nil || len(got) > 0 {
			t.Errorf("ListByTag over a removed dir: %v, %v; want nothing", got, err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	bin := proxytest.ForwardProxyBinary(t)
	notExecutable := filepath.Join(t.TempDir(), "forward-proxy")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	emptyPath := t.TempDir()
	pathWithBinary := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(pathWithBinary, local.BinaryName)); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		opts    local.Options
		path    string // $PATH
		wantErr string // "" for success
	}{
		"no state dir":           {opts: local.Options{Binary: bin}, wantErr: "state directory is not set"},
		"state dir under a file": {opts: local.Options{StateDir: filepath.Join(aFile, "state"), Binary: bin}, wantErr: "creating the state directory"},
		"missing binary": {opts: local.Options{StateDir: "STATE", Binary: "/nonexistent/forward-proxy"},
			wantErr: "run `make build`"},
		"binary not executable": {opts: local.Options{StateDir: "STATE", Binary: notExecutable},
			wantErr: "not an executable file (run `make build`)"},
		"no binary next to us nor in $PATH": {opts: local.Options{StateDir: "STATE"}, path: emptyPath,
			wantErr: "forward-proxy binary not found next to the operator"},
		"binary in $PATH":     {opts: local.Options{StateDir: "STATE"}, path: pathWithBinary},
		"host not loopback":   {opts: local.Options{StateDir: "STATE", Binary: bin, Host: "10.1.2.3"}, wantErr: `host "10.1.2.3" is not a loopback IP address`},
		"host not an address": {opts: local.Options{StateDir: "STATE", Binary: bin, Host: "localhost"}, wantErr: "not a loopback IP address"},
		"another loopback":    {opts: local.Options{StateDir: "STATE", Binary: bin, Host: "127.0.0.9"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.opts.StateDir == "STATE" {
				tc.opts.StateDir = filepath.Join(t.TempDir(), "state")
			}
			if tc.path != "" {
				t.Setenv("PATH", tc.path)
			}
			_, err := local.New(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
			}
			if !errors.Is(err, provider.ErrPermanent) {
				t.Errorf("New: %v is %s, want permanent", err, provider.ClassName(err))
			}
		})
	}
}

func TestCreateErrors(t *testing.T) {
	const pass = "do-not-leak-me"
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatal(err)
	}
	silent := filepath.Join(t.TempDir(), "silent-proxy")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	secrets := newSecretReader(
		newSecret("no-password", "crawler", ""),
		newSecret("colon", "a:b", pass),
		func() *corev1.Secret {
			s := newSecret("unmarked", "crawler", pass)
			s.Labels = nil
			return s
		}(),
	)

	tests := map[string]struct {
		modify func(o *local.Options)
		proxy  *crawlv1alpha1.Proxy
		// removeBinary removes the binary after New.
		removeBinary bool
		name         string // overrides the instance name
		wantClass    string
		wantErr      string
	}{
		"invalid name": {name: "../../etc/passwd", wantClass: "permanent", wantErr: "invalid instance name"},
		"auth without a Secrets reader": {proxy: newProxy("p", withAuth("proxy-auth")),
			modify: func(o *local.Options) { o.Secrets = nil }, wantClass: "permanent", wantErr: "no Secrets reader"},
		"auth Secret missing": {proxy: newProxy("p", withAuth("missing")),
			wantClass: "transient", wantErr: `Proxy crawl/p: spec.auth.secretRef: Secret "missing" not found`},
		"auth Secret without password": {proxy: newProxy("p", withAuth("no-password")),
			wantClass: "transient", wantErr: `Proxy crawl/p: spec.auth.secretRef: Secret "no-password" key "password" is missing or empty`},
		"auth username with a colon": {proxy: newProxy("p", withAuth("colon")),
			wantClass: "transient", wantErr: `spec.auth.secretRef: Secret "colon" key "username" must not contain ':'`},
		// docs/decisions/0230-credentials-secrets-opt-in-by-label.md: no process is started with an unmarked Secret's password.
		"auth Secret not marked for proxies": {proxy: newProxy("p", withAuth("unmarked")),
			wantClass: "transient", wantErr: `Proxy crawl/p: spec.auth.secretRef: Secret "unmarked" is not marked for proxy use`},
		"binary removed after New": {removeBinary: true, wantClass: "permanent", wantErr: "run `make build`"},
		"process exits at once": {modify: func(o *local.Options) { o.Binary = falseBin },
			wantClass: "transient", wantErr: "forward-proxy exited before listening; last log line: (empty log)"},
		"process never listens": {
			modify: func(o *local.Options) {
				o.Binary = silent
				o.StartTimeout = 300 * time.Millisecond
			},
			wantClass: "transient", wantErr: `logged no "listening" line within 300ms`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			link := filepath.Join(t.TempDir(), local.BinaryName)
			if err := os.Symlink(proxytest.ForwardProxyBinary(t), link); err != nil {
				t.Fatal(err)
			}
			prov, dir := newTestProvider(t, func(o *local.Options) {
				o.Binary = link
				o.Secrets = secrets.get
				if tc.modify != nil {
					tc.modify(o)
				}
			})
			if tc.removeBinary {
				if err := os.Remove(link); err != nil {
					t.Fatal(err)
				}
			}
			p := tc.proxy
			if p == nil {
				p = newProxy("p")
			}
			req := createRequest(p, []byte("#cloud-config\n"))
			if tc.name != "" {
				req.Name = tc.name
			}
			inst, err := prov.Create(context.Background(), req)
			if err == nil {
				t.Fatalf("Create: %+v, want an error", inst)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Create: %v, want an error containing %q", err, tc.wantErr)
			}
			if got := provider.ClassName(err); got != tc.wantClass {
				t.Errorf("Create: %v is %s, want %s", err, got, tc.wantClass)
			}
			if strings.Contains(err.Error(), pass) {
				t.Errorf("the error leaks the password: %v", err)
			}
			// Nothing is left behind: no files, no process.
			until(t, 10*time.Second, "no process left", func() (bool, string) {
				pids := processesLoggingTo(t, dir)
				return len(pids) == 0, fmt.Sprintf("processes %v", pids)
			})
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("files left: %v", names)
			}
		})
	}
}

// An operator that stopped between starting the process and recording its
// port (the state file says port 0) is healed by the next one: Get finds the
// port in the log and records it.
func TestPortRecoveredFromTheLog(t *testing.T) {
	before, dir := newTestProvider(t)
	ctx := context.Background()
	req := createRequest(newProxy("p1"), nil)
	if _, err := before.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	st := readStateFile(t, dir, req.Name)
	port := st.Port
	st.Port = 0
	writeStateFile(t, dir, st)

	after, err := local.New(local.Options{StateDir: dir, Binary: proxytest.ForwardProxyBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	inst := waitForState(t, after, req.Name, provider.StateRunning)
	if inst.Port != port {
		t.Errorf("port %d, want %d", inst.Port, port)
	}
	if got := readStateFile(t, dir, req.Name).Port; got != port {
		t.Errorf("recorded port %d, want %d", got, port)
	}
}

// A Create cut short by its context while the process starts (the operator
// shutting down) leaves the process tracked, not leaked: Get reports it
// Provisioning, Create returns it, Delete stops it.
func TestCreateCutShortKeepsTheInstanceTracked(t *testing.T) {
	silent := filepath.Join(t.TempDir(), "slow-proxy")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	prov, dir := newTestProvider(t, func(o *local.Options) { o.Binary = silent })
	req := createRequest(newProxy("p1"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if inst, err := prov.Create(ctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create: %+v, %v; want the context's error", inst, err)
	}
	pids := processesLoggingTo(t, dir)
	if len(pids) != 1 {
		t.Fatalf("processes %v, want the one started", pids)
	}
	if st := readStateFile(t, dir, req.Name); st.PID != pids[0] || st.Port != 0 {
		t.Errorf("state %+v, want pid %d and no port yet", st, pids[0])
	}
	want := provider.Instance{ID: req.Name, State: provider.StateProvisioning, Tags: req.Tags, Message: local.MessageStarting, SpecHash: req.SpecHash}
	for op, call := range map[string]func() (provider.Instance, error){
		"Get":    func() (provider.Instance, error) { return prov.Get(context.Background(), req.Name) },
		"Create": func() (provider.Instance, error) { return prov.Create(context.Background(), req) },
	} {
		got, err := call()
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", op, diff)
		}
	}
	if err := prov.Delete(context.Background(), req.Name); err != nil {
		t.Fatal(err)
	}
	if pidAlive(pids[0]) {
		t.Errorf("process %d alive after Delete", pids[0])
	}
}

// BenchmarkCreateDelete measures one instance's life: Create (start, wait
// for the listening line, first /healthz) and Delete (SIGTERM, wait, files).
func BenchmarkCreateDelete(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "state")
	prov, err := local.New(local.Options{StateDir: dir, Binary: proxytest.ForwardProxyBinary(b)})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var create, del time.Duration
	for b.Loop() {
		req := createRequest(newProxy("bench"), nil)
		start := time.Now()
		inst, err := prov.Create(ctx, req)
		if err != nil || inst.State != provider.StateRunning {
			b.Fatalf("Create: %+v, %v", inst, err)
		}
		created := time.Now()
		if err := prov.Delete(ctx, req.Name); err != nil {
			b.Fatal(err)
		}
		create += created.Sub(start)
		del += time.Since(created)
	}
	b.ReportMetric(float64(create.Microseconds())/float64(b.N)/1000, "ms/create")
	b.ReportMetric(float64(del.Microseconds())/float64(b.N)/1000, "ms/delete")
}

// TestLoopbackExit: exits are loopback addresses in 127.1.0.0/16, never a
// network or broadcast-looking host part, stable per name and spread.
func TestLoopbackExit(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for i := range 64 {
		name := fmt.Sprintf("px-%d", i)
		a := local.LoopbackExit(name)
		if !netip.MustParsePrefix("127.1.0.0/16").Contains(a) || a.As4()[3] == 0 || a.As4()[3] == 255 {
			t.Errorf("LoopbackExit(%q) = %s, want a host of 127.1.0.0/16", name, a)
		}
		if a != local.LoopbackExit(name) {
			t.Errorf("LoopbackExit(%q) is not stable", name)
		}
		seen[a] = true
	}
	if len(seen) < 62 {
		t.Errorf("64 names share %d exits; want nearly one each", len(seen))
	}
}
