package main

import (
	"context"
	"encoding/json"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamolocal"
)

func TestParseCORSOrigins(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		list    string
		want    []string
		wantErr string
	}{
		{name: "none", list: "", want: nil},
		{name: "one", list: "https://shop.example", want: []string{"https://shop.example"}},
		{name: "several, spaced", list: " https://shop.example, http://127.0.0.1:5173 ,,", want: []string{"https://shop.example", "http://127.0.0.1:5173"}},
		{name: "upper case, as rs/cors compares", list: "HTTPS://Shop.Example", want: []string{"https://shop.example"}},
		{name: "IPv6", list: "http://[::1]:8081", want: []string{"http://[::1]:8081"}},
		{name: "star", list: "*", wantErr: "no wildcards"},
		{name: "wildcard subdomain", list: "https://*.shop.example", wantErr: "no wildcards"},
		{name: "trailing slash", list: "https://shop.example/", wantErr: "no path"},
		{name: "path", list: "https://shop.example/app", wantErr: "no path"},
		{name: "query", list: "https://shop.example?x=1", wantErr: "no path"},
		{name: "fragment", list: "https://shop.example#top", wantErr: "no path"},
		{name: "user", list: "https://me@shop.example", wantErr: "no path"},
		{name: "no scheme", list: "shop.example", wantErr: "scheme://host"},
		{name: "another scheme", list: "ftp://shop.example", wantErr: "scheme://host"},
		{name: "null (sandboxed frames, files)", list: "null", wantErr: "scheme://host"},
		{name: "no host", list: "https://", wantErr: "scheme://host"},
		{name: "empty port", list: "https://shop.example:", wantErr: "scheme://host"},
		{name: "port 0", list: "http://shop.example:0", wantErr: "1 to 65535"},
		{name: "port too large", list: "http://shop.example:65536", wantErr: "1 to 65535"},
		{name: "default port", list: "https://shop.example:443", wantErr: "without the default port"},
		{name: "one bad among good", list: "https://shop.example,https://shop.example/", wantErr: `"https://shop.example/"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseCORSOrigins(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "LEDGER_CORS_ORIGINS") {
					t.Errorf("parseCORSOrigins(%q) = %v, %v; want an error naming LEDGER_CORS_ORIGINS with %q", tt.list, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("parseCORSOrigins(%q) = %q, %v; want %q", tt.list, got, err, tt.want)
			}
		})
	}
	// serve refuses to start with one it cannot use.
	err := run(context.Background(), []string{"serve", "-insecure-dev", "-cors-origins", "*"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-cors-origins") {
		t.Errorf("serve -cors-origins '*': %v, want a refusal naming -cors-origins", err)
	}
}

const shopOrigin = "https://shop.example"

// preflight asks ledgerd at addr, as a browser on origin would before a
// Connect call with a token, whether it may POST to path.
func preflight(t *testing.T, addr, path, origin string) (status int, header http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", http.MethodPost)
	req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type")
	status, header, _ = send(t, req)
	return status, header
}

// send sends req, and returns the answer's status, headers and body.
func send(t *testing.T, req *http.Request) (status int, header http.Header, body string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(b)
}

// corsHeaders are the Access-Control-* headers of an answer.
func corsHeaders(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out[k] = v
		}
	}
	return out
}

// The preflight of an allowed origin is answered before any token is asked
// for (it carries none); its calls still need their tokens, and can read the
// refusals. Other origins, and paths outside the services, get no CORS
// header. Issue 16: a browser client was refused at the preflight
// (OPTIONS -> 401 MISSING_TOKEN).
func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t, "LEDGER_CORS_ORIGINS=http://localhost:3000, "+shopOrigin)
	t.Run("allowed origin", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{pointledgerv1connect.LedgerServiceGetBalanceProcedure, pointledgerv1connect.AdminServiceAdjustProcedure} {
			status, h := preflight(t, p.addr, path, shopOrigin)
			if status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != shopOrigin ||
				h.Get("Access-Control-Allow-Methods") != http.MethodPost || h.Get("Access-Control-Max-Age") != "7200" ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "authorization") || h.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("preflight of %s from %s: %d %v; want 204 allowing the origin, POST and authorization, for 7200 s, without credentials",
					path, shopOrigin, status, corsHeaders(h))
			}
		}
	})
	t.Run("other origins", func(t *testing.T) {
		t.Parallel()
		for _, origin := range []string{"https://evil.example", "https://shop.example.evil.example", "http://shop.example", "https://shop.example:8443", "null"} {
			status, h := preflight(t, p.addr, pointledgerv1connect.LedgerServiceGetBalanceProcedure, origin)
			if h := corsHeaders(h); len(h) > 0 {
				t.Errorf("preflight from %s: %d %v, want no Access-Control-* header", origin, status, h)
			}
		}
	})
	t.Run("outside the services", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/healthz", "/metrics", "/", "/grpc.health.v1.Health/Check"} {
			status, h := preflight(t, p.addr, path, shopOrigin)
			if h := corsHeaders(h); len(h) > 0 || status < 400 {
				t.Errorf("preflight of %s from %s: %d %v, want a refusal (404, 405) and no Access-Control-* header", path, shopOrigin, status, h)
			}
		}
	})
	call := func(t *testing.T, path, origin, token string) (status int, header http.Header, body string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+path, strings.NewReader(`{"user_id":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return send(t, req)
	}
	t.Run("calls of an allowed origin", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name, path, token string
			status            int
			body              string
		}{
			{"without a token", pointledgerv1connect.LedgerServiceGetBalanceProcedure, "", http.StatusUnauthorized, `"code":"unauthenticated"`},
			{"with a token", pointledgerv1connect.LedgerServiceGetBalanceProcedure, p.creds.ServiceToken, http.StatusOK, `"user_id":"alice"`},
			{"a procedure that does not exist", "/pointledger.v1.LedgerService/Nope", "", http.StatusNotFound, `"code":"unimplemented"`},
		} {
			status, h, body := call(t, tt.path, shopOrigin, tt.token)
			if status != tt.status || !strings.Contains(body, tt.body) || h.Get("Access-Control-Allow-Origin") != shopOrigin ||
				!strings.Contains(h.Get("Access-Control-Expose-Headers"), "Grpc-Status") {
				t.Errorf("%s: %d %s %v; want %d with %s, readable by %s", tt.name, status, body, corsHeaders(h), tt.status, tt.body, shopOrigin)
			}
		}
	})
	t.Run("calls of another origin", func(t *testing.T) {
		t.Parallel()
		// ledgerd answers (CORS is not authorization: a script elsewhere, or
		// curl, holding a token may call), but no browser lets the script
		// read it, nor sends it past a preflight.
		status, h, body := call(t, pointledgerv1connect.LedgerServiceGetBalanceProcedure, "https://evil.example", "")
		if h := corsHeaders(h); len(h) > 0 || status != http.StatusUnauthorized {
			t.Errorf("a call from another origin: %d %s %v, want 401 and no Access-Control-* header", status, body, h)
		}
	})
}

