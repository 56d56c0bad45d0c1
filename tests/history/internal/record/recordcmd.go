package record

// `history record`: its flags, the stop conditions, the watches and clients started, and the
// final write and read every check is measured against.

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"etcd-asg-lifecycle/tests/history/internal/history"
)

// Config is the recording's settings: `history record`'s command line (main.go parses it).
type Config struct {
	Endpoint, Members, CACert, Cert, Key, Prefix, Out, StopFile, ReadyFile string
	Pinned, Clients, Keys                                                  int
	PinnedSerializable                                                     bool
	Rate                                                                   float64
	MaxDuration, Timeout                                                   time.Duration
	Seed                                                                   int64
}

// Validate refuses settings the recorder cannot run with.
func (cfg *Config) Validate() error {
	if cfg.Endpoint == "" || cfg.Out == "" {
		return fmt.Errorf("record needs -endpoint and -out")
	}
	if cfg.MaxDuration > 50*time.Minute {
		// Its leases are granted for an hour and never expire during a recording: the checker
		// models a lease as gone only when a client revoked it.
		return fmt.Errorf("-max %s: at most 50m (the recorder's leases last an hour, and must not expire while it runs)", cfg.MaxDuration)
	}
	if !strings.HasSuffix(cfg.Prefix, "/") || cfg.Keys < 2 || cfg.Clients < 1 || cfg.Rate <= 0 {
		return fmt.Errorf("bad settings: prefix %q must end with /, keys %d ≥ 2, clients %d ≥ 1, rate %v > 0", cfg.Prefix, cfg.Keys, cfg.Clients, cfg.Rate)
	}
	return nil
}

// Run records a history as cfg says (a valid Config: see Validate) and writes it to cfg.Out.
func Run(cfg *Config) error {
	var tlsInfo *transport.TLSInfo
	if cfg.CACert != "" {
		tlsInfo = &transport.TLSInfo{TrustedCAFile: cfg.CACert, CertFile: cfg.Cert, KeyFile: cfg.Key}
	}
	r := &recorder{start: time.Now(), prefix: cfg.Prefix, keys: cfg.Keys, stopped: make(chan struct{})}
	r.hist.Meta = history.Meta{Prefix: cfg.Prefix, Keys: cfg.Keys, Clients: cfg.Clients, Started: r.start.UTC().Format(time.RFC3339Nano)}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go stopWhen(cfg, sig, stop)

	endpoints := strings.Split(cfg.Endpoint, ",")
	lb, err := newClient(endpoints, tlsInfo)
	if err != nil {
		return fmt.Errorf("client for %s: %w", cfg.Endpoint, err)
	}
	defer lb.Close()
	from, err := firstRevision(ctx, lb, cfg)
	if err != nil {
		return err
	}
	var closers []*clientv3.Client
	defer func() {
		for _, cl := range closers {
			cl.Close()
		}
	}()
	var watchers sync.WaitGroup
	wctx, wstop := context.WithCancel(context.Background())
	defer wstop()
	for w := 0; w < 2; w++ {
		wc, err := newClient(endpoints, tlsInfo)
		if err != nil {
			return err
		}
		closers = append(closers, wc)
		watchers.Add(1)
		go r.watch(wctx, wc, w, from, &watchers)
	}
	var streams int
	var streamMu sync.Mutex
	if err := r.runClients(ctx, cfg, endpoints, tlsInfo, &streams, &streamMu, &closers); err != nil {
		return err
	}
	finalOK := r.finalOps(lb, cfg, &streams, &streamMu)
	wstop()
	watchers.Wait()
	if err := r.write(cfg.Out); err != nil {
		return err
	}
	if !finalOK {
		return fmt.Errorf("the final write never succeeded: the cluster did not come back within a minute of the stop")
	}
	return nil
}

// stopWhen calls stop on SIGTERM or SIGINT, once the stop file exists, or after the longest
// recording.
func stopWhen(cfg *Config, sig <-chan os.Signal, stop func()) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(cfg.MaxDuration)
	for {
		select {
		case <-sig:
			stop()
			return
		case <-deadline:
			stop()
			return
		case <-t.C:
			if cfg.StopFile != "" {
				if _, err := os.Stat(cfg.StopFile); err == nil {
					stop()
					return
				}
			}
		}
	}
}

