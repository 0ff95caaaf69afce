package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

var proxiesGVR = crawlv1alpha1.SchemeGroupVersion.WithResource("proxies")

// validExternal and validManaged are the smallest valid specs; each invalid
// case below breaks exactly one rule of one of them.
const validExternal = `
mode: External
endpoint: {host: 127.0.0.1, port: 3128}
`

const validManaged = `
provider: kubernetes
`

// TestInvalidProxiesAreRejected sends one manifest per schema rule to the real
// API server and checks that it is refused with a message naming the field.
func TestInvalidProxiesAreRejected(t *testing.T) {
	env := apiServer.Get(t)
	tests := map[string]struct {
		spec      string // the whole spec, YAML
		wantField string // must appear in the error
	}{
		"unknown mode":                          {spec: `{mode: Hybrid, provider: local}`, wantField: "spec.mode"},
		"External without endpoint":             {spec: `{mode: External}`, wantField: "spec.endpoint"},
		"Managed without provider":              {spec: `{mode: Managed}`, wantField: "spec.provider"},
		"default mode without provider":         {spec: `{maxLeases: 2}`, wantField: "spec.provider"},
		"unknown provider":                      {spec: `{provider: vultr}`, wantField: "spec.provider"},
		"local exit range not a CIDR":           {spec: `{provider: local, local: {exitRanges: [fd00:1::/64, fd00:2::]}}`, wantField: "spec.local.exitRanges[1]"},
		"external exit range not a CIDR":        {spec: `{mode: External, endpoint: {host: h, port: 1}, exitRanges: [wide]}`, wantField: "spec.exitRanges[0]"},
		"exit ranges on a Managed proxy":        {spec: `{provider: gce, exitRanges: [fd00::/64]}`, wantField: "spec.exitRanges"},
		"session without spec.session":          {spec: `{provider: session}`, wantField: "spec.session"},
		"session block, local provider":         {spec: `{provider: local, session: {instance: a, endpoint: {host: h, port: 1}, credentialsSecretRef: {name: s}}}`, wantField: "spec.session"},
		"session with auth":                     {spec: `{provider: session, auth: {secretRef: {name: s}}, session: {instance: a, endpoint: {host: h, port: 1}, credentialsSecretRef: {name: s}}}`, wantField: "spec.provider"},
		"session without instance":              {spec: `{provider: session, session: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: s}}}`, wantField: "spec.session.instance"},
		"aws block, gce provider":               {spec: `{provider: gce, aws: {region: eu-west-1}}`, wantField: "spec.aws"},
		"aws region not a region":               {spec: `{provider: aws, aws: {region: Europe}}`, wantField: "spec.aws.region"},
		"aws no instance types":                 {spec: `{provider: aws, aws: {instanceTypes: []}}`, wantField: "spec.aws.instanceTypes"},
		"aws instance type malformed":           {spec: `{provider: aws, aws: {instanceTypes: [t3.micro, "T3 micro"]}}`, wantField: "spec.aws.instanceTypes[1]"},
		"aws subnet not a subnet ID":            {spec: `{provider: aws, aws: {subnetIDs: [vpc-0123456789abcdef0]}}`, wantField: "spec.aws.subnetIDs[0]"},
		"aws security group not an ID":          {spec: `{provider: aws, aws: {securityGroupIDs: [default]}}`, wantField: "spec.aws.securityGroupIDs[0]"},
		"aws image id and ssmParameter":         {spec: `{provider: aws, aws: {image: {id: ami-0123456789abcdef0, ssmParameter: /a/b}}}`, wantField: "spec.aws.image"},
		"aws image id malformed":                {spec: `{provider: aws, aws: {image: {id: ubuntu}}}`, wantField: "spec.aws.image.id"},
		"aws spot price not a number":           {spec: `{provider: aws, aws: {spot: {maxPrice: cheap}}}`, wantField: "spec.aws.spot.maxPrice"},
		"aws allowFrom and groups":              {spec: `{provider: aws, aws: {allowFrom: [10.0.0.0/16], securityGroupIDs: [sg-0123456789abcdef0]}}`, wantField: "spec.aws.allowFrom"},
		"aws allowFrom not a CIDR":              {spec: `{provider: aws, aws: {allowFrom: [10.0.0.0/16, gateway]}}`, wantField: "spec.aws.allowFrom[1]"},
		"hetzner allowFrom and firewalls":       {spec: `{provider: hetzner, hetzner: {allowFrom: [10.0.0.0/16], firewallIDs: [38]}}`, wantField: "spec.hetzner.allowFrom"},
		"hetzner allowFrom not a CIDR":          {spec: `{provider: hetzner, hetzner: {allowFrom: [10.0.0.0/16, gateway]}}`, wantField: "spec.hetzner.allowFrom[1]"},
		"hetzner exit range without IPv6":       {spec: `{provider: hetzner, hetzner: {ipv6ExitRange: true}}`, wantField: "spec.hetzner.ipv6ExitRange"},
		"hetzner exit range, IPv6 off":          {spec: `{provider: hetzner, hetzner: {ipv6ExitRange: true, publicIPv6: false}}`, wantField: "spec.hetzner.ipv6ExitRange"},
		"digitalocean block, hetzner provider":  {spec: `{provider: hetzner, digitalocean: {region: ams3}}`, wantField: "spec.digitalocean"},
		"digitalocean region not a slug":        {spec: `{provider: digitalocean, digitalocean: {region: Amsterdam}}`, wantField: "spec.digitalocean.region"},
		"digitalocean no sizes":                 {spec: `{provider: digitalocean, digitalocean: {sizes: []}}`, wantField: "spec.digitalocean.sizes"},
		"digitalocean size malformed":           {spec: `{provider: digitalocean, digitalocean: {sizes: [s-1vcpu-1gb, "S 1"]}}`, wantField: "spec.digitalocean.sizes[1]"},
		"digitalocean an operator tag":          {spec: `{provider: digitalocean, digitalocean: {tags: [crawlers, "pxo:cluster-id:x"]}}`, wantField: "spec.digitalocean.tags"},
		"digitalocean tag with a dot":           {spec: `{provider: digitalocean, digitalocean: {tags: [team.search]}}`, wantField: "spec.digitalocean.tags[0]"},
		"digitalocean allowFrom not a CIDR":     {spec: `{provider: digitalocean, digitalocean: {allowFrom: [10.0.0.0/16, gateway]}}`, wantField: "spec.digitalocean.allowFrom[1]"},
		"digitalocean vpc not a UUID":           {spec: `{provider: digitalocean, digitalocean: {vpcUUID: default}}`, wantField: "spec.digitalocean.vpcUUID"},
		"azure block, digitalocean provider":    {spec: `{provider: digitalocean, azure: {location: westeurope}}`, wantField: "spec.azure"},
		"azure location not a region":           {spec: `{provider: azure, azure: {location: West Europe}}`, wantField: "spec.azure.location"},
		"azure no sizes":                        {spec: `{provider: azure, azure: {vmSizes: []}}`, wantField: "spec.azure.vmSizes"},
		"azure size malformed":                  {spec: `{provider: azure, azure: {vmSizes: [Standard_B1s, "B 1"]}}`, wantField: "spec.azure.vmSizes[1]"},
		"azure subnet not a subnet ID":          {spec: `{provider: azure, azure: {subnetID: proxies}}`, wantField: "spec.azure.subnetID"},
		"azure allowFrom not a CIDR":            {spec: `{provider: azure, azure: {allowFrom: [10.0.0.0/16, gateway]}}`, wantField: "spec.azure.allowFrom[1]"},
		"azure image without an offer":          {spec: `{provider: azure, azure: {image: {publisher: Debian, sku: 12-gen2}}}`, wantField: "spec.azure.image.offer"},
		"upstream block, aws provider":          {spec: `{provider: aws, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "u-{session}"}}`, wantField: "spec.upstream"},
		"upstream provider without block":       {spec: `{provider: upstream}`, wantField: "spec.upstream"},
		"upstream with spec.auth":               {spec: `{provider: upstream, auth: {secretRef: {name: a}}, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "u-{session}"}}`, wantField: "spec.provider"},
		"upstream template without session":     {spec: `{provider: upstream, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "customer-acme"}}`, wantField: "spec.upstream.usernameTemplate"},
		"upstream template unknown placeholder": {spec: `{provider: upstream, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "u-{session}-{city}"}}`, wantField: "spec.upstream.usernameTemplate"},
		"upstream template with a colon":        {spec: `{provider: upstream, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "u:{session}"}}`, wantField: "spec.upstream.usernameTemplate"},
		"exitInfo with exitIPFromBody":          {spec: `{provider: local, healthCheck: {exitIPFromBody: true, exitInfo: {ipField: ip}}}`, wantField: "spec.healthCheck.exitInfo"},
		"exitInfo field not a path":             {spec: `{provider: local, healthCheck: {exitInfo: {countryField: "loc..cc"}}}`, wantField: "spec.healthCheck.exitInfo.countryField"},
		"upstream country without countries":    {spec: `{provider: upstream, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "c-{country}-s-{session}"}}`, wantField: "spec.upstream.countries"},
		"upstream lifetime below 1m":            {spec: `{provider: upstream, upstream: {endpoint: {host: h, port: 1}, credentialsSecretRef: {name: v}, usernameTemplate: "u-{session}", sessionLifetime: 30s}}`, wantField: "spec.upstream.sessionLifetime"},
		"External with provider":                {spec: `{mode: External, provider: local, endpoint: {host: h, port: 1}}`, wantField: "spec.provider"},
		"External with cloudInit":               {spec: `{mode: External, endpoint: {host: h, port: 1}, cloudInit: {inline: x}}`, wantField: "spec.cloudInit"},
		"Managed with endpoint":                 {spec: `{provider: local, endpoint: {host: h, port: 1}}`, wantField: "spec.endpoint"},
		"kubernetes block, local provider":      {spec: `{provider: local, kubernetes: {port: 3128}}`, wantField: "spec.kubernetes"},
		"gce block, kubernetes provider":        {spec: `{provider: kubernetes, gce: {zone: z}}`, wantField: "spec.gce"},
		"local block, gce provider":             {spec: `{provider: gce, local: {}}`, wantField: "spec.local"},
		"cloudInit inline and secretRef":        {spec: `{provider: local, cloudInit: {inline: x, secretRef: {name: s}}}`, wantField: "spec.cloudInit"},
		"cloudInit empty":                       {spec: `{provider: local, cloudInit: {}}`, wantField: "spec.cloudInit"},
		"cloudInit secret name invalid":         {spec: `{provider: local, cloudInit: {secretRef: {name: Not_A_Name}}}`, wantField: "spec.cloudInit.secretRef.name"},
		"cloudInit secret key invalid":          {spec: `{provider: local, cloudInit: {secretRef: {name: s, key: "a/b"}}}`, wantField: "spec.cloudInit.secretRef.key"},
		"timeout equal to interval":             {spec: `{provider: local, healthCheck: {interval: 5s, timeout: 5s}}`, wantField: "spec.healthCheck.timeout"},
		"timeout above interval":                {spec: `{provider: local, healthCheck: {interval: 2s, timeout: 1m}}`, wantField: "spec.healthCheck.timeout"},
		"timeout zero":                          {spec: `{provider: local, healthCheck: {timeout: 0s}}`, wantField: "spec.healthCheck.timeout"},
		"interval below 1s":                     {spec: `{provider: local, healthCheck: {interval: 500ms, timeout: 100ms}}`, wantField: "spec.healthCheck.interval"},
		"interval not a duration":               {spec: `{provider: local, healthCheck: {interval: soon}}`, wantField: "spec.healthCheck.interval"},
		"successThreshold zero":                 {spec: `{provider: local, healthCheck: {successThreshold: 0}}`, wantField: "spec.healthCheck.successThreshold"},
		"failureThreshold zero":                 {spec: `{provider: local, healthCheck: {failureThreshold: 0}}`, wantField: "spec.healthCheck.failureThreshold"},
		"expectedStatus below 100":              {spec: `{provider: local, healthCheck: {expectedStatus: 99}}`, wantField: "spec.healthCheck.expectedStatus"},
		"url with ftp scheme":                   {spec: `{provider: local, healthCheck: {url: "ftp://example.test/x"}}`, wantField: "spec.healthCheck.url"},
		"url relative":                          {spec: `{provider: local, healthCheck: {url: "/generate_204"}}`, wantField: "spec.healthCheck.url"},
		"egress allow not a CIDR":               {spec: `{provider: local, egress: {allowCIDRs: ["10.0.0.0/8", "example.com"]}}`, wantField: "spec.egress.allowCIDRs[1]"},
		"egress deny prefix too long":           {spec: `{provider: local, egress: {denyCIDRs: ["10.0.0.0/33"]}}`, wantField: "spec.egress.denyCIDRs[0]"},
		"egress deny a bare address":            {spec: `{provider: local, egress: {denyCIDRs: ["10.0.0.1"]}}`, wantField: "spec.egress.denyCIDRs[0]"},
		"egress on an External proxy":           {spec: `{mode: External, endpoint: {host: h, port: 1}, egress: {allowCIDRs: ["10.0.0.0/8"]}}`, wantField: "spec.egress"},
		"endpoint port 0":                       {spec: `{mode: External, endpoint: {host: h, port: 0}}`, wantField: "spec.endpoint.port"},
		"endpoint port 65536":                   {spec: `{mode: External, endpoint: {host: h, port: 65536}}`, wantField: "spec.endpoint.port"},
		"endpoint without host":                 {spec: `{mode: External, endpoint: {port: 3128}}`, wantField: "spec.endpoint.host"},
		"endpoint host with a space":            {spec: `{mode: External, endpoint: {host: "bad host", port: 3128}}`, wantField: "spec.endpoint.host"},
		"endpoint scheme socks5":                {spec: `{mode: External, endpoint: {host: h, port: 1, scheme: socks5}}`, wantField: "spec.endpoint.scheme"},
		"kubernetes port 0":                     {spec: `{provider: kubernetes, kubernetes: {port: 0}}`, wantField: "spec.kubernetes.port"},
		"gce port 70000":                        {spec: `{provider: gce, gce: {port: 70000}}`, wantField: "spec.gce.port"},
		"maxLeases zero":                        {spec: `{provider: local, maxLeases: 0}`, wantField: "spec.maxLeases"},
		"auth without secret name":              {spec: `{provider: local, auth: {secretRef: {}}}`, wantField: "spec.auth.secretRef.name"},
		"unknown field":                         {spec: `{provider: local, colour: blue}`, wantField: "spec.colour"},
		"unknown nested field":                  {spec: `{provider: local, healthCheck: {retries: 3}}`, wantField: "spec.healthCheck.retries"},
		"wrong type":                            {spec: `{provider: local, maxLeases: many}`, wantField: "spec.maxLeases"},
	}
	ctx := context.Background()
	client := dynamic.NewForConfigOrDie(env.Config).Resource(proxiesGVR).Namespace(newNamespace(t))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := proxyObject(t, dnsName(name), tc.spec)
			_, err := client.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			if err == nil {
				t.Fatalf("created; want rejection naming %s", tc.wantField)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("error %v is not Invalid or BadRequest", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("error does not name %s:\n%v", tc.wantField, err)
			}
		})
	}
	if len(tests) < 25 {
		t.Errorf("only %d invalid manifests; the schema has more rules than that", len(tests))
	}
}

