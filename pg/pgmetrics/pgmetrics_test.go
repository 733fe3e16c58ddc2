package pgmetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/pg"
	"github.com/mooncake-go/mooncake/worker"
)

// scrape returns the exporter's /metrics lines (no comments) served over HTTP.
func scrape(t *testing.T, e *Exporter) map[string]string {
	t.Helper()
	addr, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		out[line[:i]] = line[i+1:]
	}
	return out
}

func want(t *testing.T, got map[string]string, series, value string) {
	t.Helper()
	if v, ok := got[series]; !ok || v != value {
		t.Errorf("%s = %q (present %v), want %s", series, v, ok, value)
	}
}

type codedErr struct{ code int }

func (e codedErr) Error() string { return "coded " + strconv.Itoa(e.code) }
func (e codedErr) Code() int     { return e.code }

func TestObserverCountsExactly(t *testing.T) {
	e := New()
	defer e.Close()
	g := e.Group("", 1, 4, Backend(pg.DeviceCPU))
	g.OpDone("all_reduce", 1024, 2*time.Millisecond, nil)
	g.OpDone("all_reduce", 1024, 3*time.Millisecond, &worker.Degraded{Failed: []int{2}})
	g.OpDone("all_reduce", 512, time.Second, fmt.Errorf("all_reduce: %w", worker.ErrTimeout))
	g.OpDone("broadcast", 8, time.Millisecond, codedErr{pg.CodeTransferFail})
	g.OpDone("barrier", 0, time.Millisecond, codedErr{pg.CodeInvalidParams})
	g.OpDone("send", 64, time.Millisecond, fmt.Errorf("send: %w", worker.ErrClosed))
	g.OpDone("recv", 64, time.Millisecond, errors.New("something else"))
	g.OpDone("new_op", 3, time.Millisecond, nil)
	g.ViewChanged(pg.View{Epoch: 0, Active: []bool{true, true, true, false}, Decisions: 0, Member: true})
	g.ViewChanged(pg.View{Epoch: 2, Active: []bool{true, true, false, false}, Decisions: 2, Member: true})
	g.ViewChanged(pg.View{Epoch: 3, Active: []bool{true, false, false, false}, Decisions: 3, Member: false})

	m := scrape(t, e)
	l := `backend="mooncake-cpu",collective="all_reduce",group="default",rank="1"`
	want(t, m, "mooncake_pg_ops_total{"+l+"}", "3")
	want(t, m, "mooncake_pg_op_bytes_total{"+l+"}", "2560")
	want(t, m, "mooncake_pg_op_degraded_total{"+l+"}", "1")
	want(t, m, "mooncake_pg_op_duration_seconds_count{"+l+"}", "3")
	want(t, m, "mooncake_pg_op_duration_seconds_sum{"+l+"}", "1.005")
	want(t, m, "mooncake_pg_op_duration_seconds_bucket{"+l+`,le="0.00256"}`, "1")
	want(t, m, "mooncake_pg_op_duration_seconds_bucket{"+l+`,le="0.00512"}`, "2")
	want(t, m, "mooncake_pg_op_duration_seconds_bucket{"+l+`,le="+Inf"}`, "3")
	want(t, m, "mooncake_pg_op_failures_total{"+l+`,reason="timeout"}`, "1")
	want(t, m, "mooncake_pg_op_failures_total{"+l+`,reason="transfer_fail"}`, "0")
	for op, reason := range map[string]string{"broadcast": "transfer_fail", "barrier": "invalid_params", "send": "closed", "recv": "other"} {
		lo := `backend="mooncake-cpu",collective="` + op + `",group="default",rank="1"`
		want(t, m, "mooncake_pg_op_failures_total{"+lo+`,reason="`+reason+`"}`, "1")
		want(t, m, "mooncake_pg_ops_total{"+lo+"}", "1")
	}
	// Every op of pg.Ops has its series from the start.
	for _, op := range pg.Ops {
		lo := `backend="mooncake-cpu",collective="` + op + `",group="default",rank="1"`
		for _, reason := range Reasons {
			if _, ok := m["mooncake_pg_op_failures_total{"+lo+`,reason="`+reason+`"}`]; !ok {
				t.Errorf("no failures series for %s/%s", op, reason)
			}
		}
	}
	want(t, m, `mooncake_pg_ops_total{backend="mooncake-cpu",collective="new_op",group="default",rank="1"}`, "1")
	want(t, m, `mooncake_pg_epoch{group="default",rank="1"}`, "3")
	want(t, m, `mooncake_pg_active_ranks{group="default",rank="1"}`, "1")
	want(t, m, `mooncake_pg_group_slots{group="default",rank="1"}`, "4")
	want(t, m, `mooncake_pg_member{group="default",rank="1"}`, "0")
	want(t, m, `mooncake_pg_membership_changes_total{group="default",rank="1"}`, "3")
	if _, ok := m["process_cpu_seconds_total"]; !ok {
		t.Error("no process collector")
	}
}