// Without -cors-origins, nothing changes: no Access-Control-* header for
// anyone, and the preflight meets the token check like any request.
func TestCORSOffByDefault(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	status, h := preflight(t, p.addr, pointledgerv1connect.LedgerServiceGetBalanceProcedure, shopOrigin)
	if h := corsHeaders(h); len(h) > 0 || status != http.StatusUnauthorized {
		t.Errorf("preflight without -cors-origins: %d %v, want 401 and no Access-Control-* header", status, h)
	}
}

// chromium is the browser the test drives: $CHROMIUM, else chromium on the
// PATH, Debian's package as `make chromium` installs it (a minimum version,
// not a pin). It logs the browser's version: which build a run used is not
// fixed by the repository.
func chromium(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("this test runs a browser, and found no chromium on the PATH. `make chromium` installs Debian's package " +
				"(it needs root: sudo make chromium), and `make test` does it first; or set CHROMIUM to a Chromium or Chrome binary; " +
				"or leave the test out: go test -skip TestCORSInABrowser ./...")
		}
	}
	// Standard output alone: Debian's launcher script complains on its
	// standard error about what it reads of the machine.
	version, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	t.Logf("browser: %s, %s", bin, strings.TrimSpace(string(version)))
	return bin
}

// A real browser, headless Chromium, loads a page from another origin whose
// script calls ledgerd with fetch, as a browser app would: from an allowed
// origin the purchase goes through, and the script reads the answers (the
// refusal without a token too); from another origin the browser stops the
// calls at the preflight, and nothing is spent.
func TestCORSInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	// ledgerd is told the allowed page's origin, so the pages' ports come
	// first.
	allowedLn, otherLn := listen(t), listen(t)
	p := startLedgerd(t, "LEDGER_CORS_ORIGINS=http://"+allowedLn.Addr().String())
	token, err := auth.MintUserToken(p.creds.Credentials, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	allowed, allowedResult := servePage(t, allowedLn, "http://"+p.addr, token, "browser-allowed")
	other, otherResult := servePage(t, otherLn, "http://"+p.addr, token, "browser-other")
	ctx := context.Background()
	if _, err := p.ledgerClient().Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "10", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}

	// A browser for each page, one after the other. (One Chromium given
	// both URLs loads neither, headless.)
	got := map[string]browserResult{}
	for _, page := range []struct {
		name    string
		url     string
		results <-chan browserResult
		console string // what the browser must say on its console
	}{
		{"allowed origin", allowed.URL, allowedResult, ""},
		{"other origin", other.URL, otherResult, "has been blocked by CORS policy"},
	} {
		browser := runChromium(t, bin, page.url)
		deadline := time.After(2 * time.Minute) // bounds a hang; says nothing about speed
		select {
		case got[page.name] = <-page.results:
		case <-deadline:
			t.Fatalf("%s: the page reported nothing in 2 minutes; chromium said:\n%s", page.name, browser.out)
		}
		// The console says why fetch failed: CORS, not ledgerd.
		for page.console != "" && !strings.Contains(browser.out.String(), page.console) {
			select {
			case <-deadline:
				t.Fatalf("%s: chromium did not say %q in 2 minutes:\n%s", page.name, page.console, browser.out)
			case <-time.After(50 * time.Millisecond):
			}
		}
		browser.stop()
	}

	a := got["allowed origin"]
	if a.WithoutToken.Status != http.StatusUnauthorized || a.WithoutToken.Answer["code"] != "unauthenticated" {
		t.Errorf("allowed origin, without a token: %+v; want 401 unauthenticated, read by the script", a.WithoutToken)
	}
	if a.WithToken.Status != http.StatusOK || a.WithToken.Answer["balance"] != "9" {
		t.Errorf("allowed origin, with alice's token: %+v; want 200 and a balance of 9", a.WithToken)
	}
	o := got["other origin"]
	for name, c := range map[string]browserCall{"without a token": o.WithoutToken, "with a token": o.WithToken} {
		// What a script sees of a CORS refusal: fetch fails, with no answer.
		if !strings.Contains(c.Error, "Failed to fetch") || c.Status != 0 {
			t.Errorf("other origin, %s: %+v; want fetch to fail (TypeError: Failed to fetch)", name, c)
		}
	}
	res, err := p.ledgerClient().ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "alice"}))
	if err != nil {
		t.Fatal(err)
	}
	var requests []string
	for _, e := range res.Msg.Entries {
		requests = append(requests, e.RequestId)
	}
	if !slices.Equal(requests, []string{"g", "browser-allowed"}) {
		t.Errorf("alice's entries after both pages: %q, want the grant and the allowed page's purchase", requests)
	}
}