// TestValidMinimalProxiesAreAccepted guards the invalid cases above: each of
// them breaks a spec that is otherwise accepted.
func TestValidMinimalProxiesAreAccepted(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	client := dynamic.NewForConfigOrDie(env.Config).Resource(proxiesGVR).Namespace(newNamespace(t))
	for name, spec := range map[string]string{
		"external": validExternal, "managed": validManaged,
		"managed-with-egress": `{provider: local, egress: {allowCIDRs: ["10.20.0.0/16", "fd00:1::/64"], denyCIDRs: ["10.20.3.0/24"]}}`,
		"upstream": `{provider: upstream, upstream: {endpoint: {host: brd.superproxy.io, port: 33335}, credentialsSecretRef: {name: vendor},
			usernameTemplate: "brd-customer-acme-zone-res-country-{country}-session-{session}", countries: [us, de], sessionLifetime: 5m},
			healthCheck: {url: "https://api.ipify.org", expectedStatus: 200, exitIPFromBody: true}}`,
		"exit-info":                   `{provider: local, healthCheck: {url: "https://ipinfo.io/json", expectedStatus: 200, exitInfo: {ipField: ip, countryField: location.country_code}}}`,
		"digitalocean-owned-firewall": `{provider: digitalocean, digitalocean: {allowFrom: [10.20.0.0/16, "2001:db8::/32"]}}`,
		"hetzner-owned-firewall":      `{provider: hetzner, hetzner: {allowFrom: [10.20.0.0/16, "2001:db8::/32"]}}`,
		"hetzner-exit-range":          `{provider: hetzner, hetzner: {publicIPv6: true, ipv6ExitRange: true}}`,
		"aws-owned-group":             `{provider: aws, aws: {subnetIDs: [subnet-0a0a0a0a0a0a0a0a0], allowFrom: [10.20.0.0/16, "2001:db8::/32"]}}`,
		"aws": `{provider: aws, aws: {region: eu-west-1, instanceTypes: [t3.micro, t3a.micro], subnetIDs: [subnet-0a0a0a0a0a0a0a0a0],
			securityGroupIDs: [sg-0123456789abcdef0], image: {ssmParameter: /aws/service/debian/release/12/latest/amd64}, spot: {maxPrice: "0.0040"}}}`,
	} {
		if _, err := client.Create(ctx, proxyObject(t, name, spec), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestModeIsImmutable(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	client := dynamic.NewForConfigOrDie(env.Config).Resource(proxiesGVR).Namespace(newNamespace(t))
	created, err := client.Create(ctx, proxyObject(t, "flip", validExternal), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(created.Object, "spec")
	spec["mode"] = "Managed"
	spec["provider"] = "local"
	delete(spec, "endpoint")
	if err := unstructured.SetNestedMap(created.Object, spec, "spec"); err != nil {
		t.Fatal(err)
	}
	_, err = client.Update(ctx, created, metav1.UpdateOptions{})
	if err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("update changing mode: got %v, want Invalid", err)
	}
	if !strings.Contains(err.Error(), "spec.mode") || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("error does not say spec.mode is immutable:\n%v", err)
	}
}

// proxyObject builds an unstructured Proxy from a spec written in YAML, so that
// invalid values the typed API cannot express still reach the server.
func proxyObject(t *testing.T, name, specYAML string) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{}
	if err := yaml.Unmarshal([]byte(specYAML), &spec); err != nil {
		t.Fatalf("bad test spec %q: %v", specYAML, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crawlv1alpha1.SchemeGroupVersion.String(),
		"kind":       "Proxy",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}
