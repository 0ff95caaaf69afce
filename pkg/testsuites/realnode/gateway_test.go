//go:build realnode

package realnode

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatewayKeepsASession: through the gateway tier's Service (ClusterIP,
// kube-proxy), two requests of one session leave through the same
// upstream, which the target sees as the same proxy Pod address; so does a
// third after one of the two gateway Pods is deleted.
func gatewayKeepsASession(t *testing.T, s *suite) {
	svc, err := s.kube.CoreV1().Services(operatorNamespace).Get(context.Background(), "proxy-operator-gateway", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gateway := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "3128")
	target := "http://" + net.JoinHostPort(s.echoIP, "8080") + "/"
	var seen []string
	through := func() {
		t.Helper()
		// A crawler retries a 503 after its Retry-After: the pool's members
		// turned Ready just before, and a first acquire has met a 503 then.
		body, err := curl("--retry", "5", "--retry-delay", "1", "-x", gateway, "--proxy-user", "ns-"+crawlNamespace+"+pool-"+pool+"+session-e2e:"+s.token, target)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, strings.TrimSpace(body))
	}
	through()
	through()
	if seen[0] == "" || seen[0] != seen[1] {
		t.Errorf("one session left through %q, want one upstream twice", seen)
	}
	// Lose one gateway replica: it drains, the Service keeps the other,
	// and the session keeps its upstream (the lease store holds it).
	ctx := context.Background()
	pods, err := s.kube.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: gatewaySelector})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("gateway Pods: %d (%v), want 2", len(pods.Items), err)
	}
	start := time.Now()
	if err := s.kube.CoreV1().Pods(operatorNamespace).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	through()
	if seen[2] != seen[0] {
		t.Errorf("after gateway Pod %s was deleted the session left through %q, want %q", pods.Items[0].Name, seen[2], seen[0])
	}
	t.Logf("gateway Pod deleted → the session through the other, same upstream: %v", time.Since(start).Round(100*time.Millisecond))
	members, err := s.members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range members {
		found = found || m.Status.IP == seen[0]
	}
	if !found {
		t.Errorf("the session's upstream %s is not a member of pool %s", seen[0], pool)
	}
}
