package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

// imported is what one `ledgerd import` said and how it ended.
type imported struct {
	stdout, stderr string
	code           int // 0, or the exitError's
}

// importFile runs `ledgerd import args...` in this process against p, as
// a service (LEDGER_URL and TOKEN from the environment, as .local/dev.env
// sets them).
func importFile(ctx context.Context, t testing.TB, p *ledgerdProcess, stderr *syncBuffer, args ...string) imported {
	t.Helper()
	env := map[string]string{"LEDGER_URL": "http://" + p.addr, "TOKEN": p.creds.ServiceToken}
	var stdout bytes.Buffer
	if stderr == nil {
		stderr = &syncBuffer{}
	}
	err := run(ctx, append([]string{"import"}, args...), func(k string) string { return env[k] }, &stdout, stderr)
	out := imported{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		out.code = exit.code
	default:
		t.Fatalf("import: %v (no exit code)\n%s%s", err, out.stdout, out.stderr)
	}
	t.Logf("ledgerd import %s: exit %d\n%s", strings.Join(args, " "), out.code, out.stdout)
	return out
}

// syncBuffer is a buffer the progress goroutine writes while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// onWrite, if set, sees each write.
	onWrite func(p []byte)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onWrite != nil {
		b.onWrite(p)
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// summaryCount is the number on the summary's row named name ("granted",
// "INVALID_AMOUNT").
func summaryCount(t testing.TB, out imported, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `\s+(\d+)$`).FindStringSubmatch(out.stdout)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func checkCounts(t *testing.T, out imported, want map[string]int) {
	t.Helper()
	for name, n := range want {
		if got := summaryCount(t, out, name); got != n {
			t.Errorf("summary: %s %d, want %d\n%s", name, got, n, out.stdout)
		}
	}
}

func balanceOf(t *testing.T, p *ledgerdProcess, user string) *pb.GetBalanceResponse {
	t.Helper()
	res, err := p.ledgerClient().GetBalance(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		t.Fatalf("GetBalance %s: %v", user, err)
	}
	return res.Msg
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readCSV(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []map[string]string
	for _, row := range rows[1:] {
		m := map[string]string{}
		for i, name := range rows[0] {
			m[name] = row[i]
		}
		out = append(out, m)
	}
	return out
}

// A CSV file of good and bad lines, with budgets, metadata, expiry and
// pending points: the good lines are granted, each bad one is refused
// with its reason into the rejects file; a rerun grants nothing twice;
// a changed line under a used id is refused.
func TestImportCSV(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	ctx := context.Background()
	budgets := pointledgerv1connect.NewBudgetServiceClient(http.DefaultClient, "http://"+p.addr, connect.WithInterceptors(auth.Bearer(p.creds.AdminToken)))
	if _, err := budgets.CreateBudget(ctx, connect.NewRequest(&pb.CreateBudgetRequest{BudgetId: "spring", Amount: "100", RequestId: "spring-1"})); err != nil {
		t.Fatal(err)
	}
	kinds := pointledgerv1connect.NewPointKindServiceClient(http.DefaultClient, "http://"+p.addr, connect.WithInterceptors(auth.Bearer(p.creds.AdminToken)))
	if _, err := kinds.CreatePointKind(ctx, connect.NewRequest(&pb.CreatePointKindRequest{KindId: "limited", RequestId: "limited-1"})); err != nil {
		t.Fatal(err)
	}
	expire := time.Now().Add(90 * 24 * time.Hour).UTC().Format(time.RFC3339)
	effective := time.Now().Add(14 * 24 * time.Hour).UTC().Format(time.RFC3339)
	input := "user_id,amount,request_id,expire_time,effective_time,order_id,budget_id,metadata.source,kind\n" +
		"alice,100,m-1,,,,,old-program,\n" + // line 2
		"alice,25.5,m-2," + expire + ",,,,old-program,standard\n" + // 3: expires
		"bob,60,m-3,,,o-1,spring,,limited\n" + // 4: from the budget, limited-time points
		"carol,60,m-4,,,,spring,,\n" + // 5: the budget has 40 left
		"dave,1.234,m-5,,,,,,\n" + // 6: too many digits
		"erin,10,m-6,," + effective + ",,,,\n" + // 7: pending
		"frank,10,,,,,,,\n" + // 8: no request_id, no prefix
		"gina,10,m-8,yesterday,,,,,\n" + // 9: a timestamp that does not parse
		"bad#user,5,m-9,,,,,,\n" + // 10
		"hank,3,m-10\n" + // 11: a short row
		"ivan,7,m-11,,,,,,gold\n" // 12: a kind the program does not have
	path := writeFile(t, "grants.csv", input)

	// A dry run refuses the unknown kind as the real run does, and sends
	// nothing.
	dry := importFile(ctx, t, p, nil, "-dry-run", "-rejects", filepath.Join(t.TempDir(), "dry.csv"), path)
	checkCounts(t, dry, map[string]int{"lines": 11, "KIND_NOT_FOUND": 1, "INVALID_AMOUNT": 1})
	if got := balanceOf(t, p, "bob"); got.Version != 0 {
		t.Errorf("bob after a dry run: version %d, want 0 (nothing sent)", got.Version)
	}

	// One at a time: bob's line takes the budget before carol's.
	first := importFile(ctx, t, p, nil, "-concurrency", "1", path)
	if first.code != 1 {
		t.Fatalf("exit %d, want 1 (lines refused)", first.code)
	}
	checkCounts(t, first, map[string]int{"lines": 11, "granted": 4, "replayed": 0, "refused": 7,
		"BUDGET_EXHAUSTED": 1, "INVALID_AMOUNT": 1, "MISSING_REQUEST_ID": 1, "MALFORMED_LINE": 2, "INVALID_USER_ID": 1, "KIND_NOT_FOUND": 1})
	if !regexp.MustCompile(`(?m)^\s+standard\s+135.5$`).MatchString(first.stdout) || !regexp.MustCompile(`(?m)^\s+limited\s+60$`).MatchString(first.stdout) {
		t.Errorf("points by kind: want standard 135.5 (100 + 25.5 + 10) and limited 60\n%s", first.stdout)
	}
	for user, want := range map[string]string{"alice": "125.5", "bob": "60", "carol": "0", "dave": "0", "erin": "0", "gina": "0", "ivan": "0"} {
		if got := balanceOf(t, p, user).Balance; got != want {
			t.Errorf("%s's balance %s, want %s", user, got, want)
		}
	}
	if b := balanceOf(t, p, "bob"); len(b.Kinds) != 1 || b.Kinds[0].Kind != "limited" || b.Kinds[0].Balance != "60" {
		t.Errorf("bob's kinds %v, want limited 60", b.Kinds)
	}
	if b := balanceOf(t, p, "ivan"); b.Version != 0 {
		t.Errorf("ivan's version %d, want 0: a line of an unknown kind is not sent", b.Version)
	}
	if b := balanceOf(t, p, "erin"); b.Pending != "10" {
		t.Errorf("erin's pending %s, want 10", b.Pending)
	}
	alice := balanceOf(t, p, "alice")
	if len(alice.Expiring) != 1 || alice.Expiring[0].Amount != "25.5" || alice.Expiring[0].ExpireTime.AsTime().Format(time.RFC3339) != expire {
		t.Errorf("alice's expiring %v, want 25.5 at %s", alice.Expiring, expire)
	}
	entries, err := p.ledgerClient().ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "bob"}))
	if err != nil || len(entries.Msg.Entries) != 1 || entries.Msg.Entries[0].OrderId != "o-1" {
		t.Fatalf("bob's entries %v, %v", entries, err)
	}
	if got, err := budgets.GetBudget(ctx, connect.NewRequest(&pb.GetBudgetRequest{BudgetId: "spring"})); err != nil || got.Msg.Budget.Remaining != "40" {
		t.Errorf("budget %v, %v; want 40 remaining", got, err)
	}

	// The rejects: the input's columns, line, reason, message.
	rejectsPath := strings.TrimSuffix(path, ".csv") + ".rejects.csv"
	rejects := readCSV(t, rejectsPath)
	byLine := map[string]map[string]string{}
	for _, r := range rejects {
		byLine[r["line"]] = r
	}
	for line, reason := range map[string]string{"5": "BUDGET_EXHAUSTED", "6": "INVALID_AMOUNT", "8": "MISSING_REQUEST_ID", "9": "MALFORMED_LINE", "10": "INVALID_USER_ID", "11": "MALFORMED_LINE", "12": "KIND_NOT_FOUND"} {
		r := byLine[line]
		if r == nil || r["reason"] != reason || r["message"] == "" {
			t.Errorf("rejects line %s: %v, want reason %s and a message", line, r, reason)
		}
	}
	if r := byLine["12"]; r["kind"] != "gold" || !strings.Contains(r["message"], "ListPointKinds when the import started") {
		t.Errorf("rejects line 12 %v: want the kind gold refused by the import's own check, before it was sent", r)
	}
	if r := byLine["5"]; r["user_id"] != "carol" || r["amount"] != "60" || r["budget_id"] != "spring" || r["request_id"] != "m-4" {
		t.Errorf("rejects line 5 %v: want the input's cells", r)
	}

	// A rerun: what was granted is replayed, nothing granted twice.
	again := importFile(ctx, t, p, nil, path)
	if again.code != 1 {
		t.Fatalf("rerun: exit %d, want 1", again.code)
	}
	checkCounts(t, again, map[string]int{"granted": 0, "replayed": 4, "refused": 7, "BUDGET_EXHAUSTED": 1})
	if got := balanceOf(t, p, "alice"); got.Balance != "125.5" || got.Version != 2 {
		t.Errorf("alice after the rerun: balance %s, version %d; want 125.5, 2", got.Balance, got.Version)
	}

	// A changed line under a used id: refused, never granted.
	changed := importFile(ctx, t, p, nil, writeFile(t, "changed.csv", "user_id,amount,request_id\nalice,1000,m-1\n"))
	if changed.code != 1 {
		t.Fatalf("changed line: exit %d, want 1", changed.code)
	}
	checkCounts(t, changed, map[string]int{"granted": 0, "refused": 1, "REQUEST_ID_REUSED": 1})
	if got := balanceOf(t, p, "alice").Balance; got != "125.5" {
		t.Errorf("alice after a changed line under m-1: %s, want 125.5", got)
	}

	// The rejects file, fixed, goes in as it is: the amount corrected, and
	// the refusal of a budget (final, recorded) under a new id.
	fixed := strings.Replace(readFileString(t, rejectsPath), "1.234", "1.23", 1)
	fixed = strings.Replace(fixed, "m-4", "m-4b", 1)
	fixed = strings.Replace(fixed, "carol,60", "carol,40", 1)
	second := importFile(ctx, t, p, nil, "-rejects", filepath.Join(t.TempDir(), "r.csv"), writeFile(t, "fixed.csv", fixed))
	checkCounts(t, second, map[string]int{"lines": 7, "granted": 3, "refused": 4, "KIND_NOT_FOUND": 1}) // hank's short row came back padded: whole
	if got := balanceOf(t, p, "dave").Balance; got != "1.23" {
		t.Errorf("dave after the fix: %s, want 1.23", got)
	}
	if got := balanceOf(t, p, "carol").Balance; got != "40" {
		t.Errorf("carol after the fix: %s, want 40", got)
	}
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// JSON Lines with -id-prefix: every line granted, exit 0, no rejects file;
// a dry run of the same file writes nothing and refuses what the server
// would.
func TestImportJSONLines(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	ctx := context.Background()
	var lines strings.Builder
	for i := range 30 {
		fmt.Fprintf(&lines, `{"user_id":"u%d","amount":"%d.5","metadata":{"campaign":"autumn"},"ttl":"2592000s"}`+"\n", i%5, i+1)
	}
	path := writeFile(t, "autumn.jsonl", lines.String())

	noID := importFile(ctx, t, p, nil, "-dry-run", path)
	checkCounts(t, noID, map[string]int{"lines": 30, "passed": 0, "refused": 30, "MISSING_REQUEST_ID": 30})

	dry := importFile(ctx, t, p, nil, "-dry-run", "-id-prefix", "autumn", path)
	if dry.code != 0 {
		t.Fatalf("dry run: exit %d, want 0", dry.code)
	}
	checkCounts(t, dry, map[string]int{"lines": 30, "passed": 30, "refused": 0})
	if got := balanceOf(t, p, "u1"); got.Version != 0 {
		t.Fatalf("a dry run wrote: u1 at version %d", got.Version)
	}

	out := importFile(ctx, t, p, nil, "-id-prefix", "autumn", "-concurrency", "4", path)
	if out.code != 0 {
		t.Fatalf("exit %d, want 0", out.code)
	}
	checkCounts(t, out, map[string]int{"lines": 30, "granted": 30, "refused": 0})
	// u0 has lines 1, 6, ..., 26: amounts 1.5, 6.5, ..., 26.5.
	want := decimal.Zero
	for i := 0; i < 30; i += 5 {
		want = want.Add(decimal.NewFromFloat(float64(i+1) + 0.5))
	}
	if got := balanceOf(t, p, "u0"); got.Balance != want.String() || got.Version != 6 {
		t.Errorf("u0: balance %s, version %d; want %s, 6", got.Balance, got.Version, want)
	}
	if _, err := os.Stat(strings.TrimSuffix(path, ".jsonl") + ".rejects.jsonl"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rejects file with nothing refused: %v", err)
	}
	entries, err := p.ledgerClient().ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "u2"}))
	if err != nil || len(entries.Msg.Entries) == 0 || entries.Msg.Entries[0].RequestId != "autumn:3" || entries.Msg.Entries[0].Metadata["campaign"] != "autumn" {
		t.Errorf("u2's first entry %v, %v; want request_id autumn:3 (its line) and the metadata", entries, err)
	}

	// The dry run checks as the server does: amounts, expiry, ids.
	bad := writeFile(t, "bad.jsonl", `{"user_id":"x","amount":"0","request_id":"b1"}
{"user_id":"x","amount":"5","request_id":"b2","expire_time":"2001-01-01T00:00:00Z"}
{"user_id":"x","amount":"5","request_id":"b3","ttl":"3600s","expire_time":"2099-01-01T00:00:00Z"}
{"user_id":"x","amount":"5","request_id":"b4","budget_id":"no budget"}
{"user_id":"x","amount":"5","request_id":"b5","points":"5"}
{"user_id":"x","amount":"5","request_id":"b6"}
`)
	checked := importFile(ctx, t, p, nil, "-dry-run", bad)
	if checked.code != 1 {
		t.Fatalf("dry run of bad lines: exit %d, want 1", checked.code)
	}
	checkCounts(t, checked, map[string]int{"lines": 6, "passed": 1, "refused": 5, "INVALID_AMOUNT": 1, "INVALID_EXPIRY": 2, "INVALID_BUDGET": 1, "MALFORMED_LINE": 1})
	var rejected []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(readFileString(t, strings.TrimSuffix(bad, ".jsonl")+".rejects.jsonl")), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("rejects line %q: %v", line, err)
		}
		rejected = append(rejected, m)
	}
	if len(rejected) != 5 || rejected[0]["line"] == nil || rejected[0]["reason"] == nil || rejected[0]["user_id"] != "x" {
		t.Errorf("rejects %v: want 5 lines with the input's fields, line and reason", rejected)
	}
	if got := balanceOf(t, p, "x"); got.Version != 0 {
		t.Errorf("a dry run wrote: x at version %d", got.Version)
	}
}

