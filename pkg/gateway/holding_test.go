package gateway

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
	"github.com/proxyfleet/proxy-operator/pkg/lease/client"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// renewingLeases answers every renewal with creds.
type renewingLeases struct {
	Leases
	creds *proxyaccess.Credentials
}

func (r renewingLeases) Renew(_ context.Context, _ auth.User, id string, ttl time.Duration, _ client.Report) (client.Lease, *proxyaccess.Credentials, error) {
	return client.Lease{ID: id + "'", TTL: ttl, ExpiresAt: time.Now().Add(ttl)}, r.creds, nil
}

// TestARenewalsCredentialsReachTheUpstream: a renewal's lease-bound
// credentials are what the next tunnel or request sends the upstream; a
// proxy's own credentials, which never change, are kept.
func TestARenewalsCredentialsReachTheUpstream(t *testing.T) {
	for name, tc := range map[string]struct {
		renewed  *proxyaccess.Credentials
		wantPass string
	}{
		"lease-bound": {renewed: &proxyaccess.Credentials{Username: "u", Password: "signed-for-the-new-end", LeaseBound: true}, wantPass: "signed-for-the-new-end"},
		"none":        {wantPass: "signed-for-the-first-end"},
	} {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			l := client.Lease{ID: "id", Proxy: client.LeasedProxy{URL: "http://127.0.0.1:3128"}, TTL: time.Minute, ExpiresAt: now.Add(time.Minute)}
			h, err := newHolding(auth.User{Name: "crawler"}, l, &proxyaccess.Credentials{Username: "u", Password: "signed-for-the-first-end"})
			if err != nil {
				t.Fatal(err)
			}
			before := h.upstream()
			if !h.renewIfDue(context.Background(), renewingLeases{creds: tc.renewed}, now.Add(45*time.Second), klog.Background()) {
				t.Fatal("the renewal lost the lease")
			}
			if pass, _ := h.upstream().User.Password(); pass != tc.wantPass {
				t.Errorf("upstream password %q after the renewal, want %q", pass, tc.wantPass)
			}
			if pass, _ := before.User.Password(); pass != "signed-for-the-first-end" {
				t.Errorf("the URL handed out before the renewal changed under its user: %q", pass)
			}
		})
	}
}
