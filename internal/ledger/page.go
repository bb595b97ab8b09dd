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
