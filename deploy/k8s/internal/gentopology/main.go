// Command gentopology writes the production overlay's broker topology
// (overlays/production/broker/topology.yaml) from services/contracts.Topology: run by
// `go generate` in deploy/k8s (doc.go).
package main

import (
	"flag"
	"log"
	"os"

	"github.com/bookstore-go/bookstore/deploy/k8s/internal/topology"
)

func main() {
	out := flag.String("o", "overlays/production/broker/topology.yaml", "the file to write")
	flag.Parse()
	b, err := topology.Manifest()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		log.Fatal(err)
	}
}
