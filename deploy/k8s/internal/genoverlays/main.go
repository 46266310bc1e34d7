// Command genoverlays writes deploy/k8s's generated files (internal/overlays.Files): run
// by `make generate-k8s`, which is `go generate ./deploy/k8s` (doc.go), from deploy/k8s.
package main

import (
	"flag"
	"log"

	"github.com/bookstore-go/bookstore/deploy/k8s/internal/overlays"
)

func main() {
	root := flag.String("root", "../..", "the repository, whose files the copies are of")
	dir := flag.String("o", ".", "the deploy/k8s directory to write into")
	flag.Parse()
	if err := overlays.Write(*root, *dir); err != nil {
		log.Fatal(err)
	}
}
