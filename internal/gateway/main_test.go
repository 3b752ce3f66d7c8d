package gateway

import (
	"flag"
	"os"
	"testing"
)

var netHTTPFlag = flag.Bool("upstream.nethttp", false,
	"send the gateway's upstream requests through net/http's Transport instead of internal/h1's (the suite passes through both)")

func TestMain(m *testing.M) {
	flag.Parse()
	upstreamNetHTTP = *netHTTPFlag
	os.Exit(m.Run())
}
