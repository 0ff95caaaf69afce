package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// appliedCRD is what waitCRDsServed checks of a CRD.
type appliedCRD struct {
	name, group, plural string
	versions            []string // the served ones
}

// readCRDs decodes every CustomResourceDefinition in dir/*.yaml, in file name order.
// A missing dir holds no CRDs unless required.
func readCRDs(dir string, required bool) ([]*unstructured.Unstructured, error) {
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) && !required {
			return nil, nil
		}
		return nil, fmt.Errorf("CRD dir: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("CRD dir: %w", err)
	}
	var crds []*unstructured.Unstructured
	for _, file := range files {
		docs, err := decodeCRDFile(file)
		if err != nil {
			return nil, err
		}
		crds = append(crds, docs...)
	}
	return crds, nil
}

func decodeCRDFile(file string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading CRDs: %w", err)
	}
	defer f.Close()
	var crds []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for i := 1; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return crds, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if len(obj) == 0 { // an empty document, as after a leading ---
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if gvk := u.GroupVersionKind(); gvk != crdResource.GroupVersion().WithKind("CustomResourceDefinition") {
			return nil, fmt.Errorf("%s: document %d: want an apiextensions.k8s.io/v1 CustomResourceDefinition, got %s", file, i, gvk)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("%s: document %d: CustomResourceDefinition without a name", file, i)
		}
		crds = append(crds, u)
	}
}

// applyCRDs creates or updates each CRD and waits until all are established and
// their resources are served.
func applyCRDs(ctx context.Context, cfg *rest.Config, crds []*unstructured.Unstructured) ([]appliedCRD, error) {
	if len(crds) == 0 {
		return nil, nil
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("applying CRDs: %w", err)
	}
	api := client.Resource(crdResource)
	applied := make([]appliedCRD, 0, len(crds))
	for _, crd := range crds {
		if err := applyCRD(ctx, api, crd); err != nil {
			return nil, fmt.Errorf("applying CRD %s: %w", crd.GetName(), err)
		}
		a, err := describeCRD(crd)
		if err != nil {
			return nil, err
		}
		applied = append(applied, a)
	}
	for _, a := range applied {
		if err := waitEstablished(ctx, api, a.name); err != nil {
			return nil, err
		}
	}
	if err := waitCRDsServed(ctx, cfg, applied); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("CRDs applied", "count", len(applied))
	return applied, nil
}

func applyCRD(ctx context.Context, api dynamic.ResourceInterface, crd *unstructured.Unstructured) error {
	_, err := api.Create(ctx, crd, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// A kept Dir holds the CRDs of the last run: replace them with the files' version.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := api.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		update := crd.DeepCopy()
		update.SetResourceVersion(current.GetResourceVersion())
		_, err = api.Update(ctx, update, metav1.UpdateOptions{})
		return err
	})
}

func describeCRD(crd *unstructured.Unstructured) (appliedCRD, error) {
	a := appliedCRD{name: crd.GetName()}
	a.group, _, _ = unstructured.NestedString(crd.Object, "spec", "group")
	a.plural, _, _ = unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if served, _ := m["served"].(bool); served && name != "" {
			a.versions = append(a.versions, name)
		}
	}
	if a.group == "" || a.plural == "" || len(a.versions) == 0 {
		return a, fmt.Errorf("CRD %s: needs spec.group, spec.names.plural and a served version", a.name)
	}
	return a, nil
}

// waitEstablished waits for the Established condition, and fails at once when the
// names were not accepted (they clash with another CRD's).
func waitEstablished(ctx context.Context, api dynamic.ResourceInterface, name string) error {
	err := poll(ctx, crdTimeout, func(ctx context.Context) (bool, error) {
		crd, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			switch {
			case m["type"] == "Established" && m["status"] == "True":
				return true, nil
			case m["type"] == "NamesAccepted" && m["status"] == "False":
				return true, fmt.Errorf("names not accepted: %v", m["message"])
			}
		}
		return false, errors.New("not established yet")
	})
	if err != nil {
		return fmt.Errorf("CRD %s: %w", name, err)
	}
	return nil
}

// waitCRDsServed waits until discovery lists every served version of each CRD, so
// that clients using a RESTMapper find them.
func waitCRDsServed(ctx context.Context, cfg *rest.Config, crds []appliedCRD) error {
	if len(crds) == 0 {
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	for _, crd := range crds {
		for _, version := range crd.versions {
			gv := crd.group + "/" + version
			err := poll(ctx, crdTimeout, func(context.Context) (bool, error) {
				list, err := dc.ServerResourcesForGroupVersion(gv)
				if err != nil {
					return false, err
				}
				if slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.plural }) {
					return true, nil
				}
				return false, fmt.Errorf("%s not in discovery yet", crd.plural)
			})
			if err != nil {
				return fmt.Errorf("CRD %s: %s not served: %w", crd.name, gv, err)
			}
		}
	}
	return nil
}
