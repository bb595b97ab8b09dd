package affinity

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseMembers(t *testing.T) {
	t.Parallel()
	addrs := map[string][]string{
		"ledgerd.pointledger.svc.cluster.local": {"10.0.0.7", "10.0.0.5"},
		"v6.local":                              {"fd00::1"},
	}
	lookup := func(_ context.Context, host string) ([]string, error) {
		a, ok := addrs[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		return a, nil
	}
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"http://b:8080,http://a:8080, http://a:8080/", []string{"http://a:8080", "http://b:8080"}},
		{"HTTP://Ledgerd-0.Ledgerd:8080", []string{"http://ledgerd-0.ledgerd:8080"}},
		{"dns:ledgerd.pointledger.svc.cluster.local:8080", []string{"http://10.0.0.5:8080", "http://10.0.0.7:8080"}},
		{"dns:v6.local:8080,http://10.0.0.9:8080", []string{"http://10.0.0.9:8080", "http://[fd00::1]:8080"}},
	} {
		members, err := ParseMembers(tc.spec, lookup)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		got, err := members(context.Background())
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.spec, got, err, tc.want)
		}
	}
	for _, spec := range []string{
		"", " , ", "a:8080", "https://a:8080", "http://a", "http://a:0", "http://a:8080/api", "http://u@a:8080",
		"http://a:8080?x=1", "dns:name", "dns::8080", "dns:name:http",
	} {
		if _, err := ParseMembers(spec, lookup); err == nil {
			t.Errorf("%q: accepted", spec)
		}
	}
	members, err := ParseMembers("http://a:8080,dns:gone.local:8080", lookup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := members(context.Background()); err == nil || !strings.Contains(err.Error(), "gone.local") {
		t.Errorf("a name that does not resolve: %v, want an error naming it", err)
	}
}
