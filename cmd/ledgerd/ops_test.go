package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do with -plaintext.
func h2cClient() *http.Client {
	var ps http.Protocols
	ps.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &ps, DialContext: (&net.Dialer{}).DialContext}}
}

// scrape reads ledgerd's /metrics as Prometheus would.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// sample returns the metric of family name whose labels include labels
// (name=value pairs), or nil.
func sample(families map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := families[name]
	if f == nil {
		return nil
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if match {
			return m
		}
	}
	return nil
}

func TestMetricsCountRequestsGroupsAndDynamoDBCalls(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	ctx := context.Background()
	client := p.ledgerClient()
	for _, id := range []string{"g1", "g2", "g3"} {
		if _, err := client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "carol", Amount: "10", RequestId: id})); err != nil {
			t.Fatalf("grant %s: %v", id, err)
		}
	}
	_, err := client.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "carol", Amount: "500", RequestId: "p1"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("purchase beyond the balance: %v, want failed_precondition", err)
	}

	families := scrape(t, p.opsAddr)
	const grant, purchase = pointledgerv1connect.LedgerServiceGrantProcedure, pointledgerv1connect.LedgerServicePurchaseProcedure
	for _, tt := range []struct {
		procedure, code string
		want            float64
	}{{grant, "ok", 3}, {purchase, "failed_precondition", 1}} {
		m := sample(families, "pointledger_requests_total", "procedure", tt.procedure, "code", tt.code)
		if got := m.GetCounter().GetValue(); got != tt.want {
			t.Errorf("pointledger_requests_total{procedure=%q,code=%q} = %v, want %v", tt.procedure, tt.code, got, tt.want)
		}
	}
	if got := sample(families, "pointledger_request_duration_seconds", "procedure", grant).GetHistogram().GetSampleCount(); got != 3 {
		t.Errorf("grant latencies observed = %d, want 3", got)
	}
	// The refused purchase commits its refusal's record: the groups hold
	// the three grants and the refusal.
	groups := sample(families, "pointledger_group_commit_size").GetHistogram()
	if groups.GetSampleCount() < 1 || groups.GetSampleSum() != 4 {
		t.Errorf("pointledger_group_commit_size: %d groups of %v mutations in all, want at least 1 group and 4 mutations",
			groups.GetSampleCount(), groups.GetSampleSum())
	}
	// The projector writes history with transactions too.
	transactions := sample(families, "pointledger_dynamodb_calls_total", "operation", "TransactWriteItems", "outcome", "ok")
	if got := transactions.GetCounter().GetValue(); got < float64(groups.GetSampleCount()) {
		t.Errorf("TransactWriteItems calls ok = %v, want at least one per group (%d)", got, groups.GetSampleCount())
	}
	if got := sample(families, "pointledger_dynamodb_calls_total", "operation", "GetItem", "outcome", "ok").GetCounter().GetValue(); got < 1 {
		t.Errorf("GetItem calls ok = %v, want the health check's at least", got)
	}
	for _, name := range []string{
		"pointledger_write_retries_total",
		"pointledger_transaction_conflicts_total",
		"pointledger_projection_lag_seconds",
		"pointledger_projection_entries_applied_total",
		"pointledger_dynamodb_call_duration_seconds",
		"go_goroutines",
	} {
		if families[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

// A fresh ledgerd serves every metric docs/operations.md lists, with the
// documented labels, and every counter of the API at 0 for every procedure,
// before any call (issue 22, item 5): a dashboard's query finds 0, not
// nothing. (Only the DynamoDB calls have moved: the projector and the health
// cache call at once.)
func TestFreshLedgerdServesEveryDocumentedMetric(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	families := scrape(t, p.opsAddr)
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for line := range strings.Lines(string(doc)) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`pointledger_") {
			continue
		}
		rows++
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		f := families[name]
		if f == nil {
			// pointledger_peers alone comes with -peers, which this ledgerd
			// runs without; the queue depth per endpoint, with an endpoint;
			// a budget's remaining, with a budget.
			if name != "pointledger_peers" && name != "pointledger_webhook_queue_depth" && name != "pointledger_budget_remaining" {
				t.Errorf("/metrics of a fresh ledgerd has no %s", name)
			}
			continue
		}
		var want []string
		for l := range strings.SplitSeq(cells[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				want = append(want, l)
			}
		}
		slices.Sort(want)
		for _, m := range f.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s has labels %v, documented %v", name, got, want)
			}
		}
	}
	if rows < 10 {
		t.Fatalf("docs/operations.md lists %d pointledger_ metrics; is its table still there?", rows)
	}
	procedures := slices.Concat(api.Procedures(api.LedgerServiceDescriptor()), api.Procedures(api.AdminServiceDescriptor()),
		api.Procedures(api.WebhookServiceDescriptor()))
	for _, procedure := range procedures {
		for _, code := range []string{"ok", "invalid_argument", "unavailable"} {
			if m := sample(families, "pointledger_requests_total", "procedure", procedure, "code", code); m == nil || m.GetCounter().GetValue() != 0 {
				t.Errorf("pointledger_requests_total{procedure=%q,code=%q} = %v, want 0", procedure, code, m)
			}
		}
		if m := sample(families, "pointledger_request_duration_seconds", "procedure", procedure); m == nil || m.GetHistogram().GetSampleCount() != 0 {
			t.Errorf("pointledger_request_duration_seconds{procedure=%q} = %v, want no samples", procedure, m)
		}
	}
	for _, reason := range []string{"transaction_conflict", "version_moved", "throttled", "stale_cache"} {
		if m := sample(families, "pointledger_write_retries_total", "reason", reason); m == nil || m.GetCounter().GetValue() != 0 {
			t.Errorf("pointledger_write_retries_total{reason=%q} = %v, want 0", reason, m)
		}
	}
	if m := sample(families, "pointledger_forwarded_total", "procedure", pointledgerv1connect.LedgerServicePurchaseProcedure); m == nil || m.GetCounter().GetValue() != 0 {
		t.Errorf("pointledger_forwarded_total{procedure=Purchase} = %v, want 0", m)
	}
	if m := sample(families, "pointledger_dynamodb_calls_total", "operation", "TransactWriteItems", "outcome", "error"); m == nil {
		t.Error("pointledger_dynamodb_calls_total{operation=TransactWriteItems,outcome=error} is missing")
	}
}

// tcpSwitch forwards TCP connections to target while up; down closes the
// listener and every connection, as a network partition would.
type tcpSwitch struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func (s *tcpSwitch) up(t *testing.T) {
	t.Helper()
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	s.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", s.target)
			if err != nil {
				c.Close()
				continue
			}
			s.mu.Lock()
			s.conns = append(s.conns, c, u)
			s.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
}

func (s *tcpSwitch) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// grpcHealthCheck returns a gRPC client of grpc.health.v1.Health/Check. Its
// messages are built from the descriptors reflection serves, as grpcurl's
// would be.
func grpcHealthCheck(t *testing.T, baseURL string) func(service string) (grpchealth.Status, error) {
	t.Helper()
	files, err := healthFiles()
	if err != nil {
		t.Fatal(err)
	}
	method, err := files.FindDescriptorByName(grpchealth.HealthV1ServiceName + ".Check")
	if err != nil {
		t.Fatal(err)
	}
	md := method.(protoreflect.MethodDescriptor)
	client := connect.NewClient[dynamicpb.Message, dynamicpb.Message](h2cClient(), baseURL+"/"+grpchealth.HealthV1ServiceName+"/Check",
		connect.WithGRPC(), connect.WithSchema(md),
		connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
			*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(md.Output())
			return nil
		}))
	return func(service string) (grpchealth.Status, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a hang
		defer cancel()
		req := dynamicpb.NewMessage(md.Input())
		req.Set(md.Input().Fields().ByName("service"), protoreflect.ValueOfString(service))
		res, err := client.CallUnary(ctx, connect.NewRequest(req))
		if err != nil {
			return 0, err
		}
		return grpchealth.Status(res.Msg.Get(md.Output().Fields().ByName("status")).Enum()), nil
	}
}

func TestHealthFollowsDynamoDB(t *testing.T) {
	t.Parallel()
	emu := dynamotest.Emulator(t)
	sw := &tcpSwitch{target: strings.TrimPrefix(emu.Endpoint, "http://")}
	sw.up(t)
	t.Cleanup(sw.down)
	// Nothing in the background reads DynamoDB (no projector, dispatcher or
	// sweeper): the health checks' reads are then the only GetItems the
	// metrics count below. The dispatcher's stream consumer reads its
	// leases with GetItem, and after the outage it resumes its shards at a
	// time of the scheduler's choosing: on a busy machine, within the
	// probes' fraction of a second (issue 31: 4 and 5 reads against at
	// most 3, `nice -n 19 ./ledgerd.test -test.run '^TestHealthFollowsDynamoDB$'`
	// beside the load of other builds).
	p := startLedgerd(t, "LEDGER_DYNAMODB_ENDPOINT=http://"+sw.addr, "LEDGER_PROJECTOR=false", "LEDGER_DISPATCHER=false", "LEDGER_SWEEPER=false")
	check := grpcHealthCheck(t, "http://"+p.addr)
	services := []string{"", pointledgerv1connect.LedgerServiceName, pointledgerv1connect.AdminServiceName, pointledgerv1connect.WebhookServiceName}
	// Health answers are cached for a second: wait for the new one (the
	// deadline bounds a hang, it says nothing about speed; a DynamoDB Local
	// slower than the health check's 2 s on a busy machine reads as not
	// serving for a while).
	expect := func(want grpchealth.Status) {
		t.Helper()
		for _, svc := range services {
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
				got, err := check(svc)
				if err != nil {
					t.Fatalf("health check of %q: %v", svc, err)
				}
				if got == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("health of %q = %v after 2 minutes, want %v", svc, got, want)
				}
			}
		}
	}

	expect(grpchealth.StatusServing)
	if _, err := check("no.such.Service"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("health of an unknown service: %v, want not_found", err)
	}
	sw.down()
	expect(grpchealth.StatusNotServing)
	// /healthz answers anyone: it says unavailable, and keeps the cause
	// (table names, the SDK's error, on AWS account and role) for the log.
	res, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || string(body) != "unavailable\n" {
		t.Errorf("/healthz with DynamoDB down: %d %q, want 503 %q and nothing of the cause", res.StatusCode, body, "unavailable\n")
	}
	sw.up(t)
	expect(grpchealth.StatusServing)

	// Anyone may ask, as often as they like: DynamoDB is asked at most once
	// a second, whatever the number of probes.
	reads := func() float64 {
		return sample(scrape(t, p.opsAddr), "pointledger_dynamodb_calls_total", "operation", "GetItem", "outcome", "ok").GetCounter().GetValue()
	}
	before, start := reads(), time.Now()
	const probes = 200
	for range probes {
		res, err := http.Get("http://" + p.addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	// At most one read for each second the probes span, the second they
	// start in, one already under way when counting began, and one of the
	// gRPC health watch above: against 200 without the cache. A busy
	// machine stretches the seconds, and the bound with them.
	if got, most := reads()-before, time.Since(start).Seconds()+3; got > most {
		t.Errorf("%d health probes in %.1f s made %v DynamoDB reads, want at most %.0f (one a second)", probes, time.Since(start).Seconds(), got, most)
	}
}

// Reflection is on the operations listener: it describes the API's
// services, which are called on the API's port.
func TestReflectionListsTheServices(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	client := grpcreflect.NewClient(h2cClient(), "http://"+p.opsAddr, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := client.NewStream(ctx)
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	for _, want := range []protoreflect.FullName{
		pointledgerv1connect.LedgerServiceName,
		pointledgerv1connect.AdminServiceName,
		pointledgerv1connect.WebhookServiceName,
		grpchealth.HealthV1ServiceName,
	} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, without %s", names, want)
		}
	}
	// A client can learn a method's messages from the server alone.
	files, err := stream.FileContainingSymbol(pointledgerv1connect.LedgerServiceName + ".Purchase")
	if err != nil {
		t.Fatalf("file containing Purchase: %v", err)
	}
	if len(files) == 0 || !strings.HasPrefix(files[0].GetName(), "pointledger/v1/") {
		t.Fatalf("file containing Purchase: %d files", len(files))
	}
	// grpcurl ... grpc.health.v1.Health/Check needs the health service's.
	files, err = stream.FileContainingSymbol(grpchealth.HealthV1ServiceName)
	if err != nil {
		t.Fatalf("file containing %s: %v", grpchealth.HealthV1ServiceName, err)
	}
	if len(files) == 0 || files[0].GetPackage() != "grpc.health.v1" || len(files[0].GetService()) != 1 {
		t.Fatalf("file containing %s: %v", grpchealth.HealthV1ServiceName, files)
	}
	var statuses []string // as gRPC's health.proto names them
	for _, m := range files[0].GetMessageType() {
		for _, e := range m.GetEnumType() {
			for _, v := range e.GetValue() {
				statuses = append(statuses, v.GetName())
			}
		}
	}
	if want := []string{"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"}; !slices.Equal(statuses, want) {
		t.Errorf("health statuses = %q, want %q", statuses, want)
	}
	// grpcurl describe google.rpc.ErrorInfo: the detail every error carries.
	files, err = stream.FileContainingSymbol("google.rpc.ErrorInfo")
	if err != nil {
		t.Fatalf("file containing google.rpc.ErrorInfo: %v", err)
	}
	if len(files) == 0 || files[0].GetName() != "google/rpc/error_details.proto" {
		t.Errorf("file containing google.rpc.ErrorInfo: %v", files)
	}
}

// The API's port answers strangers with nothing about the host or the
// process: what operators need is on the operations listener.
func TestPublicPortSaysNothing(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	for _, tt := range []struct {
		name, method, path string
	}{
		{"metrics", http.MethodGet, "/metrics"},
		{"profiler", http.MethodGet, "/debug/pprof/"},
		{"profiler's command line", http.MethodGet, "/debug/pprof/cmdline"},
		{"projection status", http.MethodGet, "/projection/status"},
		{"healthz by POST", http.MethodPost, "/healthz"},
		{"root", http.MethodGet, "/"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, "http://"+p.addr+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s without a token: %s, want 404\n%s", tt.method, tt.path, res.Status, body)
			}
		})
	}
	t.Run("healthz", func(t *testing.T) {
		t.Parallel()
		res, err := http.Get("http://" + p.addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(body) != "ok\n" {
			t.Errorf("GET /healthz: %s %q, want 200 %q", res.Status, body, "ok\n")
		}
	})
	// A procedure that does not exist is told so before any token is asked
	// for, in each protocol (issue 16: a mistyped method got
	// permission_denied, as if it existed).
	t.Run("unknown procedures", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/pointledger.v1.LedgerService/Nope", "/pointledger.v1.AdminService/Nope", "/pointledger.v1.NopeService/GetBalance"} {
			res, err := http.Post("http://"+p.addr+path, "application/json", strings.NewReader(`{"user_id":"alice"}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"unimplemented"`) {
				t.Errorf("POST %s without a token: %s %s, want 404 unimplemented", path, res.Status, body)
			}
			for name, opt := range map[string]connect.ClientOption{"grpc": connect.WithGRPC(), "grpcweb": connect.WithGRPCWeb()} {
				c := connect.NewClient[pb.GetBalanceRequest, pb.GetBalanceResponse](h2cClient(), "http://"+p.addr+path, opt)
				if _, err := c.CallUnary(context.Background(), connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"})); connect.CodeOf(err) != connect.CodeUnimplemented {
					t.Errorf("%s %s without a token: %v, want unimplemented", name, path, err)
				}
			}
		}
	})
	t.Run("reflection", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream := grpcreflect.NewClient(h2cClient(), "http://"+p.addr, connect.WithGRPC()).NewStream(ctx)
		defer stream.Close()
		if names, err := stream.ListServices(); connect.CodeOf(err) != connect.CodeUnimplemented {
			t.Errorf("reflection on the public port: %v, %v, want unimplemented", names, err)
		}
	})
}

// get answers GET url's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, _, body := send(t, req)
	return status, body
}

// What the public port no longer says, the operations listener does.
func TestOpsListenerServesWhatOperatorsAsk(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	for _, tt := range []struct {
		name, path string
		want       string // in the body
	}{
		{"metrics", "/metrics", "pointledger_projection_lag_seconds"},
		{"projection status", "/projection/status", `"owner":"`},
		{"profiler", "/debug/pprof/", "goroutine"},
		{"profiler's command line", "/debug/pprof/cmdline", "ops-listen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, body := get(t, "http://"+p.opsAddr+tt.path)
			if code != http.StatusOK || !strings.Contains(body, tt.want) {
				t.Errorf("GET %s on the operations listener: %d, want 200 with %q\n%.500s", tt.path, code, tt.want, body)
			}
		})
	}
	t.Run("health", func(t *testing.T) {
		t.Parallel()
		if got, err := grpcHealthCheck(t, "http://"+p.opsAddr)(""); err != nil || got != grpchealth.StatusServing {
			t.Errorf("grpc.health.v1 on the operations listener: %v, %v, want SERVING", got, err)
		}
	})
}

