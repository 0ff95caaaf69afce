package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// relabel is one member whose exit-country label must change: Country is
// the value it must have, "" to remove it.
type relabel struct {
	Name, Country string
}

// exitCountryRelabels (docs/decisions/0332-pool-labels-exit-country-rerolls-country-mismatch.md)
// lists, by name, the members whose
// crawl.proxyfleet.io/exit-country label differs from their
// status.exitCountry, so that a label selector (a lease's, a gateway
// username's +country- term, kubectl's -l) picks members by the country they
// are measured to leave from. A member being deleted is left alone.
func exitCountryRelabels(members map[string]*crawlv1alpha1.Proxy) []relabel {
	var out []relabel
	for name, p := range members {
		if p.DeletionTimestamp != nil {
			continue
		}
		have, labelled := p.Labels[crawlv1alpha1.ExitCountryLabel]
		want := p.Status.ExitCountry
		if have != want || (want == "" && labelled) {
			out = append(out, relabel{Name: name, Country: want})
		}
	}
	slices.SortFunc(out, func(a, b relabel) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// syncExitCountryLabels writes the labels exitCountryRelabels asks for,
// one merge patch each; it returns every write's error.
func (c *Controller) syncExitCountryLabels(ctx context.Context, namespace string, members map[string]*crawlv1alpha1.Proxy) []error {
	var errs []error
	for _, r := range exitCountryRelabels(members) {
		var value any // nil: a JSON null removes the label
		if r.Country != "" {
			value = r.Country
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{crawlv1alpha1.ExitCountryLabel: value}}})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, err = c.crawl.CrawlV1alpha1().Proxies(namespace).Patch(ctx, r.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("labelling member %s with its exit country: %w", r.Name, err))
		}
	}
	return errs
}
