package ledger

// Page sizes of every paged read (ListEntries, ListHistory, ListHolds). A page_size over
// MaxPageSize is read as MaxPageSize rather than refused (AIP-158): a client
// asking for more still pages through everything, and no read holds more
// than MaxPageSize items in memory.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// PageSize is the page size a read uses when asked for n items:
// DefaultPageSize for 0, at most MaxPageSize. A negative n is invalid.
func PageSize(n int) (int, error) {
	switch {
	case n < 0:
		return 0, Errorf(KindInvalid, ReasonInvalidPageSize, "page_size must not be negative")
	case n == 0:
		return DefaultPageSize, nil
	}
	return min(n, MaxPageSize), nil
}

// Page is the page a list query asks for (AIP-158); every list query
// (EntryQuery, HistoryQuery, HoldQuery) embeds it.
type Page struct {
	PageSize  int    // see PageSize: default 50, more than 500 is read as 500
	PageToken string // from the previous page, asked with the same query; "" from the first
}

// check returns p with its page size resolved (PageSize).
func (p Page) check() (Page, error) {
	size, err := PageSize(p.PageSize)
	p.PageSize = size
	return p, err
}

// Paged returns the page a query asks for: its own Page, promoted to every
// query that embeds one, so that paging (package pagetoken) reads the
// page of any query alike.
func (p Page) Paged() Page { return p }

// EntryQuery pages a user's ledger entries (ListEntries), oldest first.
type EntryQuery struct {
	Page
}

// Check validates a query of user's entries: the user id and the page
// size. It returns q with its page size resolved (PageSize).
func (q EntryQuery) Check(user string) (EntryQuery, error) {
	if err := ValidateUserID(user); err != nil {
		return q, err
	}
	var err error
	q.Page, err = q.check()
	return q, err
}

// Check validates a query of user's history, whatever keeps the history:
// the user id, the page size, a window whose start is before its end, and
// types that are entry types. It returns q with its page size resolved
// (PageSize).
func (q HistoryQuery) Check(user string) (HistoryQuery, error) {
	if err := ValidateUserID(user); err != nil {
		return q, err
	}
	page, err := q.check()
	if err != nil {
		return q, err
	}
	q.Page = page
	if !q.Start.IsZero() && !q.End.IsZero() && !q.Start.Before(q.End) {
		return q, Errorf(KindInvalid, ReasonInvalidFilter, "start_time must be before end_time")
	}
	for _, t := range q.Types {
		if _, ok := t.Info(); !ok {
			return q, Errorf(KindInvalid, ReasonInvalidFilter, "unknown entry type %q", t)
		}
	}
	return q, nil
}
