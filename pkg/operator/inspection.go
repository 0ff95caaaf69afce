package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"

	"github.com/proxyfleet/proxy-operator/pkg/inspectionca"
)

// inspectionCA is the leader's CA keeper for inspected namespaces, with
// informers of its own (inspectionca.NewInformers): every Namespace (their
// labels opt in), the CA Secrets of the operator's namespace by label, and
// the published bundles by name and label, each kept as a digest, so that
// no tenant's ConfigMap fills the leader's memory.
type inspectionCA struct {
	controller *inspectionca.Controller
	factories  []informers.SharedInformerFactory
}

// newInspectionCA is nil when --inspection-ca-namespace is empty.
func newInspectionCA(o Options, kube kubernetes.Interface, events record.EventBroadcaster) (*inspectionCA, error) {
	if o.InspectionCANamespace == "" {
		return nil, nil
	}
	inf := inspectionca.NewInformers(kube, o.InspectionCANamespace)
	c, err := inspectionca.New(inspectionca.Config{
		Kube: kube, Namespaces: inf.Namespaces.Core().V1().Namespaces(), Secrets: inf.Secrets.Core().V1().Secrets(),
		ConfigMaps: inf.Bundles.Core().V1().ConfigMaps(), OperatorNamespace: o.InspectionCANamespace,
		Recorder: events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: inspectionca.FieldManager}),
	})
	if err != nil {
		return nil, fmt.Errorf("--inspection-ca-namespace: %w", err)
	}
	return &inspectionCA{controller: c, factories: inf.All()}, nil
}

// run starts the informers and keeps the CAs until ctx ends (on the
// leader only: a standby neither caches the CA keys nor writes).
func (i *inspectionCA) run(ctx context.Context) error {
	for _, f := range i.factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	return i.controller.Run(ctx)
}