// browserPage is served to Chromium from its own origin: its script calls
// ledgerd's Purchase as a browser app does (Connect JSON over fetch, with a
// user token), once without the token and once with it, and posts what it
// saw back to /result.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<meta charset="utf-8">
<title>ledgerd from another origin</title>
<script>
const ledgerd = {{.Ledgerd}}, token = {{.Token}}, requestID = {{.RequestID}};
async function purchase(withToken) {
  const headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"};
  if (withToken) headers["Authorization"] = "Bearer " + token;
  try {
    const res = await fetch(ledgerd + "/pointledger.v1.LedgerService/Purchase", {
      method: "POST", headers,
      body: JSON.stringify({user_id: "alice", amount: "1", request_id: requestID}),
    });
    return {status: res.status, answer: await res.json()};
  } catch (e) {
    return {error: String(e)};
  }
}
(async () => {
  const result = {without_token: await purchase(false), with_token: await purchase(true)};
  await fetch("/result", {method: "POST", body: JSON.stringify(result)});
})();
</script>
`))

// browserCall is what the page's script saw of one call.
type browserCall struct {
	Status int            `json:"status"`
	Answer map[string]any `json:"answer"`
	Error  string         `json:"error"` // fetch failed: no answer the script may read
}

type browserResult struct {
	WithoutToken browserCall `json:"without_token"`
	WithToken    browserCall `json:"with_token"`
}

// listen reserves a port of 127.0.0.1 for a page: its origin.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// servePage serves browserPage on ln, its own origin, calling ledgerd with
// token, and sends what its script reports on the channel.
func servePage(t *testing.T, ln net.Listener, ledgerd, token, requestID string) (*httptest.Server, <-chan browserResult) {
	t.Helper()
	results := make(chan browserResult, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = browserPage.Execute(w, map[string]string{"Ledgerd": ledgerd, "Token": token, "RequestID": requestID})
	})
	mux.HandleFunc("POST /result", func(w http.ResponseWriter, r *http.Request) {
		var res browserResult
		if err := json.NewDecoder(r.Body).Decode(&res); err != nil {
			t.Errorf("the page's result: %v", err)
		}
		select {
		case results <- res:
		default: // a reload: the first report stands
		}
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, results
}

// browser is a headless Chromium and what it says (stdout and stderr).
type browser struct {
	out  *dynamolocal.Output
	stop func() // kills it, at the latest when the test ends
}

// runChromium loads url in headless Chromium.
func runChromium(t *testing.T, bin, url string) *browser {
	t.Helper()
	out := &dynamolocal.Output{}
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", // root in containers and CI, where the sandbox has no user namespaces
		"--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(),
		"--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-extensions", "--enable-logging=stderr", "--v=0",
		url)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	stop := sync.OnceFunc(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("chromium on %s said:\n%s", url, out)
		}
	})
	return &browser{out: out, stop: stop}
}
