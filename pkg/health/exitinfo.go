package health

import (
	"encoding/json"
	"io"
	"net"
	"strings"
)

// ExitInfoFields names the members of a JSON echo's answer
// (spec.healthCheck.exitInfo); each is a member name or a dotted path into
// nested objects.
type ExitInfoFields struct {
	IPField      string
	CountryField string
}

// Defaults of spec.healthCheck.exitInfo, the members ipinfo.io answers.
const (
	DefaultExitInfoIPField      = "ip"
	DefaultExitInfoCountryField = "country"
)

// maxExitInfoBody bounds what is read of a JSON echo's answer: ipinfo's is
// ~300 bytes, ip-api's ~400; 16 KiB leaves room without reading a page.
const maxExitInfoBody = 16 << 10

// readExitInfo reads a JSON echo's answer: the IP at f.IPField and the
// country at f.CountryField. ip is "" when the body is not a JSON object or
// the member is not an IP address; country is "" when the member is not a
// two-letter code (an echo may not know, or answer a name): the GeoIP
// database then decides (resolveExitCountry).
func readExitInfo(body io.Reader, f ExitInfoFields) (ip, country string) {
	b, _ := io.ReadAll(io.LimitReader(body, maxExitInfoBody+1))
	if len(b) > maxExitInfoBody {
		return "", ""
	}
	var doc map[string]any
	if json.Unmarshal(b, &doc) != nil {
		return "", ""
	}
	if s, ok := lookupPath(doc, orDefault(f.IPField, DefaultExitInfoIPField)).(string); ok {
		if parsed := net.ParseIP(strings.TrimSpace(s)); parsed != nil {
			ip = parsed.String()
		}
	}
	if s, ok := lookupPath(doc, orDefault(f.CountryField, DefaultExitInfoCountryField)).(string); ok {
		country = NormalizeCountry(s)
	}
	return ip, country
}

// lookupPath follows a dotted path through nested objects; nil when a step
// is missing or not an object.
func lookupPath(doc map[string]any, path string) any {
	var v any = doc
	for step := range strings.SplitSeq(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[step]
	}
	return v
}

// NormalizeCountry is s as an ISO 3166-1 alpha-2 code in upper case, or ""
// when s is not two ASCII letters. It checks the shape, not the list of
// assigned codes: a database or an echo may know a code newer than ours.
func NormalizeCountry(s string) string {
	s = strings.TrimSpace(s)
	if len(s) != 2 || !isASCIILetter(s[0]) || !isASCIILetter(s[1]) {
		return ""
	}
	return strings.ToUpper(s)
}

func isASCIILetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

// CountryLookup maps an exit IP to its country (the operator's GeoIP
// database, pkg/geoip); "" when it does not know.
type CountryLookup interface {
	Country(ip string) string
}

// resolveExitCountry decides a successful probe's exit country: the echo's
// own answer when it named one (it saw the address at the moment of the
// probe, and a network's echo knows its own IPs best), else the GeoIP
// database's for the exit IP, else "" (docs/decisions/0330-exit-country-from-json-echo-then-geoip-database.md).
// geo may be nil.
func resolveExitCountry(r Result, geo CountryLookup) string {
	switch {
	case !r.OK || r.ExitIP == "":
		return ""
	case r.ExitCountry != "":
		return r.ExitCountry
	case geo != nil:
		return geo.Country(r.ExitIP)
	}
	return ""
}
