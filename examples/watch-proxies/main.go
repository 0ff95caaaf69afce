// Command watch-proxies lists Proxies through the generated clientset, then
// watches them through a generated shared informer and prints one line per
// phase change: the way another program follows the fleet without polling.
//
//	go run ./examples/watch-proxies --kubeconfig .local/kubeconfig [--namespace default]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	crawlinformers "github.com/proxyfleet/proxy-operator/pkg/generated/informers/externalversions"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("namespace", "", "namespace (default: all)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "watch-proxies:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}

	// A one-off list through the clientset.
	list, err := client.CrawlV1alpha1().Proxies(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	table := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "NAMESPACE\tNAME\tMODE\tPHASE\tADDRESS")
	for _, p := range list.Items {
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, p.Spec.Mode, p.Status.Phase, address(&p))
	}
	if err := table.Flush(); err != nil {
		return err
	}

	// Then follow changes through a shared informer: one list+watch, a local
	// cache, and callbacks.
	factory := crawlinformers.NewSharedInformerFactoryWithOptions(client, 0, crawlinformers.WithNamespace(namespace))
	informer := factory.Crawl().V1alpha1().Proxies().Informer()
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, cur := oldObj.(*crawlv1alpha1.Proxy), newObj.(*crawlv1alpha1.Proxy)
			if old.Status.Phase != cur.Status.Phase {
				fmt.Printf("%s/%s: %s -> %s %s\n", cur.Namespace, cur.Name, old.Status.Phase, cur.Status.Phase, address(cur))
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if p, ok := obj.(*crawlv1alpha1.Proxy); ok {
				fmt.Printf("%s/%s: deleted\n", p.Namespace, p.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	fmt.Println("watching for phase changes (Ctrl-C to stop)")
	<-ctx.Done()
	return nil
}

func address(p *crawlv1alpha1.Proxy) string {
	if p.Status.IP == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d", p.Status.IP, p.Status.Port)
}