func TestServeOnceAndClose(t *testing.T) {
	e := New()
	a1, err := e.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := e.Serve("127.0.0.1:0")
	if err != nil || a2.String() != a1.String() {
		t.Fatalf("second Serve: %v %v, want the first server's %v", a2, err, a1)
	}
	// A taken port is an error that names it.
	e2 := New()
	if _, err := e2.Serve(a1.String()); err == nil || !strings.Contains(err.Error(), a1.String()) {
		t.Fatalf("Serve on a taken port: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + a1.String() + "/metrics"); err == nil {
		t.Fatal("server still answers after Close")
	}
}

// TestRealGroup runs three ranks of a real group (an engine each, one exporter for the
// "process") through ops, a point-to-point exchange and a deactivation, and checks the series.
func TestRealGroup(t *testing.T) {
	const n = 3
	e := New()
	defer e.Close()
	store := pg.NewMemStore()
	gs := make([]*pg.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eng, err := engine.New(context.Background(), engine.Config{LocalServerName: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { eng.Close() })
			cfg := pg.Config{Rank: r, Size: n, Timeout: 20 * time.Second, Name: "train"}
			cfg.Options.Observer = e.Group(cfg.Name, r, n, Backend(cfg.DeviceType))
			gs[r], errs[r] = pg.New(cfg, store, p2p.EngineFabric(eng))
			if errs[r] == nil {
				t.Cleanup(func() { gs[r].Close() })
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	run := func(f func(r int, g *pg.Group) (*worker.Work, error)) {
		t.Helper()
		ws := make([]*worker.Work, n)
		for r, g := range gs {
			w, err := f(r, g)
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			ws[r] = w
		}
		for r, w := range ws {
			if w == nil {
				continue
			}
			if err := w.Wait(20 * time.Second); err != nil {
				t.Fatalf("rank %d %s: %v", r, w.Op(), err)
			}
		}
	}
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = make([]byte, 4096)
	}
	for range 2 {
		run(func(r int, g *pg.Group) (*worker.Work, error) {
			return g.AllReduce(bufs[r], reduce.Float32, reduce.Sum)
		})
	}
	run(func(r int, g *pg.Group) (*worker.Work, error) { return g.Barrier() })
	run(func(r int, g *pg.Group) (*worker.Work, error) {
		switch r {
		case 0:
			return g.Send(make([]byte, 100), 1, 7)
		case 1:
			return g.Recv(make([]byte, 100), 0, 7)
		}
		return nil, nil
	})
	// Ranks 0 and 1 deactivate rank 2 (which stops taking part).
	var mw sync.WaitGroup
	for _, r := range []int{0, 1} {
		mw.Add(1)
		go func() {
			defer mw.Done()
			if res, err := gs[r].Membership(pg.Request{Op: "deactivate", Ranks: []int{2}}); err != nil || res.Status != pg.ProposalApplied {
				t.Errorf("rank %d deactivate: %+v %v", r, res, err)
			}
		}()
	}
	mw.Wait()

	m := scrape(t, e)
	for r := range n {
		l := fmt.Sprintf(`backend="mooncake-cpu",collective="all_reduce",group="train",rank="%d"`, r)
		want(t, m, "mooncake_pg_ops_total{"+l+"}", "2")
		want(t, m, "mooncake_pg_op_bytes_total{"+l+"}", "8192")
		want(t, m, "mooncake_pg_op_duration_seconds_count{"+l+"}", "2")
		want(t, m, "mooncake_pg_op_failures_total{"+l+`,reason="transfer_fail"}`, "0")
		want(t, m, fmt.Sprintf(`mooncake_pg_ops_total{backend="mooncake-cpu",collective="barrier",group="train",rank="%d"}`, r), "1")
		want(t, m, fmt.Sprintf(`mooncake_pg_group_slots{group="train",rank="%d"}`, r), "3")
	}
	want(t, m, `mooncake_pg_ops_total{backend="mooncake-cpu",collective="send",group="train",rank="0"}`, "1")
	want(t, m, `mooncake_pg_op_bytes_total{backend="mooncake-cpu",collective="send",group="train",rank="0"}`, "100")
	want(t, m, `mooncake_pg_ops_total{backend="mooncake-cpu",collective="recv",group="train",rank="1"}`, "1")
	want(t, m, `mooncake_pg_op_bytes_total{backend="mooncake-cpu",collective="recv",group="train",rank="1"}`, "100")
	want(t, m, `mooncake_pg_ops_total{backend="mooncake-cpu",collective="send",group="train",rank="1"}`, "0")
	for _, r := range []int{0, 1} {
		want(t, m, fmt.Sprintf(`mooncake_pg_epoch{group="train",rank="%d"}`, r), "1")
		want(t, m, fmt.Sprintf(`mooncake_pg_active_ranks{group="train",rank="%d"}`, r), "2")
		want(t, m, fmt.Sprintf(`mooncake_pg_member{group="train",rank="%d"}`, r), "1")
		want(t, m, fmt.Sprintf(`mooncake_pg_membership_changes_total{group="train",rank="%d"}`, r), "1")
	}
	// Rank 2 did not take part in the decision: its view is still the initial one.
	want(t, m, `mooncake_pg_epoch{group="train",rank="2"}`, "0")
	want(t, m, `mooncake_pg_active_ranks{group="train",rank="2"}`, "3")
	want(t, m, `mooncake_pg_membership_changes_total{group="train",rank="2"}`, "0")
}
