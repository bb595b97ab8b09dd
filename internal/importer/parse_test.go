package importer

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// got is one line as the reader made it: its request, or its refusal's
// reason and a piece of its message.
type got struct {
	number  int
	grant   *pb.GrantRequest
	reason  string
	message string // a part of the refusal's message
	id      string // Line.RequestID
}

func readAll(t *testing.T, f Format, prefix, input string) []got {
	t.Helper()
	r, err := NewReader(strings.NewReader(input), f, prefix)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	var out []got
	for {
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		g := got{number: l.Number, grant: l.Grant, id: l.RequestID}
		if l.Refusal != nil {
			g.reason, g.message = l.Refusal.Reason, l.Refusal.Message
		}
		out = append(out, g)
	}
}

func compare(t *testing.T, want, have []got) {
	t.Helper()
	if len(want) != len(have) {
		t.Fatalf("%d lines, want %d: %+v", len(have), len(want), have)
	}
	for i := range want {
		w, h := want[i], have[i]
		if w.number != h.number || w.reason != h.reason || w.id != h.id {
			t.Errorf("line %d: got number %d, reason %q, id %q (message %q); want %d, %q, %q", i, h.number, h.reason, h.id, h.message, w.number, w.reason, w.id)
		}
		if !strings.Contains(h.message, w.message) {
			t.Errorf("line %d: message %q, want it to contain %q", i, h.message, w.message)
		}
		if !proto.Equal(w.grant, h.grant) {
			t.Errorf("line %d: grant %v, want %v", i, h.grant, w.grant)
		}
	}
}

