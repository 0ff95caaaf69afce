package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/local"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// The helper mode of this test binary plays an operator that creates an
// instance and exits (TestInstanceOutlivesTheOperator).
const (
	helperEnv       = "LOCAL_PROVIDER_TEST_HELPER"
	helperStateDir  = "LOCAL_PROVIDER_TEST_STATE_DIR"
	helperBinary    = "LOCAL_PROVIDER_TEST_BINARY"
	helperProxyUID  = "LOCAL_PROVIDER_TEST_PROXY_UID"
	helperModeStart = "create-and-exit"
)

var (
	envOnce sync.Once
	env     *testenv.Environment
	envErr  error
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	local.KillChildrenWithTestBinary()
	code := proxytest.Main(m) // builds cmd/forward-proxy once, on first use
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// apiServer starts etcd and kube-apiserver on first use, so that only the
// integration tests pay for them.
func apiServer(t *testing.T) *testenv.Environment {
	t.Helper()
	integration.Needs(t, testenv.Needs)
	envOnce.Do(func() { env, envErr = testenv.Start(context.Background(), testenv.Options{}) })
	if envErr != nil {
		t.Fatalf("testenv: %v", envErr)
	}
	return env
}

// runHelper creates one instance with production process attributes (no
// parent-death signal) and exits without deleting it.
func runHelper(mode string) int {
	if mode != helperModeStart {
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	prov, err := local.New(local.Options{StateDir: os.Getenv(helperStateDir), Binary: os.Getenv(helperBinary), Secrets: withGeneratedCredentials(nil)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p := newProxy("outliver", withUID(types.UID(os.Getenv(helperProxyUID))))
	inst, err := prov.Create(context.Background(), createRequest(p, nil))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(inst); err != nil {
		return 1
	}
	return 0
}

// Fixtures.

const testNamespace = "crawl"

type proxyOption func(*crawlv1alpha1.Proxy)

func newProxy(name string, opts ...proxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, UID: uuid.NewUUID()},
		Spec: crawlv1alpha1.ProxySpec{
			Mode:     crawlv1alpha1.ModeManaged,
			Provider: crawlv1alpha1.ProviderLocal,
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withUID(uid types.UID) proxyOption { return func(p *crawlv1alpha1.Proxy) { p.UID = uid } }

func withAuth(secretName string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secretName}}
	}
}

// newSecret is a credentials Secret, marked for proxies.
func newSecret(name, user, pass string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name,
			Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data: map[string][]byte{
			crawlv1alpha1.AuthUsernameKey: []byte(user),
			crawlv1alpha1.AuthPasswordKey: []byte(pass),
		},
	}
}

func createRequest(p *crawlv1alpha1.Proxy, cloudInit []byte) provider.CreateRequest {
	return provider.CreateRequest{
		Name:      provider.InstanceName(p.UID),
		Proxy:     p,
		Tags:      provider.Tags(p),
		CloudInit: cloudInit,
		SpecHash:  "hash-" + p.Name,
	}
}

// newTestProvider returns a provider over a new state directory (not yet
// existing, so New creates it) and stops whatever it left running at the
// end of the test.
func newTestProvider(t *testing.T, modify ...func(*local.Options)) (*local.Provider, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	// By default a reader of the generated Secrets; a test's own reader is
	// wrapped to serve them too, and a test that sets none gets none.
	opts := local.Options{StateDir: dir, Binary: proxytest.ForwardProxyBinary(t), Secrets: withGeneratedCredentials(nil)}
	for _, m := range modify {
		m(&opts)
	}
	if opts.Secrets != nil {
		opts.Secrets = withGeneratedCredentials(opts.Secrets)
	}
	prov, err := local.New(opts)
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	t.Cleanup(func() { deleteAll(t, dir) })
	return prov, dir
}

// secretsFunc is local.Options.Secrets.
type secretsFunc = func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// generatedUser and generatedPass are the credentials withGeneratedCredentials
// serves for every generated Secret.
const generatedUser, generatedPass = "generated", "generated-Pa55"

// withGeneratedCredentials serves, for a generated credentials Secret name
// (a Proxy without spec.auth) that secrets does not hold, the Secret the
// controller would have generated: the provider, like every reader, uses
// proxyaccess.CredentialsSecret, and the controller makes that Secret
// before calling Create.
func withGeneratedCredentials(secrets secretsFunc) secretsFunc {
	return func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
		if secrets != nil {
			s, err := secrets(ctx, namespace, name)
			if err == nil || !apierrors.IsNotFound(err) || !strings.HasPrefix(name, proxyaccess.GeneratedCredentialsPrefix) {
				return s, err
			}
		} else if !strings.HasPrefix(name, proxyaccess.GeneratedCredentialsPrefix) {
			return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
		}
		s := newSecret(name, generatedUser, generatedPass)
		s.Namespace = namespace
		return s, nil
	}
}

// deleteAll deletes every instance recorded in dir, through a provider of
// its own (as a restarted operator would).
func deleteAll(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		return
	}
	prov, err := local.New(local.Options{StateDir: dir, Binary: proxytest.ForwardProxyBinary(t)})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, f := range files {
		if err := prov.Delete(context.Background(), strings.TrimSuffix(filepath.Base(f), ".json")); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

// stateFile mirrors the documented state file format.
type stateFile struct {
	ID               string            `json:"id"`
	PID              int               `json:"pid"`
	Port             int32             `json:"port"`
	Host             string            `json:"host"`
	Tags             map[string]string `json:"tags"`
	SpecHash         string            `json:"specHash"`
	ProcessStartTime uint64            `json:"processStartTime"`
	BootID           string            `json:"bootID"`
}

func readStateFile(t *testing.T, dir, id string) stateFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("state file %s: %v", data, err)
	}
	return st
}

func writeStateFile(t *testing.T, dir string, st stateFile) {
	t.Helper()
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, st.ID+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// instanceFiles lists the files of instance id in dir.
func instanceFiles(t *testing.T, dir, id string) []string {
	t.Helper()
	var out []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), id) {
			out = append(out, e.Name())
		}
	}
	return out
}

// procStat returns fields 3 onwards of /proc/<pid>/stat (index 0 is the
// state letter, 1 the ppid, 3 the session id); nil when there is no such pid.
func procStat(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
}

// pidAlive: the pid exists and is not a zombie.
func pidAlive(pid int) bool {
	f := procStat(pid)
	return f != nil && f[0] != "Z" && f[0] != "X"
}

// processesLoggingTo returns the pids of live processes whose stdout is a
// file in dir: the instances running from that state directory.
func processesLoggingTo(t *testing.T, dir string) []int {
	t.Helper()
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/" + e.Name() + "/fd/1")
		if err != nil || filepath.Dir(target) != dir || !pidAlive(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// until polls cond every 20ms until it holds or timeout passes; the
// last message explains a failure.
func until(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.Check(t, timeout, 20*time.Millisecond, what, eventually.Holds(cond))
}

// waitForState polls Get until the instance is in state want.
func waitForState(t *testing.T, prov provider.Provider, id string, want provider.State) provider.Instance {
	t.Helper()
	var inst provider.Instance
	until(t, 20*time.Second, id+" "+string(want), func() (bool, string) {
		var err error
		inst, err = prov.Get(context.Background(), id)
		return err == nil && inst.State == want, fmt.Sprintf("%+v, %v", inst, err)
	})
	return inst
}

func isNotFound(err error) bool { return errors.Is(err, provider.ErrNotFound) }

func fileMode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}
