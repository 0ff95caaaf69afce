package gcetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"

	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/gcetest"
)

const project = gcetest.DefaultProject

func newService(t *testing.T, s *gcetest.Server) *compute.Service {
	t.Helper()
	svc, err := compute.NewService(context.Background(), s.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func vm(name string, labels map[string]string) *compute.Instance {
	return &compute.Instance{
		Name:        name,
		MachineType: "e2-micro",
		Labels:      labels,
		Disks: []*compute.AttachedDisk{{Boot: true, InitializeParams: &compute.AttachedDiskInitializeParams{
			SourceImage: gcetest.DefaultImages[0],
		}}},
		NetworkInterfaces: []*compute.NetworkInterface{{
			Network:       "global/networks/default",
			AccessConfigs: []*compute.AccessConfig{{Type: "ONE_TO_ONE_NAT"}},
		}},
	}
}

func googleError(t *testing.T, err error) *googleapi.Error {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("%v is not a googleapi.Error", err)
	}
	return gerr
}

func TestErrorBodiesAreGoogleFormat(t *testing.T) {
	s := gcetest.New(t)
	s.FailNext(gcetest.MethodGet, gcetest.QuotaExceeded())
	resp, err := http.Get(s.URL + "projects/" + project + "/zones/test-zone-a/instances/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	want := map[string]any{"error": map[string]any{
		"code":    float64(403),
		"message": gcetest.QuotaExceeded().Message,
		"errors":  []any{map[string]any{"reason": "quotaExceeded", "message": gcetest.QuotaExceeded().Message, "domain": "global"}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("error body (-want +got):\n%s", diff)
	}
	if resp.StatusCode != 403 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestWrongProjectOrZoneIsNotFound(t *testing.T) {
	s := gcetest.New(t)
	svc := newService(t, s)
	tests := map[string]func() error{
		"insert, unknown zone":    func() error { _, err := svc.Instances.Insert(project, "nowhere-1-a", vm("a", nil)).Do(); return err },
		"insert, unknown project": func() error { _, err := svc.Instances.Insert("nobody", "test-zone-a", vm("a", nil)).Do(); return err },
		"get, unknown zone":       func() error { _, err := svc.Instances.Get(project, "nowhere-1-a", "a").Do(); return err },
		"delete, unknown project": func() error { _, err := svc.Instances.Delete("nobody", "test-zone-a", "a").Do(); return err },
		"list, unknown project":   func() error { _, err := svc.Instances.AggregatedList("nobody").Do(); return err },
		"operation, unknown zone": func() error { _, err := svc.ZoneOperations.Get(project, "nowhere-1-a", "op").Do(); return err },
	}
	for name, call := range tests {
		t.Run(name, func(t *testing.T) {
			if gerr := googleError(t, call()); gerr.Code != 404 || gerr.Errors[0].Reason != "notFound" {
				t.Errorf("got %d %+v, want 404 notFound", gerr.Code, gerr.Errors)
			}
		})
	}
	if n := len(s.Instances()); n != 0 {
		t.Errorf("%d VMs created through wrong paths", n)
	}
}

func TestInsertValidation(t *testing.T) {
	tests := map[string]struct {
		change     func(*compute.Instance)
		wantCode   int
		wantReason string
	}{
		"bad name":                     {func(i *compute.Instance) { i.Name = "Bad_Name" }, 400, "invalid"},
		"unknown machine type":         {func(i *compute.Instance) { i.MachineType = "zones/test-zone-a/machineTypes/e2-huge" }, 400, "invalid"},
		"machine type of another zone": {func(i *compute.Instance) { i.MachineType = "zones/test-zone-b/machineTypes/e2-micro" }, 400, "invalid"},
		"unknown image": {func(i *compute.Instance) {
			i.Disks[0].InitializeParams.SourceImage = "projects/debian-cloud/global/images/family/debian-99"
		}, 404, "notFound"},
		"bad label key":   {func(i *compute.Instance) { i.Labels = map[string]string{"crawl.proxyfleet.io/x": "y"} }, 400, "invalid"},
		"bad label value": {func(i *compute.Instance) { i.Labels = map[string]string{"k": "Has.Dots"} }, 400, "invalid"},
		"spot that restarts": {func(i *compute.Instance) {
			i.Scheduling = &compute.Scheduling{ProvisioningModel: "SPOT", InstanceTerminationAction: "DELETE", OnHostMaintenance: "TERMINATE"}
		}, 400, "invalid"},
		"metadata too large": {func(i *compute.Instance) {
			big := strings.Repeat("x", 300<<10)
			i.Metadata = &compute.Metadata{Items: []*compute.MetadataItems{{Key: "user-data", Value: &big}}}
		}, 400, "invalid"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := gcetest.New(t)
			inst := vm("a", nil)
			tc.change(inst)
			_, err := newService(t, s).Instances.Insert(project, "test-zone-a", inst).Do()
			if gerr := googleError(t, err); gerr.Code != tc.wantCode || gerr.Errors[0].Reason != tc.wantReason {
				t.Errorf("got %d %+v, want %d %s", gerr.Code, gerr.Errors, tc.wantCode, tc.wantReason)
			}
		})
	}
}

func TestLifecycleAndOperations(t *testing.T) {
	s := gcetest.New(t, gcetest.WithSteps(1), gcetest.WithAddress(func(_, _, name string) string { return "127.0.0.42" }))
	svc := newService(t, s)
	op, err := svc.Instances.Insert(project, "test-zone-a", vm("a", nil)).Do()
	if err != nil {
		t.Fatal(err)
	}
	if op.Status != "RUNNING" || op.OperationType != "insert" {
		t.Errorf("insert operation %s %s", op.Status, op.OperationType)
	}
	if _, err := svc.Instances.Insert(project, "test-zone-a", vm("a", nil)).Do(); googleError(t, err).Code != 409 {
		t.Errorf("a second insert of the same name: %v, want 409", err)
	}
	var statuses []string
	for range 3 {
		got, err := svc.Instances.Get(project, "test-zone-a", "a").Do()
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, got.Status+" "+got.NetworkInterfaces[0].AccessConfigs[0].NatIP)
	}
	if diff := cmp.Diff([]string{"PROVISIONING ", "STAGING 127.0.0.42", "RUNNING 127.0.0.42"}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	done, err := svc.ZoneOperations.Get(project, "test-zone-a", op.Name).Do()
	if err != nil || done.Status != "DONE" {
		t.Errorf("insert operation after the VM runs: %+v, %v", done, err)
	}

	del, err := svc.Instances.Delete(project, "test-zone-a", "a").Do()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Instances.Delete(project, "test-zone-a", "a").Do(); googleError(t, err).Errors[0].Reason != "resourceNotReady" {
		t.Errorf("a second delete while deleting: %v, want resourceNotReady", err)
	}
	if got, err := svc.Instances.Get(project, "test-zone-a", "a").Do(); err != nil || got.Status != "STOPPING" {
		t.Errorf("Get while deleting: %v, %v", got, err)
	}
	if _, err := svc.Instances.Get(project, "test-zone-a", "a").Do(); googleError(t, err).Code != 404 {
		t.Errorf("Get after the delete: %v, want 404", err)
	}
	if done, err := svc.ZoneOperations.Get(project, "test-zone-a", del.Name).Do(); err != nil || done.Status != "DONE" {
		t.Errorf("delete operation after the VM went: %+v, %v", done, err)
	}
}

func TestAggregatedListFilterAndPages(t *testing.T) {
	s := gcetest.New(t)
	svc := newService(t, s)
	ours := map[string]string{"owner": "us"}
	for i, z := range []string{"test-zone-a", "test-zone-b", "test-zone-a", "test-zone-b", "test-zone-a"} {
		if _, err := svc.Instances.Insert(project, z, vm("ours-"+string(rune('a'+i)), ours)).Do(); err != nil {
			t.Fatal(err)
		}
	}
	for _, z := range []string{"test-zone-a", "test-zone-b"} {
		if _, err := svc.Instances.Insert(project, z, vm("theirs", map[string]string{"owner": "them"})).Do(); err != nil {
			t.Fatal(err)
		}
	}

	var names []string
	pages := 0
	err := svc.Instances.AggregatedList(project).Filter(`labels.owner = "us"`).MaxResults(2).Pages(context.Background(),
		func(page *compute.InstanceAggregatedList) error {
			pages++
			for scope, list := range page.Items {
				for _, inst := range list.Instances {
					names = append(names, strings.TrimPrefix(scope, "zones/")+"/"+inst.Name)
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	want := []string{"test-zone-a/ours-a", "test-zone-a/ours-c", "test-zone-a/ours-e", "test-zone-b/ours-b", "test-zone-b/ours-d"}
	if diff := cmp.Diff(want, names); diff != "" || pages != 3 {
		t.Errorf("%d pages, names (-want +got):\n%s", pages, diff)
	}

	for name, filter := range map[string]string{
		"unquoted, parenthesized and": `(labels.owner = them) (name = theirs)`,
		"negation":                    `labels.owner != us`,
	} {
		list, err := svc.Instances.AggregatedList(project).Filter(filter).Do()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := 0
		for _, l := range list.Items {
			n += len(l.Instances)
		}
		if n != 2 {
			t.Errorf("%s: %d VMs, want 2", name, n)
		}
	}
	if _, err := svc.Instances.AggregatedList(project).Filter(`labels.owner ~ us`).Do(); googleError(t, err).Code != 400 {
		t.Errorf("an unparseable filter: %v, want 400", err)
	}
	if _, err := svc.Instances.AggregatedList(project).MaxResults(501).Do(); googleError(t, err).Code != 400 {
		t.Errorf("maxResults 501: %v, want 400", err)
	}
	if _, err := svc.Instances.AggregatedList(project).PageToken("garbage!").Do(); googleError(t, err).Code != 400 {
		t.Errorf("a bad page token: %v, want 400", err)
	}
}

func TestFaults(t *testing.T) {
	s := gcetest.New(t)
	svc := newService(t, s)
	s.FailEvery(gcetest.MethodInsert, gcetest.BackendError())
	for range 2 {
		if _, err := svc.Instances.Insert(project, "test-zone-a", vm("a", nil)).Do(); googleError(t, err).Code != 503 {
			t.Fatalf("with a sticky fault: %v", err)
		}
	}
	s.StopFailing(gcetest.MethodInsert)
	s.FailNextInsertAsync("ZONE_RESOURCE_POOL_EXHAUSTED", "no capacity", 503)
	op, err := svc.Instances.Insert(project, "test-zone-a", vm("a", nil)).Do()
	if err != nil {
		t.Fatalf("an insert that fails later is accepted first: %v", err)
	}
	got, err := svc.ZoneOperations.Get(project, "test-zone-a", op.Name).Do()
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != "DONE" || got.Error == nil || got.Error.Errors[0].Code != "ZONE_RESOURCE_POOL_EXHAUSTED" || got.HttpErrorStatusCode != 503 {
		t.Errorf("failed operation: %+v", got)
	}
	if _, ok := s.Instance(project, "test-zone-a", "a"); ok {
		t.Error("a failed insert left a VM")
	}
	if s.Calls(gcetest.MethodInsert) != 3 {
		t.Errorf("%d insert calls recorded, want 3", s.Calls(gcetest.MethodInsert))
	}
}
