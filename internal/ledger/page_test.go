package ledger

import (
	"testing"
	"time"
)

func TestPageSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   int
		want int // 0: invalid
	}{
		{name: "unset", in: 0, want: DefaultPageSize},
		{name: "one", in: 1, want: 1},
		{name: "the maximum", in: MaxPageSize, want: MaxPageSize},
		{name: "over the maximum is coerced", in: MaxPageSize + 1, want: MaxPageSize},
		{name: "far over the maximum is coerced", in: 1 << 31, want: MaxPageSize},
		{name: "negative", in: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := PageSize(tt.in)
			if tt.want == 0 {
				if ReasonOf(err) != ReasonInvalidPageSize {
					t.Errorf("PageSize(%d) = %d, %v; want %s", tt.in, got, err, ReasonInvalidPageSize)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("PageSize(%d) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestHistoryQueryCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		user     string
		q        HistoryQuery
		reason   string // "": valid
		pageSize int    // when valid
	}{
		{name: "the defaults", user: "u1", q: HistoryQuery{}, pageSize: DefaultPageSize},
		{name: "a page size over the maximum", user: "u1", q: HistoryQuery{Page: Page{PageSize: MaxPageSize + 1}}, pageSize: MaxPageSize},
		{name: "a window and types", user: "u1", q: HistoryQuery{Start: now, End: now.Add(time.Second), Types: []EntryType{EntryGrant, EntryExpiration}}, pageSize: DefaultPageSize},
		{name: "only a start", user: "u1", q: HistoryQuery{Start: now}, pageSize: DefaultPageSize},
		{name: "only an end", user: "u1", q: HistoryQuery{End: now}, pageSize: DefaultPageSize},
		{name: "no user", user: "", reason: ReasonInvalidUserID},
		{name: "a key-like user", user: "u1#H#1", reason: ReasonInvalidUserID},
		{name: "a negative page size", user: "u1", q: HistoryQuery{Page: Page{PageSize: -1}}, reason: ReasonInvalidPageSize},
		{name: "end before start", user: "u1", q: HistoryQuery{Start: now, End: now.Add(-time.Nanosecond)}, reason: ReasonInvalidFilter},
		{name: "an empty window", user: "u1", q: HistoryQuery{Start: now, End: now}, reason: ReasonInvalidFilter},
		{name: "an unknown type", user: "u1", q: HistoryQuery{Types: []EntryType{EntryGrant, "BONUS"}}, reason: ReasonInvalidFilter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.q.Check(tt.user)
			if tt.reason != "" {
				if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Reason != tt.reason {
					t.Errorf("Check = %v, want invalid %s", err, tt.reason)
				}
				return
			}
			if err != nil || got.PageSize != tt.pageSize {
				t.Errorf("Check = %+v, %v; want page size %d", got, err, tt.pageSize)
			}
		})
	}
}

// Every list query checks its user as it checks its page: a query of
// holds or entries for a user id that is no user id is refused, as one of
// history is, whatever store would read it.
func TestListQueriesCheckTheirUser(t *testing.T) {
	t.Parallel()
	checks := map[string]func(user string) (Page, error){
		"entries": func(user string) (Page, error) {
			q, err := EntryQuery{}.Check(user)
			return q.Page, err
		},
		"history": func(user string) (Page, error) {
			q, err := HistoryQuery{}.Check(user)
			return q.Page, err
		},
		"holds": func(user string) (Page, error) {
			q, err := HoldQuery{States: []HoldState{HoldCaptured}}.Check(user)
			return q.Page, err
		},
	}
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, user := range []string{"", "u1#H#1", "u 1"} {
				if _, err := check(user); ReasonOf(err) != ReasonInvalidUserID {
					t.Errorf("Check(%q) = %v, want %s", user, err, ReasonInvalidUserID)
				}
			}
			if p, err := check("u1"); err != nil || p.PageSize != DefaultPageSize {
				t.Errorf(`Check("u1") = %+v, %v; want the default page size %d`, p, err, DefaultPageSize)
			}
		})
	}
}