// Ctrl-C: the import stops sending, finishes what is in flight, says the
// line it stopped after; the rerun replays those lines and sends the rest,
// and every line is granted exactly once.
func TestImportInterruptedResumes(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	const lines, users = 1500, 10
	var in strings.Builder
	in.WriteString("user_id,amount\n")
	for i := range lines {
		fmt.Fprintf(&in, "u%d,1\n", i%users)
	}
	path := writeFile(t, "big.csv", in.String())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := regexp.MustCompile(`import: (\d+)/`)
	stderr := &syncBuffer{onWrite: func(b []byte) {
		if m := progress.FindSubmatch(b); m != nil {
			if n, _ := strconv.Atoi(string(m[1])); n >= 100 {
				cancel() // as Ctrl-C does, through signal.NotifyContext
			}
		}
	}}
	first := importFile(ctx, t, p, stderr, "-id-prefix", "big", "-concurrency", "2", "-progress-interval", "20ms", path)
	m := regexp.MustCompile(`INTERRUPTED after line (\d+): (\d+) lines sent`).FindStringSubmatch(first.stdout)
	if first.code != 2 || m == nil {
		t.Fatalf("exit %d, want 2 and INTERRUPTED\n%s", first.code, first.stdout)
	}
	through, _ := strconv.Atoi(m[1])
	sent, _ := strconv.Atoi(m[2])
	if through >= lines+1 || sent != through-1 || summaryCount(t, first, "granted") != sent {
		t.Fatalf("stopped after line %d with %d sent, %d granted: want the lines up to it sent and granted, and some left", through, sent, summaryCount(t, first, "granted"))
	}
	total := func() (sum int64) {
		for u := range users {
			b, err := strconv.ParseInt(balanceOf(t, p, fmt.Sprintf("u%d", u)).Balance, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			sum += b
		}
		return sum
	}
	if got := total(); got != int64(sent) {
		t.Fatalf("after the interruption the users hold %d points, want %d (one a line sent)", got, sent)
	}

	again := importFile(context.Background(), t, p, nil, "-id-prefix", "big", "-concurrency", "4", path)
	if again.code != 0 {
		t.Fatalf("rerun: exit %d, want 0", again.code)
	}
	checkCounts(t, again, map[string]int{"lines": lines, "replayed": sent, "granted": lines - sent, "refused": 0})
	if got := total(); got != lines {
		t.Errorf("after the rerun the users hold %d points, want %d: every line once", got, lines)
	}
}

// A grant whose outcome is unknown (here: nothing listens yet, the
// connection is refused) is sent again under its request_id with backoff,
// until the ledger answers: the import ends with every line granted once.
func TestImportRetriesUntilTheLedgerAnswers(t *testing.T) {
	t.Parallel()
	p := newLedgerd(t, false) // its port chosen, nothing serving it yet
	path := writeFile(t, "early.jsonl", `{"user_id":"early","amount":"5","request_id":"e1"}
{"user_id":"early","amount":"7","request_id":"e2"}
`)
	done := make(chan imported, 1)
	go func() { done <- importFile(context.Background(), t, p, nil, "-attempts", "30", path) }()
	time.Sleep(500 * time.Millisecond) // the first attempts meet a closed port
	p.start(t)
	out := <-done
	if out.code != 0 {
		t.Fatalf("exit %d, want 0", out.code)
	}
	checkCounts(t, out, map[string]int{"granted": 2, "refused": 0})
	if got := balanceOf(t, p, "early"); got.Balance != "12" || got.Version != 2 {
		t.Errorf("balance %s, version %d; want 12, 2", got.Balance, got.Version)
	}
}
