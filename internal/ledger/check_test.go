package ledger

import (
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestCheckFold(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	expire := at.Add(time.Hour)
	d := decimal.RequireFromString
	entries := []Entry{
		{UserID: "u", Version: 1, Type: EntryGrant, Amount: d("10"), BalanceAfter: d("10"), CreateTime: at},
		{UserID: "u", Version: 2, Type: EntryGrant, Amount: d("5"), BalanceAfter: d("15"), CreateTime: at, ExpireTime: expire},
		{UserID: "u", Version: 3, Type: EntryPurchase, Amount: d("-7"), BalanceAfter: d("8"), CreateTime: at,
			Draws: []Draw{{Expire: expire, Amount: d("5")}, {Amount: d("2")}}},
	}
	sound, _, err := Fold("u", entries)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		acct    func(Account) Account
		entries []Entry
		want    []string // finding kinds, in order
	}{
		{name: "the fold itself", acct: func(a Account) Account { return a }, entries: entries},
		{name: "no entries, no account", acct: func(Account) Account { return NewAccount("u") }},
		{name: "a balance off", acct: func(a Account) Account { a.Balance = d("9"); return a }, entries: entries,
			want: []string{FindingBalanceMismatch}},
		{name: "a version ahead", acct: func(a Account) Account { a.Version = 4; return a }, entries: entries,
			want: []string{FindingVersionMismatch}},
		{name: "a bucket off", acct: func(a Account) Account {
			a.Buckets = slices.Clone(a.Buckets)
			a.Buckets[0].Amount = d("9")
			return a
		}, entries: entries, want: []string{FindingBuckets}},
		{name: "a gap in the versions", acct: func(a Account) Account { return a }, entries: []Entry{entries[0], entries[2]},
			want: []string{FindingVersionGap, FindingVersionMismatch, FindingBalanceMismatch, FindingBuckets}},
		{name: "a negative balance", acct: func(a Account) Account { a.Balance = d("-1"); return a }, entries: entries,
			want: []string{FindingBalanceMismatch, FindingNegativeBalance}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, findings := CheckFold(tt.acct(sound), tt.entries)
			var kinds []string
			for _, f := range findings {
				kinds = append(kinds, f.Kind)
			}
			if !slices.Equal(kinds, tt.want) {
				t.Errorf("findings %v, want kinds %v", findings, tt.want)
			}
		})
	}
}