// A busy operations address stops serve before it serves: a second ledgerd
// on a host would otherwise run without its metrics, unnoticed.
func TestServeStopsWhenTheOpsAddressIsBusy(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// Should serve start all the same, it stops at the deadline and the
	// test fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	err = run(ctx, []string{"serve", "-insecure-dev", "-listen", "127.0.0.1:0", "-ops-listen", busy.Addr().String(),
		"-dynamodb-endpoint", "http://127.0.0.1:1"}, func(string) string { return "" }, &out, &errOut)
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "-ops-listen") {
		t.Errorf("serve on a busy -ops-listen: %v, want an error naming -ops-listen and the busy address", err)
	}
	if strings.Contains(errOut.String(), "ledgerd serving") {
		t.Errorf("serve said it was serving:\n%s", errOut.String())
	}
}

// `ledgerd project` has its operations listener too: its metrics, profiler
// and status.
func TestProjectServesOpsListener(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	out := &dynamolocal.Output{}
	cmd := exec.Command(p.bin, "project", "-ops-listen", "127.0.0.1:0")
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := <-exited
		if t.Failed() {
			t.Logf("ledgerd project exited (%v); its output:\n%s", err, out)
		}
	})
	for !strings.Contains(out.String(), "ops_listen=") {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("ledgerd project exited: %v\n%s", err, out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	addr := opsAddr(t, out.String())
	for _, tt := range []struct{ path, want string }{
		{"/metrics", "pointledger_projection_entries_applied_total"},
		{"/projection/status", `"running":true`},
		{"/debug/pprof/", "goroutine"},
	} {
		if code, body := get(t, "http://"+addr+tt.path); code != http.StatusOK || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s on project's operations listener: %d, want 200 with %q\n%.500s", tt.path, code, tt.want, body)
		}
	}
}
