package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/schollz/progressbar/v3"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/importer"
	"github.com/pointledger/pointledger/internal/ledger"
)

// importConfig is import's flags.
type importConfig struct {
	url, token       string
	format           string
	concurrency      int
	idPrefix         string
	rejects          string
	dryRun           bool
	attempts         int
	progressInterval time.Duration
	// The server's rules, for -dry-run's checks: the same variables as
	// serve's, so that in a deployment's environment the dry run judges
	// as its ledgerd does.
	scale  int
	expiry api.ExpiryPolicy
}

// importCmd is `ledgerd import`: a file of credits through the API. It
// exits 0 when every line was granted (or replayed), 1 when some were
// refused, 2 when it could not finish (or was interrupted).
func importCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fail := func(err error) error { return &exitError{code: 2, err: err} }
	var c importConfig
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: ledgerd import [flags] FILE

Sends FILE, one credit a line, through LedgerService.Grant: JSON Lines
(.jsonl) or CSV with a header (.csv), with the fields of GrantRequest
(user_id, amount, request_id, expire_time, ttl, effective_time,
effective_delay, order_id, budget_id, kind, ...; metadata.<key> columns in
CSV). A line whose kind the program lacks (ListPointKinds, read once at the
start) is refused, KIND_NOT_FOUND, and not sent. A rerun replays what is
done. Refused lines go to the rejects file.

