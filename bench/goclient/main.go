// The benchmark's Go workload (bench/goclient.py): the Go adapter's
// AppendRunRecord as workers call it, `concurrency` goroutines of one
// process sharing one Client, each appending 1 KiB records to a run of its
// own, for `duration` after `warmup`. Prints one JSON line: ops, ops_per_s,
// p50_ms and p99_ms (the definitions of bench/stats.py).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	runstore "github.com/runstore/runstore/go"
)

func main() {
	target := flag.String("target", "", "host:port of the server")
	workerToken := flag.String("worker-token", "", "the worker's bearer token (empty: none)")
	hostToken := flag.String("host-token", "", "the host's bearer token, for CreateSession (empty: none)")
	concurrency := flag.Int("concurrency", 16, "appends in flight")
	duration := flag.Duration("duration", 3*time.Second, "the measured window")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "before the measured window")
	coalescing := flag.Bool("coalescing", true, "the client's coalescing (WithoutCoalescing when false)")
	flag.Parse()

	dial := func(token string, extra ...runstore.Option) *runstore.Client {
		options := append([]runstore.Option{runstore.WithInsecure()}, extra...)
		if token != "" {
			options = append(options, runstore.WithToken(token))
		}
		client, err := runstore.Dial(*target, options...)
		if err != nil {
			log.Fatal(err)
		}
		return client
	}
	host := dial(*hostToken)
	defer host.Close()
	var extra []runstore.Option
	if !*coalescing {
		extra = append(extra, runstore.WithoutCoalescing())
	}
	worker := dial(*workerToken, extra...)
	defer worker.Close()

	ctx := context.Background()
	stamp := fmt.Sprintf("bench-go-%d-%d", os.Getpid(), time.Now().UnixNano())
	payload := []byte(`{"data":"` + strings.Repeat("x", 1024-11) + `"}`)
	runs := make([]runstore.RunStart, *concurrency)
	for i := range runs {
		at := time.Now().UTC().Truncate(time.Millisecond)
		session := fmt.Sprintf("%s-s%d", stamp, i)
		if _, err := host.CreateSession(ctx, session, at); err != nil {
			log.Fatal(err)
		}
		runs[i] = runstore.RunStart{RunID: fmt.Sprintf("%s-r%d", stamp, i), AgentID: "bench-agent", SessionID: session, StartedAt: at}
		record := func(key, kind, body string) runstore.Record {
			return runstore.Record{EventKey: key, RunID: runs[i].RunID, AgentID: "bench-agent", SessionID: session, Type: kind, Payload: []byte(body), Timestamp: at}
		}
		if _, err := worker.StartRootRun(ctx, runs[i], record("started", "run_started", "{}"),
			record("stopped", "run_completed", `{"status":"canceled","phase":"canceled","cancellation":{"reason":"session_ended"}}`)); err != nil {
			log.Fatal(err)
		}
	}
	begin := time.Now().Add(*warmup)
	end := begin.Add(*duration)
	// The window's marks on stdout (the harness reads the server's CPU at
	// each) and this process's own CPU over it.
	marks := json.NewEncoder(os.Stdout)
	var cpuBegin, cpuEnd time.Duration
	var window sync.WaitGroup
	window.Go(func() {
		time.Sleep(time.Until(begin))
		cpuBegin = ownCPU()
		_ = marks.Encode(map[string]string{"mark": "begin"})
		time.Sleep(time.Until(end))
		cpuEnd = ownCPU()
		_ = marks.Encode(map[string]string{"mark": "end"})
	})
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Go(func() {
			var own []time.Duration
			for n := 0; ; n++ {
				started := time.Now()
				if _, err := worker.AppendRunRecord(ctx, runstore.Record{
					EventKey: fmt.Sprint("k", n), RunID: run.RunID, AgentID: run.AgentID, SessionID: run.SessionID,
					Type: "tool_result_received", Payload: payload, Timestamp: run.StartedAt,
				}); err != nil {
					log.Fatal(err)
				}
				done := time.Now()
				if done.After(end) {
					break
				}
				if started.After(begin) {
					own = append(own, done.Sub(started))
				}
			}
			mu.Lock()
			latencies = append(latencies, own...)
			mu.Unlock()
		})
	}
	wg.Wait()
	window.Wait()
	slices.Sort(latencies)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	row := map[string]any{"ops": len(latencies), "ops_per_s": float64(len(latencies)) / duration.Seconds()}
	if n := len(latencies); n > 0 {
		row["client_cpu_ms_per_op"] = ms(cpuEnd-cpuBegin) / float64(n)
		row["p50_ms"] = ms(latencies[n/2])
		row["p99_ms"] = ms(latencies[min(n-1, n*99/100)])
	}
	if err := marks.Encode(row); err != nil {
		log.Fatal(err)
	}
}

// ownCPU is this process's CPU time so far (user and system).
func ownCPU() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		log.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
