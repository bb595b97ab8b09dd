package webhook

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/pointledger/pointledger/internal/ledger"
)

// tableResolver answers from a table, one answer after the other for a
// name given several (the last repeats), and records the names asked. It
// never asks a DNS server: these tests send no packet anywhere.
type tableResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	asked   []string
}

func resolves(answers map[string][]string) *tableResolver {
	r := &tableResolver{answers: map[string][][]netip.Addr{}}
	for host, addrs := range answers {
		r.then(host, addrs...)
	}
	return r
}

// then adds the next answer for host.
func (r *tableResolver) then(host string, addrs ...string) *tableResolver {
	var answer []netip.Addr
	for _, a := range addrs {
		answer = append(answer, netip.MustParseAddr(a))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[host] = append(r.answers[host], answer)
	return r
}

func (r *tableResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	answers := r.answers[host]
	if len(answers) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	answer := answers[0]
	if len(answers) > 1 {
		r.answers[host] = answers[1:]
	}
	return answer, nil
}

func (r *tableResolver) Asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

const public = "93.184.216.34" // never dialed: the tests' dialer refuses it

func TestURLPolicyCheck(t *testing.T) {
	t.Parallel()
	names := map[string][]string{
		"hooks.example.com":    {public, "2606:2800:220:1::1"},
		"localhost":            {"127.0.0.1", "::1"},
		"internal.example.com": {"10.0.0.1"},
		"metadata.example.com": {"169.254.169.254"},
		"mixed.example.com":    {public, "10.1.2.3"},
		"mapped.example.com":   {"::ffff:10.0.0.1"},
		"empty.example.com":    {},
	}
	tests := urlPolicyCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.policy
			p.Resolver = resolves(names)
			err := p.Check(context.Background(), tt.url)
			if tt.ok {
				if err != nil {
					t.Errorf("Check(%q): %v, want allowed", tt.url, err)
				}
				return
			}
			e, ok := ledger.AsError(err)
			if !ok || e.Kind != ledger.KindInvalid || e.Reason != ledger.ReasonEndpointURLNotAllowed {
				t.Fatalf("Check(%.60q) = %v, want invalid %s", tt.url, err, ledger.ReasonEndpointURLNotAllowed)
			}
			t.Log(e.Message)
			if len(e.Message) > 300 {
				t.Errorf("message is %d bytes", len(e.Message))
			}
		})
	}
}

// urlPolicyCase is a URL and whether a policy allows it.
type urlPolicyCase struct {
	name   string
	policy URLPolicy
	url    string
	ok     bool
}

