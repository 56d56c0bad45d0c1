// Command history records what etcd's clients see and checks it the way etcd's robustness tests
// do (https://github.com/etcd-io/etcd/tree/main/tests/robustness): `history record` runs
// concurrent clientv3 clients and watches and writes every operation to a file; `history check`
// verifies the file for linearizability (porcupine), the watch guarantees, revisions, declared
// restores and split brain. See docs/clients.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"etcd-asg-lifecycle/tests/history/internal/history"
	rec "etcd-asg-lifecycle/tests/history/internal/record"
	"etcd-asg-lifecycle/tests/history/internal/validate"
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

// record is `history record`: its flags; the recorder is internal/record.
func record(args []string) error {
	cfg := &rec.Config{}
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "the load balancer's client URL (https://host:port); several, comma-separated, for clients that fail over (an adoption: the old members, then the stack's)")
	fs.StringVar(&cfg.Members, "members", "", "member client URLs some clients are pinned to (comma-separated; optional)")
	fs.IntVar(&cfg.Pinned, "pinned", 2, "how many of the clients are pinned to members (one member each, round robin)")
	fs.BoolVar(&cfg.PinnedSerializable, "pinned-serializable", false, "pinned clients only read, serializably (a member's own view)")
	fs.StringVar(&cfg.CACert, "cacert", "", "CA certificate file")
	fs.StringVar(&cfg.Cert, "cert", "", "client certificate file")
	fs.StringVar(&cfg.Key, "key", "", "client key file")
	fs.StringVar(&cfg.Prefix, "prefix", "/history/", "the only prefix written")
	fs.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	fs.IntVar(&cfg.Keys, "keys", 10, "keys under the prefix")
	fs.Float64Var(&cfg.Rate, "rate", 60, "operations a second, all clients together")
	fs.StringVar(&cfg.Out, "out", "", "the history file written at the end")
	fs.StringVar(&cfg.StopFile, "stop-file", "", "stop when this file exists (or on SIGTERM)")
	fs.StringVar(&cfg.ReadyFile, "ready-file", "", "created once the cluster has answered and the recording has begun")
	fs.DurationVar(&cfg.MaxDuration, "max", 30*time.Minute, "stop after this long in any case")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Second, "each operation's deadline")
	fs.Int64Var(&cfg.Seed, "seed", time.Now().UnixNano(), "traffic's random seed")
	_ = fs.Parse(args)
	if err := cfg.Validate(); err != nil {
		return err
	}
	return rec.Run(cfg)
}

// check is `history check`: its flags, the summary printed (each violation on a line, then the
// summary as JSON) and the exit code (0 ok, 1 violation, 2 unknown, 3 unreadable); the checker
// is internal/validate.
func check(args []string) (code int) {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	path := fs.String("history", "", "the history file")
	timeout := fs.Duration("timeout", 10*time.Second, "the most the linearizability check takes")
	html := fs.String("html", "", "porcupine's visualization, written on a violation (default: beside the history)")
	fresh := fs.Bool("serializable-must-be-fresh", false, "treat a stale serializable read as a violation")
	var restores []validate.Restore
	fs.Func("restore", "a declared restore: REVISION[:backup|survivor], in order (repeat)", func(s string) error {
		rev, kind, _ := strings.Cut(s, ":")
		n, err := strconv.ParseInt(rev, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("restore %q: the revision must be a positive number", s)
		}
		if kind == "" {
			kind = "backup"
		}
		if kind != "backup" && kind != "survivor" {
			return fmt.Errorf("restore %q: kind must be backup or survivor", s)
		}
		restores = append(restores, validate.Restore{Revision: n, Kind: kind})
		return nil
	})
	walDirs := fs.String("wal", "", "the members' data directories (comma-separated; replaced members' too): "+
		"their logs settle writes of unknown outcome")
	_ = fs.Parse(args)
	if *path == "" {
		fmt.Fprintln(os.Stderr, "check needs -history")
		return 3
	}
	h, err := history.Read(*path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading %s: %v\n", *path, err)
		return 3
	}
	if *html == "" {
		*html = strings.TrimSuffix(*path, ".jsonl") + ".html"
	}
	// Never a panic: a history the checker cannot judge is refused as unreadable.
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "history check: cannot check %s: %v\n%s", *path, r, debug.Stack())
			code = 3
		}
	}()
	opts := validate.Options{Timeout: *timeout, HTML: *html, Fresh: *fresh, Restores: restores}
	for _, d := range strings.Split(*walDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			opts.WALDirs = append(opts.WALDirs, d)
		}
	}
	sum := validate.Check(h, opts)
	for _, v := range sum.Violations {
		fmt.Println("VIOLATION:", v)
	}
	out, _ := json.Marshal(sum)
	fmt.Println(string(out))
	switch sum.Result {
	case "ok":
		return 0
	case "unknown":
		return 2
	}
	return 1
}
