package consumer_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/inferq/inferq/consumer"
	"github.com/inferq/inferq/crash"
	"github.com/inferq/inferq/oip"
	"github.com/inferq/inferq/task"
)

// refusingDisk is crash.JournalConfig.WrapWriter for a disk that refuses
// every write while full is set.
type refusingDisk struct{ full atomic.Bool }

func (d *refusingDisk) wrap(w io.WriterAt) io.WriterAt { return refusingWriter{d, w} }

type refusingWriter struct {
	d *refusingDisk
	w io.WriterAt
}

func (w refusingWriter) WriteAt(p []byte, off int64) (int, error) {
	if w.d.full.Load() {
		return 0, &os.PathError{Op: "write", Path: "attempts.journal", Err: syscall.ENOSPC}
	}
	return w.w.WriteAt(p, off)
}

// A full data dir (issue 27 item 6): tasks keep running, the journal's
// failure is one warning (not an ERROR line per task), /readyz says so
// (journal_ok false, 503) until the disk has room again.
func TestJournalFullDiskServes(t *testing.T) {
	disk := &refusingDisk{}
	var consumerLogs, journalLogs lockedBuffer
	j, err := crash.NewJournal(crash.JournalConfig{Dir: t.TempDir(), WrapWriter: disk.wrap,
		Logger: slog.New(slog.NewTextHandler(&journalLogs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	h := newHarness(t, func(c *harnessConfig) {
		c.configure = func(cc *consumer.Config) {
			cc.Journal = j
			cc.Logger = slog.New(slog.NewTextHandler(&consumerLogs, nil))
		}
	})
	srv := httptest.NewServer(oip.Handler(h.cons, oip.HTTPConfig{Gatherer: h.reg, Metrics: h.met}))
	t.Cleanup(srv.Close)
	readyz := func() (int, map[string]bool) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]bool
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	waitFor(t, 10e9, "ready", func() bool { code, _ := readyz(); return code == http.StatusOK })

	disk.full.Store(true)
	const tasks = 20
	for i := range tasks {
		h.send(fmt.Sprintf("full-%d", i), 1, float32(i))
	}
	for i := range tasks {
		if r := h.record(fmt.Sprintf("full-%d", i)); r.Status != task.StatusSuccess {
			t.Errorf("task %d on a full data dir: %s %q", i, r.Status, r.Error)
		}
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || body["journal_ok"] || body["ready"] {
		t.Errorf("/readyz with a journal the disk refuses: %d %v, want 503 with journal_ok false", code, body)
	}
	if st := j.Stats(); !st.Failing || st.WriteErrors < tasks {
		t.Errorf("journal stats: %+v, want failing with at least %d errors", st, tasks)
	}
	if n := strings.Count(strings.Join(journalLogs.lines(), "\n"), "level=WARN"); n != 1 {
		t.Errorf("%d journal warnings for %d tasks, want 1:\n%s", n, tasks, strings.Join(journalLogs.lines(), "\n"))
	}
	if out := strings.Join(consumerLogs.lines(), "\n"); strings.Contains(out, "journal") {
		t.Errorf("the consumer logs the journal's failures itself:\n%s", out)
	}

	disk.full.Store(false)
	h.send("room-again", 1, 99)
	if r := h.record("room-again"); r.Status != task.StatusSuccess {
		t.Errorf("task after the disk has room: %s", r.Status)
	}
	if code, body := readyz(); code != http.StatusOK || !body["journal_ok"] {
		t.Errorf("/readyz once the journal is written again: %d %v", code, body)
	}
}
