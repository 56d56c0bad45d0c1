// Command history records what etcd's clients see and checks it the way etcd's robustness tests
// do (https://github.com/etcd-io/etcd/tree/main/tests/robustness): `history record` runs
// concurrent clientv3 clients and watches and writes every operation to a file; `history check`
// verifies the file for linearizability (porcupine), the watch guarantees, revisions, declared
// restores and split brain. See docs/clients.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: history record|check [flags] (-h for each)")
		os.Exit(3)
	}
	switch os.Args[1] {
	case "record":
		if err := record(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "history record:", err)
			os.Exit(1)
		}
	case "check":
		os.Exit(check(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "history: unknown command %q (record or check)\n", os.Args[1])
		os.Exit(3)
	}
}
