#!/bin/bash
# cpushares.sh PROFILE: where a CPU profile of ledgerd serve went, in shares
# of its samples, by the goroutines that spent them (each line is one
# `go tool pprof -top -focus/-ignore`; the indented lines are parts of the
# line above). docs/performance.md (ledgerd's own CPU per purchase) takes
# profiles over the load test's measured window with its -cpu-profile DIR
# (DIR/<run>.pprof), or by hand during a measurement:
#   curl -o cpu.pprof "http://<ops-listen>/debug/pprof/profile?seconds=25"
set -euo pipefail
p=$1
share() {
	local r
	r=$(go tool pprof -top -nodefraction=0 -nodecount=1000000 "$@" "$p" 2>/dev/null | grep -o "accounting for [0-9.]*m\?s, [0-9.]*%" | sed 's/accounting for //' || true)
	echo "${r:-0}"
}
echo "total: $(go tool pprof -top -nodecount=1 "$p" 2>/dev/null | grep -o 'Total samples = [0-9.]*m\?s')"
echo "SDK, in the write path's calls (serialize, sign, middleware, retry): $(share -focus 'dynamodb\.\(\*Client\)\.invokeOperation')"
echo "  of which signing (SigV4):                                        $(share -focus 'signer/v4\.Signer\.SignHTTP|crypto/.*sha256' -ignore 'pointledger/internal/auth')"
echo "  of which the HTTP round trip in the caller:                      $(share -focus 'transport/http\.ClientHandler\.Handle')"
echo "SDK's HTTP connections (net/http readLoop, writeLoop):              $(share -focus 'persistConn\)\.(readLoop|writeLoop)')"
echo "ddbwire's calls in the caller (encode, sign, retry, send, read):    $(share -focus 'ddbwire\.\(\*Client\)\.(TransactWriteItems|GetItem)')"
echo "  of which its own connections' write and read (-lean-conns):      $(share -focus 'ddbwire\.\(\*conns\)\.exchange')"
echo "write path's plan in the caller (decision, items):                 $(share -focus 'dynamo\.\(\*Ledger\)\.plan')"
echo "write path without the SDK (decision, items, groups):               $(share -focus 'dynamo\.\(\*Ledger\)\.drain' -ignore 'invokeOperation')"
echo "API: net/http server, one goroutine a connection, all it calls:      $(share -focus 'net/http\.\(\*conn\)\.serve')"
echo "  of which the Connect handler (decode, interceptors, encode):     $(share -focus 'connect\.\(\*Handler\)\.ServeHTTP')"
echo "  of which auth (token, policy, rate limit) before it:             $(share -focus 'auth\.Middleware' -ignore 'connect\.\(\*Handler\)\.ServeHTTP')"
echo "  of which metrics (the interceptor, the SDK middleware):          $(share -focus 'prometheus')"
echo "  of which request logging:                                        $(share -focus 'LogRequests' -ignore 'connect\.\(\*chain\)|unaryThunk|NewUnaryHandler')"
echo "GC (background marking and sweeping):                              $(share -focus 'gcBgMarkWorker|bgsweep|bgscavenge')"
echo "rest (scheduler, netpoll, timers):                                 $(share -ignore 'invokeOperation|persistConn\)\.(readLoop|writeLoop)|dynamo\.\(\*Ledger\)\.drain|net/http\.\(\*conn\)\.serve|gcBgMarkWorker|bgsweep|bgscavenge')"
