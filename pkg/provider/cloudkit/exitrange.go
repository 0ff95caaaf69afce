package cloudkit

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Exit ranges on cloud instances (issue 54, docs/ipv6.md "Clouds"): a
// provider whose cloud routes an IPv6 prefix to an instance asks for one
// when the Proxy's spec opts in, and the instance's forward-proxy leaves
// from any address of it (--exit-range). Only the instance knows its
// prefix for certain at boot, and on AWS the operator cannot know it
// before the launch, so the instance finds it at boot from its cloud
// (ExitRangeBoot.Discover); the operator reads the same prefix back from
// the cloud's API for Instance.ExitRanges
// (docs/decisions/0310-exit-ranges-found-at-boot.md).

// LabelExitRange marks an instance created with an exit range, so that Get
// reports one only for an instance whose forward-proxy was started with it
// (a server may have public IPv6 without using it as an exit range).
const LabelExitRange = "crawl.proxyfleet.io/exit-range"

// ExitRangeIPv6 is LabelExitRange's value: the cloud's routed IPv6 prefix.
const ExitRangeIPv6 = "ipv6"

// ExitRangesFile is the file the boot script writes each boot, mode 0600:
// PROXY_EXIT_RANGES, the prefixes found, space-separated and shell-quoted.
// EnvFile names it (PROXY_EXIT_RANGES_FILE) when the instance has exit
// ranges; a cloud-init that runs forward-proxy passes each as --exit-range.
const ExitRangesFile = "/etc/proxy-operator/exit-ranges.env"

// ExitRangeBoot is how an instance sets up its exit range at boot.
type ExitRangeBoot struct {
	// Discover is a shell command that prints the instance's routed IPv6
	// prefixes, one CIDR a line, from what its cloud tells it (a metadata
	// service, the kernel's on-link routes).
	Discover string
	// NDP: the cloud's router asks for each address of the prefix by
	// neighbour solicitation (an on-link prefix), so the instance answers
	// for the whole prefix with ndppd; a routed prefix needs nothing.
	NDP bool
}

// UserDataOption adds to the operator's part of the user-data.
type UserDataOption func(*userDataOptions)

type userDataOptions struct {
	exitRange *ExitRangeBoot
}

// WithExitRange makes the user-data set up the instance's exit range at
// every boot (bootcmd, before the user's runcmd starts the proxy): the
// local route of each prefix (docs/ipv6.md), ndppd when boot.NDP, and
// ExitRangesFile.
func WithExitRange(boot ExitRangeBoot) UserDataOption {
	return func(o *userDataOptions) { o.exitRange = &boot }
}

// ExitRangeScript is the boot script of an exit range (a provider whose
// user-data is not the kit's hands it to the instance otherwise). It fails
// (cloud-init logs it) when the cloud gives no prefix, rather than start a
// proxy that would leave from its one address unnoticed.
func ExitRangeScript(boot ExitRangeBoot) string {
	var b strings.Builder
	b.WriteString("set -eu\n")
	fmt.Fprintf(&b, "ranges=$(%s)\n", boot.Discover)
	b.WriteString(`[ -n "$ranges" ] || { echo "proxy-operator: the cloud routes no IPv6 prefix to this instance" >&2; exit 1; }` + "\n")
	b.WriteString(`for r in $ranges; do ip -6 route replace local "$r" dev lo; done` + "\n")
	if boot.NDP {
		// ndppd answers for a whole prefix; the kernel's proxy_ndp only
		// for addresses listed one by one (ip -6 neigh add proxy).
		b.WriteString(`dev=$(ip -6 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i+1); exit }}')` + "\n")
		b.WriteString(`{ echo "proxy $dev {"; for r in $ranges; do echo "  rule $r { static }"; done; echo "}"; } > /etc/ndppd.conf` + "\n")
		b.WriteString(`if command -v ndppd >/dev/null; then systemctl restart ndppd; fi` + "\n")
	}
	b.WriteString("umask 077\nmkdir -p /etc/proxy-operator\n")
	fmt.Fprintf(&b, `printf "PROXY_EXIT_RANGES='%%s'\n" "$(echo $ranges)" > %s`+"\n", ExitRangesFile)
	return b.String()
}

// ExitRanges are the exit ranges of an instance for Instance.ExitRanges:
// the IPv6 prefixes the cloud reports for it (CIDRs; a host address with
// its prefix length counts as its prefix), canonical, sorted and without
// duplicates, when its labels say it was created with an exit range; nil
// otherwise. Unparsable entries are left out. It is pure.
func ExitRanges(labels map[string]string, prefixes []string) []string {
	if labels[LabelExitRange] != ExitRangeIPv6 {
		return nil
	}
	var out []string
	for _, s := range prefixes {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() {
			continue
		}
		out = append(out, p.Masked().String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}
