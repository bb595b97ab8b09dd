package ledger

// Page sizes of every paged read (ListEntries, ListHistory). A page_size over
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

// Check validates a query of user's history, whatever keeps the history:
// the user id, the page size, a window whose start is before its end, and
// types that are entry types. It returns q with its page size resolved
// (PageSize).
func (q HistoryQuery) Check(user string) (HistoryQuery, error) {
	if err := ValidateUserID(user); err != nil {
		return q, err
	}
	pageSize, err := PageSize(q.PageSize)
	if err != nil {
		return q, err
	}
	q.PageSize = pageSize
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
