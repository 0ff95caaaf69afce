package cloudkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// EnvFile is where the operator's part of the user-data writes the proxy's
// settings (port, credentials, lease keys, egress ranges) as shell
// variables, mode 0600, for the user's cloud-init to read (docs/aws.md,
// docs/hetzner.md): PROXY_LEASE_KEYS is forward-proxy's own variable.
const EnvFile = "/etc/proxy-operator/proxy.env"

// UserData is an instance's user-data, as cloud-init reads it: a MIME
// multipart of the Proxy's cloud-init (if any) and the operator's
// cloud-config part, which writes EnvFile and merges into the user's by
// appending, so a write_files of theirs is kept. The boundary derives from
// the request, so a retried create sends the same bytes. maxBytes is the
// cloud's limit; over it, or with a cloud-init cloud-init cannot merge, the
// error names the field and the cloud (providerName), never the content.
func UserData(providerName string, req provider.CreateRequest, creds *proxyaccess.Credentials, port int32, maxBytes int, opts ...UserDataOption) ([]byte, error) {
	var o userDataOptions
	for _, opt := range opts {
		opt(&o)
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	sum := sha256.Sum256([]byte(req.Name + "\x00" + req.SpecHash))
	if err := w.SetBoundary("proxy-operator-" + hex.EncodeToString(sum[:12])); err != nil {
		return nil, err
	}
	fmt.Fprintf(&buf, "Content-Type: multipart/mixed; boundary=%q\r\nMIME-Version: 1.0\r\n\r\n", w.Boundary())
	if len(req.CloudInit) > 0 {
		contentType, err := cloudInitType(req.CloudInit)
		if err != nil {
			return nil, fmt.Errorf("%w on %s: the operator adds a part of its own to the user-data (docs/%s.md)", err, providerName, providerName)
		}
		if err := writePart(w, contentType, "user.cfg", req.CloudInit); err != nil {
			return nil, err
		}
	}
	if err := writePart(w, "text/cloud-config", "proxy-operator.cfg", operatorCloudConfig(req, creds, port, o)); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if maxBytes > 0 && buf.Len() > maxBytes {
		return nil, fmt.Errorf("the user-data would be %d bytes, over %s's %d: shorten spec.cloudInit", buf.Len(), providerName, maxBytes)
	}
	return buf.Bytes(), nil
}

// cloudInitType is the MIME type of a cloud-init document, from its first line.
func cloudInitType(doc []byte) (string, error) {
	first, _, _ := strings.Cut(string(doc), "\n")
	switch first = strings.TrimSpace(first); {
	case first == "#cloud-config":
		return "text/cloud-config", nil
	case strings.HasPrefix(first, "#!"):
		return "text/x-shellscript", nil
	case first == "#cloud-boothook":
		return "text/cloud-boothook", nil
	}
	return "", errors.New("spec.cloudInit must start with #cloud-config, #cloud-boothook or #!")
}

func writePart(w *multipart.Writer, contentType, filename string, body []byte) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Type", contentType+`; charset="utf-8"`)
	h.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	part, err := w.CreatePart(h)
	if err != nil {
		return err
	}
	_, err = part.Write(body)
	return err
}

// operatorCloudConfig is the operator's cloud-config part, as JSON (which
// cloud-init's YAML loader reads): EnvFile with the proxy's settings, and
// with an exit range its boot script (a bootcmd, which runs every boot:
// the local route does not outlive one) and ndppd when it needs NDP.
func operatorCloudConfig(req provider.CreateRequest, creds *proxyaccess.Credentials, port int32, o userDataOptions) []byte {
	var env strings.Builder
	fmt.Fprintf(&env, "PROXY_PORT=%d\n", port)
	if creds != nil {
		fmt.Fprintf(&env, "PROXY_AUTH_USERNAME=%s\nPROXY_AUTH_PASSWORD=%s\n", shellQuote(creds.Username), shellQuote(creds.Password))
		if creds.LeaseKeys != "" {
			// One line: keys are white-space separated (leasecred.ParseKeys).
			fmt.Fprintf(&env, "PROXY_LEASE_KEYS=%s\n", shellQuote(strings.Join(strings.Fields(creds.LeaseKeys), " ")))
		}
	}
	if e := req.Proxy.Spec.Egress; e != nil {
		fmt.Fprintf(&env, "PROXY_EGRESS_ALLOW_CIDRS=%s\n", shellQuote(joinCIDRs(e.AllowCIDRs)))
		fmt.Fprintf(&env, "PROXY_EGRESS_DENY_CIDRS=%s\n", shellQuote(joinCIDRs(e.DenyCIDRs)))
	}
	if o.exitRange != nil {
		fmt.Fprintf(&env, "PROXY_EXIT_RANGES_FILE=%s\n", shellQuote(ExitRangesFile))
	}
	doc := map[string]any{
		"merge_how": []map[string]any{
			{"name": "list", "settings": []string{"append"}},
			{"name": "dict", "settings": []string{"no_replace", "recurse_list"}},
		},
		"write_files": []map[string]string{{
			"path": EnvFile, "permissions": "0600", "owner": "root:root", "content": env.String(),
		}},
	}
	if o.exitRange != nil {
		doc["bootcmd"] = [][]string{{"sh", "-c", ExitRangeScript(*o.exitRange)}}
		if o.exitRange.NDP {
			doc["packages"] = []string{"ndppd"}
		}
	}
	body, _ := json.Marshal(doc) // maps of strings always marshal
	return append([]byte("#cloud-config\n"), body...)
}

func joinCIDRs(cidrs []crawlv1alpha1.CIDR) string {
	parts := make([]string, len(cidrs))
	for i, c := range cidrs {
		parts[i] = string(c)
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell's "." of EnvFile.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
