package ledger

import "testing"

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