func TestReadJSONLines(t *testing.T) {
	t.Parallel()
	expire := timestamppb.New(mustTime(t, "2027-03-31T15:00:00Z"))
	tests := []struct {
		name   string
		prefix string
		input  string
		want   []got
	}{
		{
			name: "every field of a grant",
			input: `{"user_id":"u1","amount":"12.5","request_id":"r1","order_id":"o1","metadata":{"source":"old"},` +
				`"expire_time":"2027-03-31T15:00:00Z","budget_id":"b1"}`,
			want: []got{{number: 1, id: "r1", grant: &pb.GrantRequest{UserId: "u1", Amount: "12.5", RequestId: "r1", OrderId: "o1",
				Metadata: map[string]string{"source": "old"}, ExpireTime: expire, BudgetId: "b1"}}},
		},
		{
			name:  "camelCase names, as protojson reads them",
			input: `{"userId":"u1","amount":"1","requestId":"r1","ttl":"3600s"}`,
			want:  []got{{number: 1, id: "r1", grant: &pb.GrantRequest{UserId: "u1", Amount: "1", RequestId: "r1", Ttl: durationpb.New(3600e9)}}},
		},
		{
			name:   "blank lines skipped, numbers kept; the prefix names lines without an id",
			prefix: "mig",
			input:  "\n{\"user_id\":\"u1\",\"amount\":\"1\"}\n   \n{\"user_id\":\"u2\",\"amount\":\"2\",\"request_id\":\"own\"}\n",
			want: []got{
				{number: 2, id: "mig:2", grant: &pb.GrantRequest{UserId: "u1", Amount: "1", RequestId: "mig:2"}},
				{number: 4, id: "own", grant: &pb.GrantRequest{UserId: "u2", Amount: "2", RequestId: "own"}},
			},
		},
		{
			name:  "no request_id and no prefix",
			input: `{"user_id":"u1","amount":"1"}`,
			want:  []got{{number: 1, reason: ReasonMissingRequestID, message: "-id-prefix"}},
		},
		{
			name:  "an unknown field, named",
			input: `{"user_id":"u1","amount":"1","request_id":"r1","points":"5"}`,
			want:  []got{{number: 1, id: "r1", reason: ReasonMalformedLine, message: `unknown field "points"`}},
		},
		{
			name:  "an amount as a number: amounts are strings",
			input: `{"user_id":"u1","amount":5,"request_id":"r1"}`,
			want:  []got{{number: 1, id: "r1", reason: ReasonMalformedLine, message: "amount"}},
		},
		{
			name:  "a timestamp that does not parse",
			input: `{"user_id":"u1","amount":"1","request_id":"r1","expire_time":"next March"}`,
			want:  []got{{number: 1, id: "r1", reason: ReasonMalformedLine, message: "Timestamp"}},
		},
		{
			name:   "not an object, with the id it would have had",
			prefix: "p",
			input:  "user_id=u1 amount=1\n[1,2]\n",
			want: []got{
				{number: 1, id: "p:1", reason: ReasonMalformedLine, message: "not a JSON object"},
				{number: 2, id: "p:2", reason: ReasonMalformedLine, message: "not a JSON object"},
			},
		},
		{
			name:  "a rejects file's columns are dropped",
			input: `{"user_id":"u1","amount":"1","request_id":"r1","line":7,"reason":"INVALID_AMOUNT","message":"was 1.234"}`,
			want:  []got{{number: 1, id: "r1", grant: &pb.GrantRequest{UserId: "u1", Amount: "1", RequestId: "r1"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			compare(t, tt.want, readAll(t, JSONLines, tt.prefix, tt.input))
		})
	}
}

func TestReadCSV(t *testing.T) {
	t.Parallel()
	effective := timestamppb.New(mustTime(t, "2027-01-01T00:00:00Z"))
	tests := []struct {
		name   string
		prefix string
		input  string
		want   []got
	}{
		{
			name: "columns are fields, metadata.<key> columns are metadata, empty cells are absent",
			input: "user_id,amount,request_id,effective_time,metadata.source,metadata.tier,order_id\n" +
				"u1,10,r1,2027-01-01T00:00:00Z,old,gold,\n" +
				"u2,20,r2,,,,o2\n",
			want: []got{
				{number: 2, id: "r1", grant: &pb.GrantRequest{UserId: "u1", Amount: "10", RequestId: "r1", EffectiveTime: effective,
					Metadata: map[string]string{"source": "old", "tier": "gold"}}},
				{number: 3, id: "r2", grant: &pb.GrantRequest{UserId: "u2", Amount: "20", RequestId: "r2", OrderId: "o2"}},
			},
		},
		{
			name:   "a spreadsheet's byte order mark; ids from the prefix; a quoted cell over two lines",
			prefix: "camp",
			input:  "\ufeffuser_id,amount,order_id\nu1,1,\"two\nlines\"\nu2,2,x\n",
			want: []got{
				{number: 2, id: "camp:2", grant: &pb.GrantRequest{UserId: "u1", Amount: "1", RequestId: "camp:2", OrderId: "two\nlines"}},
				{number: 4, id: "camp:4", grant: &pb.GrantRequest{UserId: "u2", Amount: "2", RequestId: "camp:4", OrderId: "x"}},
			},
		},
		{
			name:  "a row of another width",
			input: "user_id,amount,request_id\nu1,1\nu2,2,r2\n",
			want: []got{
				{number: 2, reason: ReasonMalformedLine, message: "2 cells, and the header has 3"},
				{number: 3, id: "r2", grant: &pb.GrantRequest{UserId: "u2", Amount: "2", RequestId: "r2"}},
			},
		},
		{
			name:  "a bad ttl",
			input: "user_id,amount,request_id,ttl\nu1,1,r1,an hour\n",
			want:  []got{{number: 2, id: "r1", reason: ReasonMalformedLine, message: "Duration"}},
		},
		{
			name:  "no request_id and no prefix",
			input: "user_id,amount\nu1,1\n",
			want:  []got{{number: 2, reason: ReasonMissingRequestID}},
		},
		{
			name:  "a rejects file's columns are dropped",
			input: "user_id,amount,request_id,line,reason,message\nu1,1,r1,9,INVALID_AMOUNT,too many digits\n",
			want:  []got{{number: 2, id: "r1", grant: &pb.GrantRequest{UserId: "u1", Amount: "1", RequestId: "r1"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			compare(t, tt.want, readAll(t, CSV, tt.prefix, tt.input))
		})
	}
}

func TestCSVHeaderRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header, want string
	}{
		{"empty file", "", "empty"},
		{"unknown column", "user_id,amount,points\n", `column "points" is no field of Grant`},
		{"a column twice", "user_id,amount,user_id\n", "twice"},
		{"metadata without a key", "user_id,metadata.\n", "metadata.<key>"},
		{"metadata as one column", "user_id,metadata\n", "metadata.<key>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewReader(strings.NewReader(tt.header), CSV, "")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewReader(%q) = %v, want an error with %q", tt.header, err, tt.want)
			}
		})
	}
}

