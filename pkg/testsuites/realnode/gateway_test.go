//go:build realnode

package realnode

import (
	"context"
	"net"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatewayKeepsASession: through the gateway's Service (ClusterIP, kube-proxy),
// two requests of one session leave through the same upstream, which the
// target sees as the same proxy Pod address.
func gatewayKeepsASession(t *testing.T, s *suite) {
	svc, err := s.kube.CoreV1().Services(operatorNamespace).Get(context.Background(), "proxy-operator-gateway", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gateway := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "3128")
	target := "http://" + net.JoinHostPort(s.echoIP, "8080") + "/"
	var seen []string
	for i := 0; i < 2; i++ {
		body, err := curl("-x", gateway, "--proxy-user", "ns-"+crawlNamespace+"+pool-"+pool+"+session-e2e:"+s.token, target)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, strings.TrimSpace(body))
	}
	if seen[0] == "" || seen[0] != seen[1] {
		t.Errorf("one session left through %q, want one upstream twice", seen)
	}
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
