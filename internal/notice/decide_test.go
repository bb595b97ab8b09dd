package notice

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

func TestLeadsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		leads []time.Duration
		want  string // in the error; "": accepted
	}{
		{"none: the default", nil, ""},
		{"two", []time.Duration{day, 7 * day}, ""},
		{"zero", []time.Duration{7 * day, 0}, "0s is not positive"},
		{"negative", []time.Duration{-time.Hour}, "-1h0m0s is not positive"},
		{"twice", []time.Duration{day, 7 * day, day}, "24h0m0s is named twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(nil, nil, nil, Options{Leads: tt.leads})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("New(%v) = %v, want it accepted", tt.leads, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("New(%v) = %v, want an error saying %q", tt.leads, err, tt.want)
			}
		})
	}
}

func TestParseLeads(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]time.Duration{
		"7d":         {7 * day},
		"7d,1d":      {7 * day, day},
		" 7d , 36h ": {7 * day, 36 * time.Hour},
	} {
		if got, err := ParseLeads(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseLeads(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "7", "7x", "1.5d", "d", "7d,7d", "1d,24h", "0d", "-1d"} {
		if got, err := ParseLeads(in); err == nil {
			t.Errorf("ParseLeads(%q) = %v, want an error", in, got)
		}
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	leads := []time.Duration{day, 7 * day}
	soon, later, far := now.Add(20*time.Hour), now.Add(3*day), now.Add(30*day)
	acct := ledger.Account{UserID: "u", Version: 4}
	for _, g := range []struct {
		expire time.Time
		amount int64
	}{{soon, 1}, {later, 2}, {far, 3}, {time.Time{}, 4}} {
		acct = acct.Apply(ledger.Entry{UserID: "u", Type: ledger.EntryGrant, Amount: decimal.NewFromInt(g.amount), ExpireTime: g.expire, Version: acct.Version + 1})
	}
	ids := 0
	newID := func() string { ids++; return string(rune('a' + ids - 1)) }

	decide, retry := plan(acct, now, leads, nil, newID)
	if len(retry) != 0 || len(decide) != 2 ||
		!decide[0].Expire.Equal(soon) || decide[0].Lead != day || !decide[1].Expire.Equal(later) || decide[1].Lead != 7*day {
		t.Fatalf("nothing written: decide %+v, retry %+v; want soon's 1-day and later's 7-day notices", decide, retry)
	}

	// soon's 7-day notice was written (and not emitted) before it came
	// within a day: the 1-day one is still decided, the 7-day one retried.
	// later's 7-day notice was emitted: nothing.
	have := []Notice{
		{UserID: "u", Expire: soon, Lead: 7 * day},
		{UserID: "u", Expire: later, Lead: 7 * day, Emitted: true},
		{UserID: "u", Expire: now.Add(2 * day), Lead: 7 * day}, // of a bucket since spent
	}
	decide, retry = plan(acct, now, leads, have, newID)
	if len(decide) != 1 || !decide[0].Expire.Equal(soon) || decide[0].Lead != day {
		t.Errorf("decide %+v, want soon's 1-day notice", decide)
	}
	if len(retry) != 1 || !retry[0].Expire.Equal(soon) || retry[0].Lead != 7*day {
		t.Errorf("retry %+v, want soon's 7-day notice only (not the spent bucket's)", retry)
	}

	// A notice of a nearer lead than is due stops the farther one.
	decide, _ = plan(acct, now, leads, []Notice{{UserID: "u", Expire: later, Lead: day, Emitted: true}}, newID)
	if len(decide) != 1 || !decide[0].Expire.Equal(soon) {
		t.Errorf("decide %+v, want soon's notice alone", decide)
	}
}

const day = 24 * time.Hour