// firstRevision: the watches start from the revision the first listing saw (everything after it
// is theirs); the ready file says it.
func firstRevision(ctx context.Context, lb *clientv3.Client, cfg *Config) (int64, error) {
	var from int64
	for from == 0 {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := lb.Get(gctx, cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil {
			from = resp.Header.Revision + 1
			break
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("the cluster never answered at %s: %w", cfg.Endpoint, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if cfg.ReadyFile != "" {
		if err := os.WriteFile(cfg.ReadyFile, []byte(fmt.Sprintf("%d\n", from)), 0o644); err != nil {
			return 0, fmt.Errorf("ready file: %w", err)
		}
	}
	return from, nil
}

// runClients runs the clients until ctx ends (some pinned to members), at the rate asked.
func (r *recorder) runClients(ctx context.Context, cfg *Config, endpoints []string, tlsInfo *transport.TLSInfo,
	streams *int, streamMu *sync.Mutex, closers *[]*clientv3.Client) error {
	memberURLs := []string{}
	for _, m := range strings.Split(cfg.Members, ",") {
		if m = strings.TrimSpace(m); m != "" {
			memberURLs = append(memberURLs, m)
		}
	}
	var workers sync.WaitGroup
	pause := time.Duration(float64(cfg.Clients) / cfg.Rate * float64(time.Second))
	for i := 0; i < cfg.Clients; i++ {
		urls, endpointName, onlySget := endpoints, "lb", false
		if i < cfg.Pinned && len(memberURLs) > 0 {
			onlySget = cfg.PinnedSerializable
			endpointName = memberURLs[i%len(memberURLs)]
			urls = []string{endpointName}
		}
		cl, err := newClient(urls, tlsInfo)
		if err != nil {
			return err
		}
		*closers = append(*closers, cl)
		c := &client{r: r, id: i, stream: streams, streamMu: streamMu, cli: cl, endpoint: endpointName,
			rng: rand.New(rand.NewSource(cfg.Seed + int64(i))), mods: map[string]int64{}, timeout: cfg.Timeout, onlySget: onlySget}
		c.newStream()
		workers.Add(1)
		go func() {
			defer workers.Done()
			c.loop(ctx, pause)
		}()
	}
	workers.Wait()
	return nil
}

// loop runs one client's operations until ctx ends, one every pause.
func (c *client) loop(ctx context.Context, pause time.Duration) {
	next := time.Now()
	for ctx.Err() == nil {
		c.step(context.Background())
		next = next.Add(pause)
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		} else {
			next = time.Now()
		}
		if c.failed {
			// A cluster that fails is not hammered: a short pause, as a client backs off.
			time.Sleep(250 * time.Millisecond)
			next = time.Now()
		}
	}
}

// finalOps: the last write and read must succeed (etcd's robustness tests end the same way): the
// final state every check is measured against. The write is tried for up to a minute; whether
// it succeeded.
func (r *recorder) finalOps(lb *clientv3.Client, cfg *Config, streams *int, streamMu *sync.Mutex) bool {
	fc := &client{r: r, id: cfg.Clients, stream: streams, streamMu: streamMu, cli: lb, endpoint: "lb",
		rng: rand.New(rand.NewSource(cfg.Seed)), mods: map[string]int64{}, timeout: 3 * time.Second}
	fc.newStream()
	finalOK := false
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		k, v := r.key(0), fc.value()
		o := fc.do(context.Background(), history.Op{Kind: "put", Key: k, Value: v, Final: true}, func(ctx context.Context, o *history.Op) error {
			resp, err := lb.Put(ctx, k, v)
			if err == nil {
				o.Header = header(resp.Header)
			}
			return err
		})
		if o.Status == "ok" {
			finalOK = true
			break
		}
	}
	if !finalOK {
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		o := fc.do(context.Background(), history.Op{Kind: "range", Key: cfg.Prefix, End: clientv3.GetPrefixRangeEnd(cfg.Prefix), Final: true},
			func(ctx context.Context, o *history.Op) error {
				resp, err := lb.Get(ctx, cfg.Prefix, clientv3.WithPrefix())
				if err == nil {
					o.Header, o.KVs = header(resp.Header), kvs(resp.Kvs)
				}
				return err
			})
		if o.Status == "ok" {
			break
		}
	}
	// The watches' last progress, after the final write, before they stop.
	time.Sleep(1500 * time.Millisecond)
	return true
}

// write writes the history to path.
func (r *recorder) write(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	r.mu.Lock()
	err = history.Write(f, &r.hist)
	r.mu.Unlock()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("recorded %d operations, %d watch responses in %s to %s\n", len(r.hist.Ops), len(r.hist.Watches),
		time.Since(r.start).Round(time.Millisecond), path)
	return nil
}
