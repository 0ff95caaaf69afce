package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// forbidden builds the error the API server returns when admission refuses
// a Pod: admission.NewForbidden wraps the plugin's error like this.
func forbidden(reason string) error {
	return apierrors.NewForbidden(podsResource, "px-1", errors.New(reason))
}

func TestClassify(t *testing.T) {
	tests := map[string]struct {
		err  error
		want error
	}{
		"exceeded quota": {
			err:  forbidden("exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0"),
			want: provider.ErrQuotaExceeded,
		},
		"exceeded quota of secrets": {
			err:  apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "px-1-cloud-init", errors.New("exceeded quota: q, requested: secrets=1, used: secrets=10, limited: secrets=10")),
			want: provider.ErrQuotaExceeded,
		},
		"quota usage not computed yet": {
			err:  forbidden("status unknown for quota: q, resources: pods"),
			want: provider.ErrTransient,
		},
		"quota constraint the Pod does not meet": {
			err:  forbidden("failed quota: q: must specify limits.cpu for: proxy"),
			want: provider.ErrPermanent,
		},
		"RBAC": {
			err:  forbidden(`User "system:serviceaccount:ops:proxy-operator" cannot create resource "pods" in API group "" in the namespace "crawl"`),
			want: provider.ErrPermanent,
		},
		"Pod Security": {
			err:  forbidden(`violates PodSecurity "restricted:latest": runAsNonRoot != true`),
			want: provider.ErrPermanent,
		},
		"namespace terminating": {
			err: func() error {
				e := apierrors.NewForbidden(podsResource, "px-1", errors.New("unable to create new content in namespace crawl because it is being terminated"))
				e.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
				return e
			}(),
			want: provider.ErrPermanent,
		},
		"invalid": {
			err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "px-1",
				field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("image"), "", "must not be empty")}),
			want: provider.ErrPermanent,
		},
		"bad request":         {err: apierrors.NewBadRequest("bad"), want: provider.ErrPermanent},
		"entity too large":    {err: apierrors.NewRequestEntityTooLargeError("limit is 3145728"), want: provider.ErrPermanent},
		"conflict":            {err: apierrors.NewConflict(podsResource, "px-1", errors.New("changed")), want: provider.ErrTransient},
		"server timeout":      {err: apierrors.NewServerTimeout(podsResource, "create", 1), want: provider.ErrTransient},
		"too many requests":   {err: apierrors.NewTooManyRequests("slow down", 1), want: provider.ErrTransient},
		"internal error":      {err: apierrors.NewInternalError(errors.New("etcd")), want: provider.ErrTransient},
		"service unavailable": {err: apierrors.NewServiceUnavailable("starting"), want: provider.ErrTransient},
		"unauthorized":        {err: apierrors.NewUnauthorized("token expired"), want: provider.ErrTransient},
		"not an API error":    {err: errors.New("connection refused"), want: provider.ErrTransient},
		"context deadline":    {err: context.DeadlineExceeded, want: provider.ErrTransient},
		"wrapped exceeded quota": {
			err:  fmt.Errorf("round trip: %w", forbidden("exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0")),
			want: provider.ErrQuotaExceeded,
		},
		"a message that only mentions quota is not a quota error": {
			err:  apierrors.NewInternalError(errors.New("exceeded quota: q")),
			want: provider.ErrTransient,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := classify(tc.err, "creating Pod %s", "crawl/px-1")
			if class := provider.Class(got); class != tc.want {
				t.Errorf("class %v, want %v", class, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap the API error", got)
			}
			if want := "creating Pod crawl/px-1: " + tc.err.Error(); got.Error() != want {
				t.Errorf("message %q, want %q", got.Error(), want)
			}
		})
	}
}