// The rejects file's added columns are dropped on reading: a GrantRequest
// field of one of their names would be dropped with them.
func TestRejectColumnsAreNoGrantFields(t *testing.T) {
	t.Parallel()
	for _, c := range RejectColumns {
		if fieldNamed(c) != nil {
			t.Errorf("GrantRequest has a field %q, which rejects files add and the reader drops: rename the rejects' column", c)
		}
	}
}

// A rejects file, read back, makes the same requests under the ids the
// lines were sent under, in both formats.
func TestRejectsReadBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		format Format
		input  string
	}{
		{"csv", CSV, "amount,user_id,metadata.source\n1.234,u1,old\n5,u2,\n"},
		{"jsonl", JSONLines, `{"amount":"1.234","user_id":"u1","metadata":{"source":"old"}}` + "\n" + `{"amount":"5","user_id":"u2"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := NewReader(strings.NewReader(tt.input), tt.format, "mig")
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			rejects := NewRejects(&buf, tt.format, r.Header())
			var sent []*pb.GrantRequest
			for {
				l, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil || l.Grant == nil {
					t.Fatalf("line %d: %v %v", l.Number, err, l.Refusal)
				}
				sent = append(sent, l.Grant)
				if err := rejects.Write(l, &Refusal{Reason: "INVALID_AMOUNT", Message: "amount, with \"quotes\", too precise"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := rejects.Flush(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), "INVALID_AMOUNT") || !strings.Contains(buf.String(), "line") {
				t.Fatalf("rejects without line and reason:\n%s", buf.String())
			}
			// Read without a prefix: every reject carries its id.
			back := readAll(t, tt.format, "", buf.String())
			if len(back) != len(sent) {
				t.Fatalf("read back %d lines, want %d:\n%s", len(back), len(sent), buf.String())
			}
			for i := range sent {
				if !proto.Equal(back[i].grant, sent[i]) {
					t.Errorf("line %d read back as %v, was sent as %v\n%s", i, back[i].grant, sent[i], buf.String())
				}
			}
		})
	}
}

func TestFormatOf(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]Format{"a.csv": CSV, "A.CSV": CSV, "a.jsonl": JSONLines, "a.ndjson": JSONLines, "dir.x/a.json": JSONLines} {
		if got, err := FormatOf(name); err != nil || got != want {
			t.Errorf("FormatOf(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := FormatOf("grants.txt"); err == nil {
		t.Error("FormatOf(grants.txt): no error")
	}
	if got := RejectsPath("/in/grants.csv"); got != "/in/grants.rejects.csv" {
		t.Errorf("RejectsPath = %q", got)
	}
}

func TestCountLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200<<10)
	for input, want := range map[string]int{
		"":                      0,
		"a\n":                   1,
		"a":                     1,
		"a\n\n  \nb":            2,
		"a\n" + long + "\nb\n":  3,
		long:                    1,
		"h\r\nu1,1\r\nu2,2\r\n": 3,
	} {
		got, err := CountLines(strings.NewReader(input))
		if err != nil || got != want {
			t.Errorf("CountLines(%.20q...) = %d, %v; want %d", input, got, err, want)
		}
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}
