package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Resolver finds a host's addresses; *net.Resolver is one. Tests inject
// one that answers from a table and never asks a DNS server.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// URLPolicy says which endpoint URLs the ledger may call. Endpoints are
// given by callers, and the dispatcher calls them from inside the
// operator's network: without these rules an endpoint could make it post
// to the cloud's metadata service or to an internal admin port (SSRF).
//
// Refused always: schemes other than http and https, userinfo, hosts
// written as numbers in a form other than dotted quads, and addresses that
// are unspecified (0.0.0.0/8, ::), link-local (169.254.0.0/16, which holds
// the metadata service 169.254.169.254, and fe80::/10), multicast,
// broadcast or reserved (240.0.0.0/4). Refused unless allowed: plain http,
// loopback (127.0.0.0/8, ::1), private (10/8, 172.16/12, 192.168/16,
// fc00::/7, fec0::/10) and shared (CGNAT, 100.64.0.0/10) addresses. IPv6
// forms that carry an IPv4 address (mapped ::ffff:a.b.c.d, compatible
// ::a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by that
// address.
type URLPolicy struct {
	AllowHTTP     bool // plain http (make run, tests)
	AllowLoopback bool // 127.0.0.0/8 and ::1 (make run, tests)
	AllowPrivate  bool // RFC 1918, unique local IPv6, CGNAT: receivers inside the operator's network
	// Resolver finds the addresses of a host name; nil is net.DefaultResolver.
	Resolver Resolver
}

// maxURLBytes bounds an endpoint URL; longer ones are refused.
const maxURLBytes = 2048

// Check refuses rawURL unless the policy allows it and every address its
// host resolves to (one refused address refuses the URL: a resolver may
// answer any of them at delivery). Refusals are invalid_argument,
// ENDPOINT_URL_NOT_ALLOWED, with the rule in the message. The dispatcher
// checks again at each attempt, on the address it dials (NewClient): a
// host may resolve elsewhere by then.
func (p URLPolicy) Check(ctx context.Context, rawURL string) error {
	u, err := p.checkStatic(rawURL)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(addr)
	}
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return refuse("host %q does not resolve: %v", clip(host), err)
	}
	if len(addrs) == 0 {
		return refuse("host %q resolves to no address", clip(host))
	}
	for _, a := range addrs {
		if why := p.refusal(a); why != "" {
			return refuse("host %q resolves to %s", clip(host), why)
		}
	}
	return nil
}

// checkStatic applies the rules that need no resolution: scheme, userinfo,
// host and port. It returns the parsed URL.
func (p URLPolicy) checkStatic(rawURL string) (*url.URL, error) {
	if len(rawURL) > maxURLBytes {
		return nil, refuse("the url is %d bytes, more than %d", len(rawURL), maxURLBytes)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var parseErr *url.Error
		if errors.As(err, &parseErr) {
			err = parseErr.Err // without the url, which may be long
		}
		return nil, refuse("the url does not parse: %v", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !p.AllowHTTP {
			return nil, refuse("plain http is not allowed: use https")
		}
	default:
		return nil, refuse("scheme %q: only https (or http where allowed)", clip(u.Scheme))
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, refuse("the url has no host")
	}
	if u.User != nil {
		return nil, refuse("the url carries a user or password: a receiver knows the sender by the signature")
	}
	host := u.Hostname()
	if host == "" {
		return nil, refuse("the url has no host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, refuse("port %q is not 1 to 65535", clip(port))
		}
	}
	if _, err := netip.ParseAddr(host); err != nil && looksNumeric(host) {
		// 2130706433, 0x7f.1, 127.1: resolvers (getaddrinfo, browsers) read
		// these as IPv4 addresses; Go does not, and would not judge them.
		return nil, refuse("host %q is an address in a form other than a dotted quad", clip(host))
	}
	return u, nil
}

// looksNumeric says whether a host name's last label is a number (decimal,
// octal or hex): no top-level domain is, and such hosts are addresses in
// disguise.
func looksNumeric(host string) bool {
	host = strings.TrimSuffix(host, ".")
	label := host[strings.LastIndexByte(host, '.')+1:]
	lower := strings.ToLower(label)
	if strings.HasPrefix(lower, "0x") {
		return true
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	sharedCGNAT = netip.MustParsePrefix("100.64.0.0/10")
	reserved    = netip.MustParsePrefix("240.0.0.0/4") // includes 255.255.255.255
	siteLocal   = netip.MustParsePrefix("fec0::/10")   // deprecated, still routed privately
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	compatible  = netip.MustParsePrefix("::/96") // ::a.b.c.d, deprecated IPv4-compatible
)

// CheckAddr refuses an address the policy does not allow (the rules are
// URLPolicy's). The delivery client calls it on every address it dials.
func (p URLPolicy) CheckAddr(a netip.Addr) error {
	if why := p.refusal(a); why != "" {
		return refuse("the address %s", why)
	}
	return nil
}

// refusal says why the policy refuses a ("10.0.0.1, which is private"),
// or "" if it allows it.
func (p URLPolicy) refusal(a netip.Addr) string {
	a = a.WithZone("")
	if v4, ok := embeddedIPv4(a); ok {
		if why := p.refusal(v4); why != "" {
			return fmt.Sprintf("%s, which stands for %s", a, why)
		}
		return ""
	}
	if !a.IsValid() {
		return "no address"
	}
	if class := p.refusedClass(a); class != "" {
		return fmt.Sprintf("%s, which is %s", a, class)
	}
	return ""
}

// refusedClass names the class of addresses a is in, if the policy
// refuses that class.
func (p URLPolicy) refusedClass(a netip.Addr) string {
	switch {
	case a.IsUnspecified() || thisNetwork.Contains(a):
		return "unspecified"
	case a.IsLinkLocalUnicast():
		return "link-local (the cloud's metadata service lives there)"
	case a.IsMulticast():
		return "multicast"
	case reserved.Contains(a):
		return "reserved or broadcast"
	case a.IsLoopback() && !p.AllowLoopback:
		return "loopback"
	case a.IsLoopback():
		return ""
	case (a.IsPrivate() || sharedCGNAT.Contains(a) || siteLocal.Contains(a)) && !p.AllowPrivate:
		return "private"
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address an IPv6 address stands for, if it
// is one of the forms that carry one.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if a.Is4() {
		return netip.Addr{}, false
	}
	if a.Is4In6() {
		return a.Unmap(), true
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case compatible.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}

func (p URLPolicy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

func refuse(format string, args ...any) *ledger.Error {
	return ledger.Errorf(ledger.KindInvalid, ledger.ReasonEndpointURLNotAllowed, "endpoint url: "+format, args...)
}

// clip keeps an offending value short enough to quote in a message.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
