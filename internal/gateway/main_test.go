package gateway

import (
	"flag"
	"os"
	"testing"
)

var netHTTPFlag = flag.Bool("upstream.nethttp", false,
	"send the gateway's upstream requests through net/http's Transport instead of internal/h1's (the suite passes through both)")

// serverNetHTTP: startGateway's servers send streamed answers through
// net/http's response writer only (Gateway.noRawSend).
var serverNetHTTP bool

var serverNetHTTPFlag = flag.Bool("server.nethttp", false,
	"send the gateway's streamed answers through net/http's response writer only, never below it on the raw connection (the suite passes both ways)")

func TestMain(m *testing.M) {
	flag.Parse()
	upstreamNetHTTP = *netHTTPFlag
	serverNetHTTP = *serverNetHTTPFlag
	os.Exit(m.Run())
}