// urlPolicyCases: the names they use resolve as TestURLPolicyCheck's
// resolver says.
func urlPolicyCases() []urlPolicyCase {
	strict := URLPolicy{}
	dev := URLPolicy{AllowHTTP: true, AllowLoopback: true}
	inside := URLPolicy{AllowPrivate: true}
	open := URLPolicy{AllowHTTP: true, AllowLoopback: true, AllowPrivate: true}
	return []urlPolicyCase{
		{name: "https to a public name", policy: strict, url: "https://hooks.example.com/pointledger?x=1", ok: true},
		{name: "https with a port", policy: strict, url: "https://hooks.example.com:8443/h", ok: true},
		{name: "upper-case scheme", policy: strict, url: "HTTPS://hooks.example.com/", ok: true},
		{name: "public address", policy: strict, url: "https://" + public + "/", ok: true},
		{name: "plain http", policy: strict, url: "http://hooks.example.com/"},
		{name: "plain http allowed", policy: dev, url: "http://hooks.example.com/", ok: true},
		{name: "ftp", policy: open, url: "ftp://hooks.example.com/"},
		{name: "file", policy: open, url: "file:///etc/passwd"},
		{name: "javascript", policy: open, url: "javascript:alert(1)"},
		{name: "no scheme", policy: open, url: "hooks.example.com/h"},
		{name: "opaque", policy: open, url: "https:hooks.example.com"},
		{name: "no host", policy: open, url: "https:///h"},
		{name: "empty", policy: open, url: ""},
		{name: "userinfo", policy: open, url: "https://user:secret@hooks.example.com/"},
		{name: "user only", policy: open, url: "https://user@hooks.example.com/"},
		{name: "port 0", policy: open, url: "https://hooks.example.com:0/"},
		{name: "port 70000", policy: open, url: "https://hooks.example.com:70000/"},
		{name: "too long", policy: open, url: "https://hooks.example.com/" + strings.Repeat("a", 3000)},
		{name: "does not parse", policy: open, url: "https://hooks.example.com/%zz"},

		{name: "10.0.0.1", policy: strict, url: "https://10.0.0.1/"},
		{name: "10.0.0.1 allowed as private", policy: inside, url: "https://10.0.0.1/", ok: true},
		{name: "172.16/12", policy: strict, url: "https://172.31.255.1/"},
		{name: "192.168/16", policy: strict, url: "https://192.168.1.1/"},
		{name: "CGNAT", policy: strict, url: "https://100.64.0.1/"},
		{name: "CGNAT allowed as private", policy: inside, url: "https://100.127.255.254/", ok: true},
		{name: "unique local v6", policy: strict, url: "https://[fd12:3456::1]/"},
		{name: "site-local v6", policy: strict, url: "https://[fec0::1]/"},
		{name: "metadata service", policy: strict, url: "http://169.254.169.254/latest/meta-data/"},
		{name: "metadata service, everything allowed", policy: open, url: "http://169.254.169.254/latest/meta-data/"},
		{name: "link-local v6 with zone", policy: open, url: "https://[fe80::1%25eth0]/"},
		{name: "::1", policy: strict, url: "https://[::1]/"},
		{name: "::1 allowed as loopback", policy: dev, url: "https://[::1]:8080/", ok: true},
		{name: "127.0.0.1", policy: strict, url: "https://127.0.0.1/"},
		{name: "127.0.0.1 allowed as private only", policy: inside, url: "https://127.0.0.1/"},
		{name: "127.0.0.1 allowed as loopback", policy: dev, url: "http://127.0.0.1:9000/", ok: true},
		{name: "127.5.6.7", policy: strict, url: "https://127.5.6.7/"},
		{name: "0.0.0.0", policy: open, url: "http://0.0.0.0/"},
		{name: "0.1.2.3", policy: open, url: "http://0.1.2.3/"},
		{name: "::", policy: open, url: "http://[::]/"},
		{name: "multicast", policy: open, url: "http://224.0.0.1/"},
		{name: "multicast v6", policy: open, url: "http://[ff02::1]/"},
		{name: "broadcast", policy: open, url: "http://255.255.255.255/"},
		{name: "reserved", policy: open, url: "http://240.0.0.1/"},
		{name: "mapped 10.0.0.1", policy: strict, url: "https://[::ffff:10.0.0.1]/"},
		{name: "mapped metadata", policy: open, url: "https://[::ffff:169.254.169.254]/"},
		{name: "mapped loopback", policy: strict, url: "https://[::ffff:127.0.0.1]/"},
		{name: "mapped public", policy: strict, url: "https://[::ffff:" + public + "]/", ok: true},
		{name: "NAT64 metadata", policy: open, url: "https://[64:ff9b::a9fe:a9fe]/"},
		{name: "6to4 private", policy: strict, url: "https://[2002:a00:1::1]/"},
		{name: "compatible private", policy: strict, url: "https://[::10.0.0.1]/"},
		{name: "decimal loopback", policy: strict, url: "https://2130706433/"},
		{name: "hex loopback", policy: strict, url: "https://0x7f.1/"},
		{name: "short loopback", policy: strict, url: "https://127.1/"},
		{name: "octal loopback", policy: strict, url: "https://0177.0.0.1/"},
		{name: "numeric even if allowed", policy: open, url: "https://2130706433/"},

		{name: "localhost", policy: strict, url: "https://localhost/"},
		{name: "localhost allowed", policy: dev, url: "http://localhost:8080/", ok: true},
		{name: "name resolving to 10.0.0.1", policy: strict, url: "https://internal.example.com/"},
		{name: "name resolving to the metadata service", policy: open, url: "http://metadata.example.com/"},
		{name: "name resolving to public and private", policy: strict, url: "https://mixed.example.com/"},
		{name: "name resolving to mapped private", policy: strict, url: "https://mapped.example.com/"},
		{name: "name resolving to nothing", policy: strict, url: "https://empty.example.com/"},
		{name: "name that does not resolve", policy: strict, url: "https://nowhere.example.com/"},
	}
}

// An address the policy refuses is refused however it is written.
func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"10.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::", "::a00:1"} {
		if err := (URLPolicy{}).CheckAddr(netip.MustParseAddr(a)); ledger.ReasonOf(err) != ledger.ReasonEndpointURLNotAllowed {
			t.Errorf("CheckAddr(%s) = %v, want refused", a, err)
		}
		if err := (URLPolicy{AllowPrivate: true}).CheckAddr(netip.MustParseAddr(a)); err != nil {
			t.Errorf("CheckAddr(%s) with private allowed: %v", a, err)
		}
	}
	if err := (URLPolicy{}).CheckAddr(netip.Addr{}); err == nil {
		t.Error("CheckAddr accepted the zero address")
	}
}
