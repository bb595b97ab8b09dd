package api_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Every limit of a request is stated, with the value the code enforces,
// in the protos' comments (and so in gen/ and the OpenAPI description)
// and in docs/design.md (issue 31: the 256-byte order_id and the metadata
// limits were in neither).
func TestLimitsAreDocumented(t *testing.T) {
	t.Parallel()
	limits := []string{
		fmt.Sprintf("1 to %d characters", ledger.MaxIDLength),
		fmt.Sprintf("order_id: at most %d bytes of printable UTF-8", ledger.MaxOrderIDBytes),
		fmt.Sprintf("at most %d keys", ledger.MaxMetadataKeys),
		fmt.Sprintf("a key 1 to %d bytes", ledger.MaxMetadataKey),
		fmt.Sprintf("a value at most %d bytes of printable UTF-8", ledger.MaxMetadataValue),
		fmt.Sprintf("%d bytes in all", ledger.MaxMetadataTotal),
		fmt.Sprintf("at most %d bytes of printable text", ledger.MaxReasonBytes),
		fmt.Sprintf("page_size: at most %d", ledger.MaxPageSize),
		fmt.Sprintf("at most %d KiB", api.MaxRequestBytes>>10),
	}
	if ledger.MaxBudgetDescription != ledger.MaxReasonBytes {
		t.Errorf("a budget's description (%d bytes) is documented with a reason's (%d)", ledger.MaxBudgetDescription, ledger.MaxReasonBytes)
	}
	for _, file := range []string{"../../proto/pointledger/v1/ledger.proto", "../../docs/design.md"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// The text as one line: comments and paragraphs wrap anywhere.
		text := strings.Join(strings.Fields(strings.NewReplacer("//", " ", "`", "").Replace(string(b))), " ")
		for _, l := range limits {
			if !strings.Contains(text, l) {
				t.Errorf("%s does not say %q", file, l)
			}
		}
	}
}