flags:
`)
		fs.PrintDefaults()
	}
	s := newSettings(fs, getenv)
	s.String(&c.url, "url", "LEDGER_URL", "http://localhost:8080", "the ledgerd to send to")
	s.String(&c.token, "token", "TOKEN", "", "a service or admin token")
	s.String(&c.format, "format", "LEDGER_IMPORT_FORMAT", "", "csv or jsonl; empty: by the file's name (.csv, .jsonl)")
	s.Int(&c.concurrency, "concurrency", "LEDGER_IMPORT_CONCURRENCY", 16, "grants in flight at once")
	s.String(&c.idPrefix, "id-prefix", "LEDGER_IMPORT_ID_PREFIX", "", "a line without request_id gets <prefix>:<line number>; empty: such a line is refused")
	s.String(&c.rejects, "rejects", "LEDGER_IMPORT_REJECTS", "", "where refused lines go, in the input's format with line, reason and message; empty: beside FILE (grants.csv -> grants.rejects.csv)")
	s.Bool(&c.dryRun, "dry-run", "LEDGER_IMPORT_DRY_RUN", "check every line and send nothing")
	s.Int(&c.attempts, "attempts", "LEDGER_IMPORT_ATTEMPTS", 8, "attempts of a grant whose outcome is unknown (unavailable, deadline, aborted, a lost connection), under its request_id, with backoff")
	s.Duration(&c.progressInterval, "progress-interval", "LEDGER_IMPORT_PROGRESS_INTERVAL", 5*time.Second, "when stderr is no terminal: a progress line this often")
	s.Int(&c.scale, "amount-scale", "LEDGER_AMOUNT_SCALE", ledger.DefaultScale, "-dry-run: digits allowed after the point in amounts, as the server's")
	s.Duration(&c.expiry.Max, "max-expiry", "LEDGER_MAX_EXPIRY", api.DefaultMaxExpiry, "-dry-run: how far ahead points may expire, as the server's")
	s.Duration(&c.expiry.EffectiveMax, "max-effective-delay", "LEDGER_MAX_EFFECTIVE_DELAY", api.DefaultMaxEffectiveDelay, "-dry-run: how far ahead points may become spendable, as the server's")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fail(err)
	}
	if err := s.err(); err != nil {
		return fail(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fail(errors.New("import takes one FILE"))
	}
	if err := c.check(); err != nil {
		return fail(err)
	}
	return runImport(ctx, c, fs.Arg(0), stdout, stderr)
}

func (c importConfig) check() error {
	if c.concurrency < 1 {
		return fmt.Errorf("-concurrency (LEDGER_IMPORT_CONCURRENCY) must be 1 or more, not %d", c.concurrency)
	}
	if c.attempts < 1 {
		return fmt.Errorf("-attempts (LEDGER_IMPORT_ATTEMPTS) must be 1 or more, not %d", c.attempts)
	}
	if c.progressInterval <= 0 {
		return errors.New("-progress-interval (LEDGER_IMPORT_PROGRESS_INTERVAL) must be positive")
	}
	return validScale(c.scale)
}

func runImport(ctx context.Context, c importConfig, path string, stdout, stderr io.Writer) error {
	fail := func(err error) error { return &exitError{code: 2, err: err} }
	format, err := importer.FormatOf(path)
	if c.format != "" {
		format, err = importer.ParseFormat(c.format)
	}
	if err != nil {
		return fail(err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	total, err := importer.CountLines(f)
	if err != nil {
		return fail(fmt.Errorf("read %s: %w", path, err))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	if format == importer.CSV && total > 0 {
		total-- // the header
	}
	r, err := importer.NewReader(f, format, c.idPrefix)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}

	rejectsPath := c.rejects
	if rejectsPath == "" {
		rejectsPath = importer.RejectsPath(path)
	}
	if same, _ := sameFile(path, rejectsPath); same {
		return fail(fmt.Errorf("the rejects file %s is the input: name another with -rejects", rejectsPath))
	}
	rf, err := os.Create(rejectsPath)
	if err != nil {
		return fail(err)
	}
	rejects := importer.NewRejects(rf, format, r.Header())

	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = c.concurrency // one kept-alive connection per grant in flight
	hc := &http.Client{Transport: transport}
	retry := client.RetryPolicy{MaxAttempts: c.attempts, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 10 * time.Second, AttemptTimeout: 30 * time.Second}
	lc := client.New(c.url, client.WithToken(c.token), client.WithHTTPClient(hc), client.WithRetry(retry))
	// The program's kinds, once: a line of another kind is refused here,
	// never sent (dry run or not).
	kinds, err := listKinds(ctx, pointledgerv1connect.NewPointKindServiceClient(hc, c.url,
		connect.WithInterceptors(client.Retry(retry), client.Bearer(c.token))))
	if err != nil {
		_ = rf.Close()
		_ = os.Remove(rejectsPath)
		return fail(fmt.Errorf("list the point kinds (ListPointKinds): %w", err))
	}

	o := importer.Options{
		Concurrency: c.concurrency,
		DryRun:      c.dryRun,
		Checks:      c.checks(kinds),
		Rejects:     rejects,
		Progress:    &importer.Progress{},
	}

	stopProgress := showProgress(stderr, int64(total), o.Progress, c.progressInterval, c.dryRun)
	sum, runErr := importer.Run(ctx, r, lc.Ledger, o)
	stopProgress()

	err = errors.Join(rejects.Flush(), rf.Close())
	if rejects.Count() == 0 {
		err = errors.Join(err, os.Remove(rejectsPath)) // no refusals: no file, nor an old one's lines
	}
	printImportSummary(stdout, path, format, c.dryRun, sum)
	if rejects.Count() > 0 {
		fmt.Fprintf(stdout, "\nRefused lines: %s (fix them, then import that file; a line refused by the ledger for a business reason needs a new request_id)\n", rejectsPath)
	}
	switch {
	case runErr != nil || err != nil:
		return fail(errors.Join(runErr, err))
	case sum.Interrupted:
		fmt.Fprintf(stdout, "\nINTERRUPTED after line %d: %d lines sent, each with its outcome above; the lines after %d were not sent. Run the same command again (what was done is replayed) to go on.\n",
			sum.Through, sum.Sent, sum.Through)
		return fail(fmt.Errorf("interrupted after line %d", sum.Through))
	case sum.Refused > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d of %d lines refused", sum.Refused, sum.Lines)}
	}
	return nil
}

// checks are what every line goes through before it is sent: always,
// its kind against the program's kinds (listed once, at the start); with
// -dry-run, the ledger's own checks of a grant under the server's
// settings (api.CheckGrant) first; without, the ledger checks when it is
// sent.
func (c importConfig) checks(kinds map[string]bool) []importer.Check {
	kindCheck := func(_ context.Context, g *pb.GrantRequest) error {
		if k := importer.KindOf(g); !kinds[k] {
			return &importer.Refusal{Reason: string(client.ReasonKindNotFound),
				Message: fmt.Sprintf("the program has no point kind %q (ListPointKinds when the import started)", k)}
		}
		return nil
	}
	if !c.dryRun {
		return []importer.Check{kindCheck}
	}
	scale := int32(c.scale)
	return []importer.Check{func(_ context.Context, g *pb.GrantRequest) error {
		err := api.CheckGrant(g, c.expiry, scale)
		if e, ok := ledger.AsError(err); ok {
			return &importer.Refusal{Reason: e.Reason, Message: e.Message}
		}
		return err
	}, kindCheck}
}

// listKinds is the set of the program's point kinds, every page of
// ListPointKinds.
func listKinds(ctx context.Context, kc pointledgerv1connect.PointKindServiceClient) (map[string]bool, error) {
	kinds := map[string]bool{}
	token := ""
	for {
		res, err := kc.ListPointKinds(ctx, connect.NewRequest(&pb.ListPointKindsRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, err
		}
		for _, k := range res.Msg.Kinds {
			kinds[k.KindId] = true
		}
		if token = res.Msg.NextPageToken; token == "" {
			return kinds, nil
		}
	}
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// showProgress draws a bar on a terminal, and writes a line every interval
// anywhere else, until the returned stop is called.
func showProgress(w io.Writer, total int64, p *importer.Progress, interval time.Duration, dryRun bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	verb := "import"
	if dryRun {
		verb = "dry run"
	}
	counts := func() string {
		if dryRun {
			return fmt.Sprintf("refused %d", p.Refused.Load())
		}
		return fmt.Sprintf("granted %d  replayed %d  refused %d", p.Granted.Load(), p.Replayed.Load(), p.Refused.Load())
	}
	wg.Add(1)
	if isTerminal(w) {
		bar := progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(verb),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("lines"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(30),
		)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				bar.Describe(counts())
				_ = bar.Set64(p.Done.Load())
				select {
				case <-done:
					bar.Describe(counts())
					if n := p.Done.Load(); n >= total {
						_ = bar.Finish() // drawn at the end, not at the last throttled frame
					} else {
						_ = bar.Set64(n)
						_ = bar.Exit()
					}
					fmt.Fprintln(w)
					return
				case <-tick.C:
				}
			}
		}()
	} else {
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				n := p.Done.Load()
				elapsed := time.Since(start)
				rate := float64(n) / elapsed.Seconds()
				eta := "?"
				if rate > 0 && total >= n {
					eta = time.Duration(float64(total-n) / rate * float64(time.Second)).Round(time.Second).String()
				}
				fmt.Fprintf(w, "%s: %d/%d lines  %s  %.0f lines/s  ETA %s\n", verb, n, total, counts(), rate, eta)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func printImportSummary(w io.Writer, path string, format importer.Format, dryRun bool, s importer.Summary) {
	what := "Import"
	if dryRun {
		what = "Dry run"
	}
	fmt.Fprintf(w, "\n%s of %s (%s), took %s\n", what, path, format, s.Elapsed.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  lines\t%d\n", s.Lines)
	if dryRun {
		fmt.Fprintf(tw, "  passed\t%d\n", s.Checked)
	} else {
		fmt.Fprintf(tw, "  granted\t%d\n  replayed\t%d\n", s.Granted, s.Replayed)
	}
	fmt.Fprintf(tw, "  refused\t%d\n", s.Refused)
	reasons := make([]string, 0, len(s.RefusedBy))
	for r := range s.RefusedBy {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		a, b := reasons[i], reasons[j]
		return s.RefusedBy[a] > s.RefusedBy[b] || s.RefusedBy[a] == s.RefusedBy[b] && a < b
	})
	for _, r := range reasons {
		fmt.Fprintf(tw, "    %s\t%d\n", r, s.RefusedBy[r])
	}
	tw.Flush()
	if len(s.Points) == 0 {
		return
	}
	if dryRun {
		fmt.Fprintln(w, "\nPoints by kind (the lines that passed):")
	} else {
		fmt.Fprintln(w, "\nPoints by kind (granted and replayed lines):")
	}
	kinds := make([]string, 0, len(s.Points))
	for k := range s.Points {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, k := range kinds {
		fmt.Fprintf(tw, "  %s\t%s\t\n", k, s.Points[k])
	}
	tw.Flush()
}
