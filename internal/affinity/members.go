package affinity

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Members lists the instances of a deployment, this one included, as base
// URLs ("http://10.0.0.7:8080"): sorted, each once.
type Members func(ctx context.Context) ([]string, error)

// Lookup resolves a host name to its addresses, as net.Resolver.LookupHost.
type Lookup func(ctx context.Context, host string) ([]string, error)

// ParseMembers reads the -peers setting: a comma-separated list of base
// URLs (http://host:port) and of dns:<name>:<port>, a name that resolves to
// the address of every instance (a Kubernetes headless Service). Names are
// resolved with lookup (nil: the system's resolver) each time the members
// are asked for, so instances that come and go are seen.
func ParseMembers(spec string, lookup Lookup) (Members, error) {
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	var static []string
	type name struct{ host, port string }
	var names []name
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(item, "dns:"); ok {
			host, port, err := net.SplitHostPort(rest)
			if err != nil || host == "" || !validPort(port) {
				return nil, fmt.Errorf("peer %q: want dns:<name>:<port>", item)
			}
			names = append(names, name{host, port})
			continue
		}
		u, err := NormalizeURL(item)
		if err != nil {
			return nil, err
		}
		static = append(static, u)
	}
	if len(static) == 0 && len(names) == 0 {
		return nil, errors.New("no peers: want base URLs (http://host:port) or dns:<name>:<port>, comma-separated")
	}
	return func(ctx context.Context) ([]string, error) {
		out := slices.Clone(static)
		for _, n := range names {
			addrs, err := lookup(ctx, n.host)
			if err != nil {
				return nil, fmt.Errorf("resolve peers %s: %w", n.host, err)
			}
			for _, a := range addrs {
				out = append(out, "http://"+net.JoinHostPort(a, n.port))
			}
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}, nil
}

// NormalizeURL checks that s is a peer's base URL, http://host:port (ledgerd
// serves HTTP/2 without TLS to its peers, as to gRPC clients), and returns
// it in the one spelling every instance hashes: scheme and host in lower
// case, no trailing slash.
func NormalizeURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" && u.Scheme != "HTTP" || u.Host == "" || u.User != nil ||
		u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || !validPort(u.Port()) {
		return "", fmt.Errorf("peer %q: want http://host:port", s)
	}
	return "http://" + strings.ToLower(u.Host), nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 1<<16
}
