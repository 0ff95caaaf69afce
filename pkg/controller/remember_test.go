package controller

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// heldWrites is client-go's mutation cache, with a record of the writes
// it still holds: the cache itself says nothing of its entries, and one it
// is never asked about again stays until its LRU is full.
type heldWrites struct {
	cache.MutationCache
	mu   sync.Mutex
	held map[string]int // key → resourceVersion of the write held
}

func (h *heldWrites) Mutation(obj any) {
	h.MutationCache.Mutation(obj)
	p := obj.(*crawlv1alpha1.Proxy)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[cache.MetaObjectToName(p).String()] = resourceVersion(p)
}

func (h *heldWrites) OnAddOrUpdate(obj runtime.Object) {
	h.MutationCache.OnAddOrUpdate(obj)
	p := obj.(*crawlv1alpha1.Proxy)
	key := cache.MetaObjectToName(p).String()
	h.mu.Lock()
	defer h.mu.Unlock()
	if rv, ok := h.held[key]; ok && resourceVersion(p) >= rv {
		delete(h.held, key) // the mutation cache drops it here too
	}
}

func resourceVersion(p *crawlv1alpha1.Proxy) int {
	rv, err := strconv.Atoi(p.ResourceVersion)
	if err != nil {
		panic(err)
	}
	return rv
}

// TestRememberKeepsOnlyWhatTheInformerLacks: after a write, the mutation
// cache holds the answer only while the informer's copy is older; when
// the informer already delivered the write (its watch event beat the
// write's response), nothing is left behind for a key nobody reads again.
func TestRememberKeepsOnlyWhatTheInformerLacks(t *testing.T) {
	for _, tc := range []struct {
		name string
		// informerRV is the version the informer holds when the write returns.
		informerRV string
		wantHeld   map[string]int
		// wantRead is the version a sync reads next.
		wantRead string
	}{
		{name: "informer behind", informerRV: "10", wantHeld: map[string]int{"crawl/p1": 11}, wantRead: "11"},
		{name: "informer delivered the write first", informerRV: "11", wantHeld: map[string]int{}, wantRead: "11"},
		{name: "informer has a later write", informerRV: "12", wantHeld: map[string]int{}, wantRead: "12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			informerCopy := newProxy()
			informerCopy.ResourceVersion = tc.informerRV
			if err := indexer.Add(informerCopy); err != nil {
				t.Fatal(err)
			}
			objects := &heldWrites{
				MutationCache: cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), indexer,
					cache.MutationCacheOptions{TTL: time.Minute, MaxCacheSize: 100}),
				held: map[string]int{},
			}
			c := &Controller{objects: objects, indexer: indexer}

			written := newProxy()
			written.ResourceVersion = "11"
			written.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}
			c.remember(written)

			if diff := cmp.Diff(tc.wantHeld, objects.held); diff != "" {
				t.Errorf("writes held (-want +got):\n%s", diff)
			}
			if written.ManagedFields != nil {
				t.Errorf("the remembered copy keeps managedFields %v; the informers' copies have none", written.ManagedFields)
			}
			obj, exists, err := c.objects.GetByKey(testKey.String())
			if err != nil || !exists {
				t.Fatalf("GetByKey: %v, exists %v", err, exists)
			}
			if got := obj.(*crawlv1alpha1.Proxy).ResourceVersion; got != tc.wantRead {
				t.Errorf("a sync reads resourceVersion %s, want %s", got, tc.wantRead)
			}
		})
	}
}
