// Command tokentrace measures, explains and cuts the latency of LLM serving.
// See README.md; the commands live in internal/cli.
package main

import (
	"os"

	"github.com/tokentrace/tokentrace/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
